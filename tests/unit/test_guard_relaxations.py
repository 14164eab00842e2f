"""The guard's relaxations for what honest projects do themselves (a held-out type checker's suite
scored every gold patch ``tampered``), against the red team that attacked them
(tests/fixtures/guard_attacks): each attack forged passes unseen under the first version of the
relaxations and is found now. The honest cases are in test_guard.py (``HONEST``)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from test_guard import (  # tests/unit, which pytest puts on sys.path
    MIXINS,
    TESTS,
    project_with_start,
)

from taskforge import guest

ATTACKS = Path(__file__).resolve().parents[1] / "fixtures" / "guard_attacks"
sys.path.insert(0, str(ATTACKS))
import attack_a_feature_decorator as a  # noqa: E402
import attack_b_any_test_via_wrapped as b  # noqa: E402
import attack_d_launder_code_swap as d  # noqa: E402
import attack_e_launder_class_swap as e  # noqa: E402
import attack_f_start_state_code_swap as f  # noqa: E402
import attack_g_pytester_lookalike as g  # noqa: E402
import attack_h_thread_wait as h  # noqa: E402
import attack_i_inside_the_check as i  # noqa: E402
import attack_j_keys_and_callbacks as j  # noqa: E402
import attack_k_lookups_and_trace as k  # noqa: E402

sys.path.remove(str(ATTACKS))


def _run(tmp: Path, feature: str, *, tests: str = TESTS, start: str | None = None,
         extra: dict[str, str] | None = None) -> tuple[list[str], dict[str, str]]:
    """The guard's findings and each test's outcome in the report, with taskforge's report plugin
    loaded as the scorer loads it."""
    project = project_with_start(tmp, start)
    (project / "test_feature.py").write_text(tests)
    (project / "mixins.py").write_text(MIXINS)
    for name, text in (extra or {}).items():
        (project / name).write_text(text)
    (project / "feature.py").write_text(feature)
    digests = {str((project / name).resolve()): hashlib.sha256(text.encode()).hexdigest()
               for name, text in (("test_feature.py", tests), ("mixins.py", MIXINS))}
    plugins = tmp / "plugins"
    plugins.mkdir()
    shutil.copy(guest.source_path("guard"), plugins / "taskforge_pytest_guard.py")
    shutil.copy(guest.source_path("plugin"), plugins / "taskforge_pytest_plugin.py")
    env = {**os.environ, "PYTHONPATH": f"{plugins}{os.pathsep}{project}", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
           "TASKFORGE_GUARD_CANDIDATE": json.dumps([str((project / "feature.py").resolve())]),
           "TASKFORGE_GUARD_TESTS": json.dumps(digests), "TASKFORGE_GUARD_TRUSTED": "[]",
           **({"TASKFORGE_GUARD_START": str(project)} if start is not None else {})}
    report = tmp / "report.xml"
    subprocess.run([sys.executable, "-m", "pytest", "-p", "taskforge_pytest_plugin", "-p", "taskforge_pytest_guard",
                    "-p", "no:cacheprovider", f"--junitxml={report}", "-q", "test_feature.py"], cwd=project, env=env,
                   capture_output=True, text=True, timeout=180, check=False)
    root = ET.parse(report).getroot()
    props = [(p.get("name"), p.get("value") or "") for p in root.iter("property")]
    assert ("taskforge.guard", "1") in props, props
    outcomes = {f"{case.get('classname')}::{case.get('name')}":
                next((c.tag for c in case if c.tag in ("failure", "error", "skipped")), "passed")
                for case in root.iter("testcase")}
    return [value for name, value in props if name == "taskforge.tampered"], outcomes


ATTACKED = {
    "the feature's decorator re-wraps every decorated test": (a.FEATURE, {}, "runs under a wrapper from the candidate"),
    "any test's wrapper points __wrapped__ at a decorated function of pytest's": (
        b.FEATURE, {}, "runs under a wrapper from the candidate"),
    "a test file's wrapper's code swapped from an exec of a stdlib module's body": (
        d.FEATURE, {}, "the code of test_under_a_wrapper swapped from"),
    "pytest's SetupState and the items' classes swapped from an exec of a stdlib module's body": (
        e.FEATURE, {}, "the class of SetupState swapped from"),
    "a start-state function registered as a hook, its code swapped": (
        f.FEATURE, {"start": f.START}, "the code of triple swapped from"),
    "a lookalike of pytester's assertions in sys.modules and on its package": (
        g.G1, {"tests": g.TESTS_PYTESTER, "extra": {"conftest.py": g.CONFTEST}}, "added _pytest.pytester_assertions"),
    "threading.enumerate rebound to undo a forging patch as the guard's wait lists threads": (
        h.H_ENUMERATE, {}, "replaced _pytest.reports.TestReport.from_item_and_call"),
    "a thread's own _wait_for_tstate_lock undoing a forging patch as the guard waits for it": (
        h.H_JOIN, {}, "replaced _pytest.reports.TestReport.from_item_and_call"),
    "a thread that rebinds its own _target and run to the standard library's once started": (
        h.H_TARGET, {}, "a thread runs"),
    "a thread's target whose __getattr__ undoes a forging patch as the guard judges the target": (
        h.H_GETATTR, {}, "replaced _pytest.reports.TestReport.from_item_and_call"),
    "a thread whose target is a loop of C callables over the candidate's partials": (h.H_CLOOP, {}, "a thread runs"),
    "a thread whose target is a C callable and whose arguments drive a loop of calls": (
        h.H_CLOOP_ARGS, {}, "a thread runs"),
    "a C loop started with _thread.start_new_thread, with no Python frame at all": (
        h.H_CLOOP_RAW, {}, "no Python frame"),
    "a C loop submitted to a thread pool, whose worker's frames are the standard library's": (
        h.H_CLOOP_POOL, {}, "a thread runs"),
    "a C loop run by threading.Timer, which keeps its function outside _target": (
        h.H_CLOOP_TIMER, {}, "a thread runs"),
    "a thread's argument whose __class__ property runs inside the check": (
        i.I_CLASS_PROPERTY, {}, "replaced _pytest.reports.TestReport.from_item_and_call"),
    "a thread's argument whose metaclass __eq__ runs inside the check": (
        i.I_METACLASS_EQ, {}, "replaced _pytest.reports.TestReport.from_item_and_call"),
    "a handler of a signal no list named, a child process its clock": (i.I_SIGNAL, {}, "the handler of signal"),
    "a C loop bound as a method's __self__, in step with the check's lock": (i.I_METHOD_SELF, {}, "a thread runs"),
    "a raw thread's C loop that waits in the standard library's Python": (
        i.I_RAW_WAITS, {}, "a thread runs a thread started outside threading"),
    "a key hashing as __slots__ in a thread class's namespace": (j.J_SLOTS_KEY, {}, "replaced _pytest"),
    "a gc callback that is a dict's get, its key the candidate's": (j.J_GC_CALLBACK, {}, "a gc callback runs"),
    "cyclic garbage whose __del__ the check's collections ran": (j.J_DEL_CYCLE, {}, "replaced _pytest"),
    "a signal handler that is a dict's get, in step with the check's lock": (
        j.J_SIGNAL_KEY, {}, "the handler of signal"),
    "threading.setprofile, installed by threading in every thread it starts": (
        j.J_THREAD_PROFILE, {}, "threading._profile_hook runs"),
    "a Thread subclass's __getattribute__ and a proxy writer, run by the check's lookups": (
        k.K2_INSIDE_THE_CHECK, {}, "a thread runs"),
    "a trace function set by contextlib's callback as a signal handler": (
        k.L2_TRACE_FROM_A_SIGNAL, {}, "the trace function runs"),
    "a plugin registered during a test, its setup and teardown hooks toggling a patch": (
        k.K1_TRANSIENT_PLUGIN, {}, "hook pytest_runtest_setup implemented in"),
}


@pytest.mark.parametrize("attack", sorted(ATTACKED))
def test_an_attack_on_the_relaxations_is_found(tmp_path: Path, attack: str) -> None:
    feature, options, finding = ATTACKED[attack]
    findings, _ = _run(tmp_path, feature, **options)
    assert any(finding in f for f in findings), findings


def test_an_honest_pytester_run_keeps_its_outcomes(tmp_path: Path) -> None:
    """The suite the lookalike attack runs, with an honest feature: no finding, every test passes."""
    findings, outcomes = _run(tmp_path, "def double(x):\n    return 2 * x\n", tests=g.TESTS_PYTESTER,
                              extra={"conftest.py": g.CONFTEST})
    assert findings == [] and set(outcomes.values()) == {"passed"}, (findings, outcomes)


HONEST_THREADS = {
    "a sched scheduler run in a thread, its next action a C method": (i.HONEST_SCHED, {}),
    "a project's flusher thread with a C clock and a list of sinks": (i.HONEST_FLUSHER, {"worker.py": i.FLUSHER}),
    "a Timer that clears an lru_cache": (j.HONEST_TIMER_CACHE, {}),
    "a sched scheduler whose next action clears an OrderedDict": (j.HONEST_SCHED_ORDERED, {}),
    "a project's reader thread pumping a child's lines into a deque's append": (j.HONEST_TAIL, {"worker.py": j.TAIL}),
    "a project's heartbeat started with _thread.start_new_thread": (j.HONEST_HEARTBEAT, {"worker.py": j.HEARTBEAT}),
    "a conftest's thread on a partial holding a namedtuple": (
        "def double(x):\n    return 2 * x\n", {"conftest.py": k.CONFTEST_NAMEDTUPLE}),
}


@pytest.mark.parametrize("case", sorted(HONEST_THREADS))
def test_an_honest_thread_that_calls_c_code_is_no_tampering(tmp_path: Path, case: str) -> None:
    """What the loop-in-C rule's first two versions took for one (the ninth and tenth red teams')."""
    feature, extra = HONEST_THREADS[case]
    findings, outcomes = _run(tmp_path, feature, extra=extra)
    assert findings == [] and set(outcomes.values()) == {"passed"}, (findings, outcomes)
