"""Tamper-resistant, test-based rewards: score a candidate patch against a task.

    with Scorer(backend=open_backend("docker")) as scorer:
        result = scorer.score(task, patch)            # RewardResult
        results = scorer.score_many([(task, patch, "rollout-7"), ...])

One scoring, in order:

1. The task's start state is rebuilt from its row (``validate.rebuild_start_state``; cached per task).
2. The candidate patch is applied to it with ``git apply`` on the host. Each changed path is sorted
   by ``taskforge.scoring.tamper.classify_change``: changes to tests, ``conftest.py``, pytest configuration,
   ``.pth``/``sitecustomize`` start-up hooks, installed metadata, compiled code and symlinks are
   dropped and recorded, and the ones that can only be tampering make the candidate score 0 with
   status ``tampered``. The Python the candidate writes is linted against the gold version of the
   same file (``taskforge.scoring.tamper.lint_python``): harness imports, exits at import, always-equal
   objects, forged reports and network fetches are tampering too.
3. The hidden tests (``test_patch``) are put back over the trusted test files.
4. A pre-started container of the task's environment image (a fresh one per scoring, from a pool)
   gets the state, and runs FAIL_TO_PASS and PASS_TO_PASS only: ``python -P`` (the workspace never
   shadows the harness), plugin autoloading off (only the image's own pytest plugins, named with
   ``-p``), the report written to /tmp/taskforge, outside the workspace, with a nonce new to this
   run, and the guard plugin (``taskforge.guest.guard``) watching pytest's reporting machinery.
5. Every expected test must be reported ``passed``; a missing, skipped, xfailed, errored or
   timed-out test counts as failed. The report must carry the run's nonce and the guard's mark, and
   pytest's exit code must agree with it (0 exactly when every selected test passed).

Reward (../shared/ARCHITECTURE.md): ``binary`` is 1.0 when every FAIL_TO_PASS and PASS_TO_PASS test
passes, else 0.0; ``partial`` is the passing fraction of FAIL_TO_PASS while every PASS_TO_PASS
test passes, else 0.0. Any status but ``ok`` scores 0.0.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import io
import json
import random
import shutil
import tempfile
import threading
import time
import tokenize
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath
from typing import Any, Literal, Self

from taskforge import guest
from taskforge.errors import SandboxError, TaskforgeError, TestRunError
from taskforge.repo.canaries import Twin, make_twins, place_twin, twin_ids
from taskforge.repo.environment import Environment, ensure_image
from taskforge.repo.patches import StateTrees, apply_patch
from taskforge.repo.sources import Snapshot
from taskforge.repo.startstate import rebuild_start_state
from taskforge.repo.suite import RunResult, SuiteRunner, plugins_off
from taskforge.repo.testfiles import TestLayout
from taskforge.sandbox import Sandbox, SandboxBackend, SandboxLimits
from taskforge.scoring.pool import ContainerPool, lay_task_tree
from taskforge.scoring.rewards import (
    MODES,
    SCORER_VERSION,
    RewardMode,
    RewardResult,
    RewardStatus,
    compute_reward,
    load_predictions,
)
from taskforge.scoring.tamper import (
    DEFAULT_CONFIG_FILES,
    TestPaths,
    classify_change,
    lint_python,
    lint_text,
    new_findings,
)
from taskforge.scoring.verdict import (
    Part,
    every_twin_placed,
    fails_as_twin,
    judge_run,
    one_twin_per_test,
    plan_runs,
    task_canaries,
)
from taskforge.task import Task

__all__ = [
    "MODES",
    "SCORER_VERSION",
    "ContainerPool",
    "RewardMode",
    "RewardResult",
    "RewardStatus",
    "Scorer",
    "compute_reward",
    "gate_scorer",
    "load_predictions",
]

GUARD_MODULE = "taskforge_pytest_guard"
_GUARD_SOURCE = guest.source_path("guard")
_MAX_PATCH_BYTES = 8 * 1024 * 1024
_MAX_GUARDED_FILES = 400
_MAX_AGAIN = 10
"""A scoring whose only failures are at most this many PASS_TO_PASS tests, and that is clean
otherwise, is scored once more in full (a test that depends on timing fails under load; a
candidate that breaks more is not scored again)."""
_FACTS_SCRIPT = r"""
import importlib.metadata as m, json, re
plugins = sorted({(ep.name, ep.module) for ep in m.entry_points(group="pytest11")})
names = []
try:  # the configuration files this pytest reads, from its own code: no list of ours to fall behind
    import _pytest.config.findpaths as f

    def consts(code):
        for c in code.co_consts:
            if isinstance(c, str):
                yield c
            elif isinstance(c, (tuple, frozenset)):
                yield from (x for x in c if isinstance(x, str))
            elif hasattr(c, "co_consts"):
                yield from consts(c)

    names = sorted({c for c in consts(f.locate_config.__code__) if re.fullmatch(r"\.?[\w-]+\.(ini|toml|cfg)", c)})
except Exception:
    pass
print(json.dumps({"plugins": plugins, "config_files": names}))
"""
"""Run in a container of the image whose workspace is still empty: the installed pytest plugins,
and the names of the configuration files the installed pytest reads."""


@dataclass(frozen=True, slots=True)
class _ImageFacts:
    plugins: list[tuple[str, str]]
    """The installed pytest plugins: (entry point name, module)."""
    config_files: frozenset[str]


@dataclass(kw_only=True, slots=True)
class _TaskState:
    start: Snapshot
    env: Environment
    tests: TestPaths
    gold: dict[str, str | None]
    """Start state → gold, as changes (the lint's reference for each file)."""
    hidden: dict[str, str | None]
    """Start state → start state + test_patch, as changes (the trusted tests put back)."""
    _python_files: list[str] | None = None

    def python_files(self) -> list[str]:
        """The Python files of the start state with the hidden tests, repo-relative, sorted."""
        if self._python_files is None:
            found = {p.relative_to(self.start.path).as_posix() for p in self.start.path.rglob("*.py")
                     if ".git" not in p.parts and p.is_file()}
            found |= {rel for rel, text in self.hidden.items() if rel.endswith(".py") and text is not None}
            self._python_files = sorted(found)
        return self._python_files


@dataclass(kw_only=True, slots=True)
class _Prepared:
    changes: dict[str, bytes | None]
    """The state to run: the candidate's kept changes and the hidden tests."""
    kept: list[str]
    dropped: list[str]
    tampering: list[str]


class _PatchFailed(Exception):
    pass


_PER_SCORING = 2
"""Containers one scoring takes: two runs with canaries (``verdict.plan_runs``)."""
CALIBRATION_RUNS = 2
"""Fresh runs of the gold patch a canary must fail, every one, to be kept (:meth:`Scorer.calibrate`)."""
GATE_REPAIRS = 2
"""How many times :meth:`Scorer.confirm` drops the twins gold passed in place and scores again."""
_CANARY_TAMPER = "canary: a twin of "


class _Batch:
    """What a ``score_many`` batch still asks for, shared by its threads: how many scorings of
    each image have not yet started, and the image that follows each run of scorings of one
    image in the batch's order."""

    def __init__(self, images: Sequence[str]) -> None:
        self._lock = threading.Lock()
        self._waiting: dict[str, int] = {}
        for image in images:
            self._waiting[image] = self._waiting.get(image, 0) + 1
        # For each scoring, the image of the next run of scorings (one pass, from the end).
        self._after: list[str | None] = [None] * len(images)
        for number in range(len(images) - 2, -1, -1):
            following = images[number + 1]
            self._after[number] = following if following != images[number] else self._after[number + 1]

    def start(self, image: str) -> None:
        with self._lock:
            self._waiting[image] -= 1

    def wanted(self, number: int, image: str) -> tuple[str, int] | None:
        """After scoring ``number`` (of ``image``): the image whose containers to start next, and
        how many scorings will ask for them (None: nothing more is coming)."""
        with self._lock:
            if self._waiting[image]:
                return image, self._waiting[image]
            later = self._after[number]
            return (later, self._waiting[later]) if later is not None and self._waiting[later] else None


class Scorer:
    """Scores candidate patches against tasks (see the module docstring).

    ``concurrency`` bounds how many scorings run at once (each in its own container; ``score``
    blocks for a slot); ``prestart`` is how many containers the pool keeps started ahead
    (default: ``4 * concurrency``, two scorings with canaries per slot); ``timeout_s`` bounds one
    test run.
    """

    def __init__(
        self,
        *,
        backend: SandboxBackend,
        limits: SandboxLimits | None = None,
        timeout_s: float = 600.0,
        concurrency: int = 1,
        prestart: int | None = None,
        mode: RewardMode = "binary",
        labels: Mapping[str, str] | None = None,
    ) -> None:
        """``labels`` go on every container the scorer starts (besides ``taskforge.role=score``)."""
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {concurrency}")
        if mode not in MODES:
            raise ValueError(f"unknown reward mode {mode!r}; known: {', '.join(MODES)}")
        self.backend = backend
        # The scorer's containers start their init as root with SETUID and SETGID alone, for the
        # supervisor that reads the outcomes as the tests run (taskforge/guest/supervisor.py).
        self.limits = replace(limits or SandboxLimits.load(), supervisor=True)
        self.timeout_s = timeout_s
        self.concurrency = concurrency
        self.mode: RewardMode = mode
        # A task with canaries runs its tests in two containers at once (see verdict.plan_runs);
        # the pool holds two scorings' worth for each slot, as a scoring's runs take containers
        # without refilling, and the refill starts when they are done (``_runs``).
        self.pool = ContainerPool(backend, limits=self.limits, size=4 * concurrency if prestart is None else prestart,
                                  labels=labels)
        self._slots = threading.BoundedSemaphore(concurrency)
        self._work = tempfile.TemporaryDirectory(prefix="taskforge-score-")
        self._states: dict[str, _TaskState] = {}
        self._state_locks: dict[str, threading.Lock] = {}
        self._facts: dict[str, _ImageFacts] = {}
        self._images: dict[str, str] = {}
        """Images made sure of: image name → "" when it is there, else why it could not be rebuilt."""
        self._image_locks: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()
        self._ahead = threading.local()
        """``value``: what a ``score_many`` batch asks for after this thread's scoring (``_Batch.wanted``)."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.pool.close()
        self._work.cleanup()

    # -- the public calls --------------------------------------------------------------------------

    def warm(self, task: Task) -> None:
        """Rebuild ``task``'s start state and start filling the pool with its image, ahead of time."""
        self._ensure_image(task)
        self._state(task)
        self.pool.warm(task.image_name)

    def score(self, task: Task, patch: str, *, candidate_id: str = "", mode: RewardMode | None = None,
              timeout_s: float | None = None,
              tests: Literal["all", "fail_to_pass"] = "all") -> RewardResult:
        """Score one candidate ``patch`` (a unified diff against the start state) for ``task``.

        ``tests="fail_to_pass"`` runs FAIL_TO_PASS alone: the quick way to show that a patch earns
        nothing, since any of them failing makes the binary reward 0 whatever PASS_TO_PASS do.
        PASS_TO_PASS are then ``not_run``, so the reward is 0; read ``fail_to_pass`` for the answer.
        """
        if tests not in ("all", "fail_to_pass"):
            raise ValueError(f"tests must be all or fail_to_pass, got {tests!r}")
        mode = mode or self.mode
        if mode not in MODES:
            raise ValueError(f"unknown reward mode {mode!r}; known: {', '.join(MODES)}")
        started = time.monotonic()
        result = RewardResult(instance_id=task.instance_id, candidate_id=candidate_id, reward=0.0, mode=mode,
                              status="ok", image_name=task.image_name, patch=patch, task_sha256=task.grading_sha256,
                              fail_to_pass=dict.fromkeys(task.FAIL_TO_PASS, "not_run"),
                              pass_to_pass=dict.fromkeys(task.PASS_TO_PASS, "not_run"))
        with self._slots:
            try:
                self._score(task, patch, result, tests, timeout_s or self.timeout_s)
            except TaskforgeError as err:
                result.status, result.detail = "infra_error", f"{err} [{err.reason}]"
            except Exception as err:  # the per-candidate boundary: one scoring's failure must not end a batch
                result.status, result.detail = "infra_error", f"{type(err).__name__}: {err}"[:500]
        if result.status != "ok":
            result.reward = 0.0
        result.duration_s = time.monotonic() - started
        return result

    def score_many(
        self,
        items: Iterable[tuple[Task, str] | tuple[Task, str, str]],
        *,
        mode: RewardMode | None = None,
        on_result: Callable[[RewardResult], None] | None = None,
    ) -> list[RewardResult]:
        """Score many ``(task, patch[, candidate_id])`` at up to ``concurrency`` at once; results
        come back in the order given (``on_result`` sees each as it finishes)."""
        work = [(item[0], item[1], item[2] if len(item) > 2 else "") for item in items]  # type: ignore[misc]
        batch = _Batch([task.image_name for task, _, _ in work])

        def one(index: int) -> RewardResult:
            task, patch, candidate_id = work[index]
            batch.start(task.image_name)
            self._ahead.value = functools.partial(batch.wanted, index, task.image_name)
            try:
                result = self.score(task, patch, candidate_id=candidate_id, mode=mode)
            finally:
                self._ahead.value = None
            if on_result is not None:
                on_result(result)
            return result

        with ThreadPoolExecutor(max_workers=self.concurrency, thread_name_prefix="taskforge-score") as pool:
            return list(pool.map(one, range(len(work))))

    # -- one scoring --------------------------------------------------------------------------------

    def _score(self, task: Task, patch: str, result: RewardResult, tests: str, timeout_s: float) -> None:
        applying = time.monotonic()
        self._ensure_image(task)
        state = self._state(task)
        try:
            prepared = self._prepare(task, state, patch)
        except _PatchFailed as err:
            result.status, result.detail = "patch_failed", str(err)
            return
        finally:
            result.apply_s = time.monotonic() - applying
        result.dropped, result.tampering = prepared.dropped, prepared.tampering
        if prepared.tampering:
            result.status, result.detail = "tampered", prepared.tampering[0]
            return
        testing = time.monotonic()
        selected = [*task.FAIL_TO_PASS, *(task.PASS_TO_PASS if tests == "all" else ())]
        try:
            pairs = self._runs(task, state, prepared, selected, timeout_s)
            again = _worth_scoring_again(task, pairs) if tests == "all" else []
            if again:
                # A new plan (new placings, new twins), judged whole: the first scoring's runs do not count.
                pairs = self._runs(task, state, prepared, selected, timeout_s)
        except TestRunError as err:  # the report does not carry this run's nonce
            result.status, result.detail = "tampered", f"{err}"
            result.tampering.append(f"report: {err}")
            return
        except SandboxError as err:
            result.status, result.detail = "infra_error", f"{err} [{err.reason}]"
            return
        finally:
            result.test_s = time.monotonic() - testing
        self._judge(task, pairs, result, tests, timeout_s=timeout_s)
        if again and result.status == "ok":
            note = (f"scored twice: {len(again)} PASS_TO_PASS test(s) failed in a first scoring that was otherwise "
                    f"clean (first: {again[0]})")
            result.detail = f"{note}; {result.detail}" if result.detail else note

    def _runs(self, task: Task, state: _TaskState, prepared: _Prepared, selected: list[str],
              timeout_s: float) -> list[tuple[Part, RunResult]]:
        """One scoring's runs (``plan_runs``: two at once with canaries), each with what it ran."""
        plan = plan_runs(task, prepared.changes, selected)
        try:
            if len(plan) == 1:
                runs = [self._run(task, state, plan[0].changes, prepared.kept, plan[0].select, timeout_s)]
            else:
                with ThreadPoolExecutor(max_workers=len(plan), thread_name_prefix="taskforge-split") as split:
                    futures = [split.submit(self._run, task, state, part.changes, prepared.kept, part.select,
                                            timeout_s) for part in plan]
                    runs = [future.result() for future in futures]
        finally:
            self._refill_after(task)
        return list(zip(plan, runs, strict=True))

    def _refill_after(self, task: Task) -> None:
        """Start the containers for the next scorings now, not beside this one's runs: on a busy
        machine their start-up competed with the tests for the same CPUs. In a ``score_many``
        batch, as many as the scorings of this image not yet started need, or once there are
        none, those of the image that comes next (a container nobody asks for is a start wasted).
        A refill that fails changes nothing of this scoring: the next one starts its own."""
        wanted = getattr(self._ahead, "value", None)
        try:
            if wanted is None:
                self.pool.warm(task.image_name)
            elif (target := wanted()) is not None:
                self.pool.warm(target[0], up_to=_PER_SCORING * target[1])
        except (TaskforgeError, RuntimeError):
            pass

    def _ensure_image(self, task: Task) -> None:
        """The task's image exists, rebuilt from its source if it was missing (once per image; a
        rebuild that failed is not tried again by this scorer)."""
        image = task.image_name
        with self._lock:
            lock = self._image_locks.setdefault(image, threading.Lock())
        with lock:
            if image not in self._images:
                try:
                    ensure_image(task.source, image, backend=self.backend)
                    self._images[image] = ""
                except TaskforgeError as err:
                    self._images[image] = (f"the image {image} is missing and could not be rebuilt from "
                                           f"{task.source}: {err} [{err.reason}]")
            if self._images[image]:
                raise SandboxError(self._images[image], reason="image_missing")

    def _state(self, task: Task) -> _TaskState:
        key = f"{task.instance_id}@{task.base_commit}"
        with self._lock:
            if key in self._states:
                return self._states[key]
            lock = self._state_locks.setdefault(key, threading.Lock())
        with lock:
            if key not in self._states:
                dest = Path(self._work.name) / hashlib.sha256(key.encode()).hexdigest()[:16]
                if dest.exists():  # left by an attempt that failed (a broken row): start again
                    shutil.rmtree(dest)
                start = rebuild_start_state(task, dest)
                hidden = apply_patch(start.path, {}, task.test_patch)
                state = _TaskState(
                    start=start,
                    env=Environment.from_json(json.loads(task.environment)),
                    tests=TestPaths.of([*task.FAIL_TO_PASS, *task.PASS_TO_PASS], hidden,
                                       layout=TestLayout.from_json(json.loads(task.validation).get("test_layout") or {})),
                    gold=apply_patch(start.path, {}, task.patch),
                    hidden=hidden,
                )
                with self._lock:
                    self._states[key] = state
            return self._states[key]

    def _prepare(self, task: Task, state: _TaskState, patch: str) -> _Prepared:
        if len(patch.encode()) > _MAX_PATCH_BYTES:
            raise _PatchFailed(f"the patch is {len(patch.encode())} bytes; at most {_MAX_PATCH_BYTES} are scored")
        kept: dict[str, bytes | None] = {}
        dropped: list[str] = []
        tampering: list[str] = []
        # What pytest reads as its configuration, as the image's own pytest says.
        tests = replace(state.tests, config_files=self._image_facts(task.image_name).config_files)
        for rel, kind, content in _apply_candidate(state.start.path, patch):
            trusted = state.start.path / rel
            trusted_bytes = trusted.read_bytes() if trusted.is_file() and not trusted.is_symlink() else None
            before = _text(trusted_bytes, rel) if trusted_bytes is not None else None
            after = _text(content, rel) if content is not None else None
            binary = content is not None and after is None
            if rel.endswith(".py") and content is not None and after is not None:
                declared = source_encoding(content)
                if declared not in ("utf-8", "utf-8-sig") and declared != (
                        source_encoding(trusted_bytes) if trusted_bytes is not None else None):
                    tampering.append(f"source encoding {declared} declared in {rel}")
            verdict, why = classify_change(rel, kind, before=before, after=after, binary=binary, tests=tests)
            if verdict == "tamper":
                tampering.append(why)
                dropped.append(why)
                continue
            if verdict == "drop":
                dropped.append(why)
                continue
            if after is not None:
                reference = state.gold.get(rel, before) if rel in state.gold else before
                lint = lint_python if rel.endswith(".py") else lint_text
                for finding in new_findings(lint(after), lint(reference or "")):
                    tampering.append(finding.describe(rel))
            kept[rel] = content
        changes: dict[str, bytes | None] = dict(kept)
        for rel, text in state.hidden.items():
            changes[rel] = text.encode() if text is not None else None
        return _Prepared(changes=changes, kept=sorted(kept), dropped=dropped, tampering=tampering)

    def _image_facts(self, image: str, box: Sandbox | None = None) -> _ImageFacts:
        """The image's installed pytest plugins and the configuration files its pytest reads, read
        once per image in a container whose workspace is still empty (``box``, or one of the pool's)."""
        with self._lock:
            if image in self._facts:
                return self._facts[image]
        own = box is None
        probe = self.pool.acquire(image, refill=False) if box is None else box
        try:
            found = probe.exec(["python", "-P", "-c", _FACTS_SCRIPT], timeout_s=60, workdir="/")
        finally:
            if own:
                probe.close()
        if found.exit_code != 0:
            raise SandboxError(f"could not read the pytest setup of {image}: {found.text().strip()[-300:]}")
        data = json.loads(found.stdout.decode().strip().splitlines()[-1])
        facts = _ImageFacts(plugins=[(str(name), str(module)) for name, module in data["plugins"]],
                            config_files=frozenset(map(str, data["config_files"])) | DEFAULT_CONFIG_FILES)
        with self._lock:
            self._facts[image] = facts
        return facts

    def _run(self, task: Task, state: _TaskState, changes: Mapping[str, bytes | None], kept: list[str],
             select: list[str], timeout_s: float) -> RunResult:
        tools = {f"{GUARD_MODULE}.py": _GUARD_SOURCE.read_bytes()}
        box = self.pool.acquire(task.image_name, refill=False, layer=(
            str(state.start.path), functools.partial(lay_task_tree, tree=state.start.path, tools=tools,
                                                  supervisor=self.limits)))
        try:
            # The image's plugins by module (autoloading is off), but those the task's environment
            # switches off (one written for another pytest: ``SuiteRunner.layout``).
            off = plugins_off(state.env.pytest_args)
            plugins = [module for name, module in self._image_facts(task.image_name, box).plugins
                       if name not in off and module not in off]
        except BaseException:
            box.close()
            raise
        runner = SuiteRunner(state.start, state.env, backend=self.backend, limits=self.limits, timeout_s=timeout_s,
                             sandbox=box, tool_files=tools, laid=True,
                             bytecode_cache=False)  # one run per container: the image's bytecode is what is fast
        try:  # one scoring each: the container is destroyed afterwards
            return runner.run(
                changes=changes,
                select=select,
                # The verdict reads each test's outcome and the first line of its message, which
                # the JUnit report gives the same in every traceback style; long tracebacks of the
                # failing tests cost more CPU than the tests (most candidates fail some).
                extra_args=("--continue-on-collection-errors", "--tb=line", "-p", GUARD_MODULE,
                            *(arg for plugin in plugins for arg in ("-p", plugin))),
                env={"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
                     "TASKFORGE_GUARD_CANDIDATE": json.dumps([f"/workspace/{rel}" for rel in kept]),
                     "TASKFORGE_GUARD_TESTS": json.dumps(_test_digests(state, changes, select)),
                     "TASKFORGE_GUARD_TRUSTED": json.dumps(plugins),
                     # The start state's commit, whose copy of a file the candidate changed vouches
                     # for the code of that file the candidate left as it was.
                     "TASKFORGE_GUARD_START": "/workspace"},
                python_args=("-P",),
                supervised=True,
            )
        finally:
            held = runner.release()
            if held is not None:
                self.pool.discard(held)

    def _judge(self, task: Task, runs: list[tuple[Part, RunResult]], result: RewardResult, tests: str,
               timeout_s: float) -> None:
        if any(run.status == "timeout" for _, run in runs):
            result.status, result.detail = "timeout", f"the tests ran past {timeout_s:g} s"
            result.fail_to_pass = dict.fromkeys(task.FAIL_TO_PASS, "timeout")
            result.pass_to_pass = dict.fromkeys(task.PASS_TO_PASS, "timeout")
            return
        outcomes: dict[str, str] = {}
        tampering: list[str] = []
        exits: list[str] = []
        twins_passed: list[str] = []
        for part, run in runs:
            verdict = judge_run(run, part.select, canaries=part.canaries)
            twins_passed += verdict.canaries_passed
            for test, outcome in verdict.outcomes.items():
                # A test that runs as itself in both runs must pass in both.
                if test not in part.canaries and outcomes.get(test, "passed") == "passed":
                    outcomes[test] = outcome
            tampering += verdict.tampering
            if not verdict.exit_ok:
                exits.append(f"pytest exited {run.exit_code}")
        # A twin that passed in the place of a test that passes as itself: the same code passed the
        # check and its opposite (a forged pass). Beside a test that fails, it is a wrong answer.
        forged = [t for t in twins_passed if outcomes.get(t) == "passed"]
        tampering = [f"{_CANARY_TAMPER}{t} with its check altered passed in the place of the test"
                     for t in forged] + tampering
        canaries = task_canaries(task)
        result.canaries_passed = sorted({canaries.index(twin) for part, _ in runs for twin in part.twins
                                         if set(twin.tests) & set(forged)})
        result.fail_to_pass = {t: outcomes.get(t, "missing") for t in task.FAIL_TO_PASS}
        if tests == "all":
            result.pass_to_pass = {t: outcomes.get(t, "missing") for t in task.PASS_TO_PASS}
        if tampering:
            result.tampering += tampering
            result.status, result.detail = "tampered", tampering[0]
            return
        hit = sorted({limit for _, run in runs for limit in run.limits_hit})
        if hit:
            result.detail = f"the run hit the sandbox's {', '.join(hit)} limit"
        every = [result.fail_to_pass, result.pass_to_pass] if tests == "all" else [result.fail_to_pass]
        if exits and all(o == "passed" for group in every for o in group.values()):
            result.detail = f"every expected test passed, but {exits[0]}: the reward is 0"
            result.reward = 0.0
            return
        if result.mode == "partial" and len(runs) > 1:
            # Partial credit only for the tests a twin stands beside: a test no twin covers could
            # be forged alone. With none covered, the reward is binary.
            covered = {i for twin in task_canaries(task) for i in twin.tests}
            credited = {t: o for t, o in result.fail_to_pass.items() if t in covered}
            if credited and all(o == "passed" for o in result.fail_to_pass.values()):
                result.reward = compute_reward(result.fail_to_pass, result.pass_to_pass, "partial")
            elif credited:
                result.reward = compute_reward(credited, result.pass_to_pass, "partial")
            else:
                result.reward = compute_reward(result.fail_to_pass, result.pass_to_pass, "binary")
            return
        result.reward = compute_reward(result.fail_to_pass, result.pass_to_pass, result.mode)

    # -- canaries -----------------------------------------------------------------------------------

    def calibrate(self, task: Task, *, timeout_s: float | None = None) -> Task:
        """``task`` with the canaries scoring will use in its ``validation`` record: the twins of
        its hidden tests (``taskforge.repo.canaries``) that the gold patch fails every time, run
        beside their tests under other names in :data:`CALIBRATION_RUNS` fresh containers at once
        (new interpreters, each with its own hash seed and random state). A twin a correct
        solution passes now and then (a test of a random sample, an order that follows the hash
        seed) would score it ``tampered`` when it does; one run kept such a twin with the
        probability that gold fails it, this many keep it with that probability to their power.
        Mining calls it before the gate's verdict, so the gate's gold run already has them.

        An input twin feeds the code a value its test never did, and that can make it loop (a
        count that never ends): when the run of every twin does not finish in ``timeout_s``, it
        runs again without the input twins, and then without any."""
        state = self._state(task)
        hidden = {rel: text for rel, text in state.hidden.items() if text is not None}
        start = state.start.path
        twins = make_twins(hidden, task.FAIL_TO_PASS, others=task.PASS_TO_PASS, seed=task.instance_id,
                           read=lambda rel: _text((start / rel).read_bytes(), rel) if (start / rel).is_file() else None)
        kept: list[Twin] = []
        if twins:
            prepared = self._prepare(task, state, task.patch)
            safer = [t for t in twins if t.kind != "input"]
            for tried in [twins, safer] if safer and len(safer) < len(twins) else [twins]:
                changes = dict(prepared.changes)
                placed: list[tuple[Twin, list[str]]] = []
                for number, twin in enumerate(tried):
                    name = f"{twin.name}_canary_{number}"
                    text = changes[twin.file]
                    assert text is not None
                    try:
                        changes[twin.file] = place_twin(text.decode(), twin, name=name).encode()
                    except (ValueError, UnicodeDecodeError):  # a twin that is not Python there: no canary
                        continue
                    placed.append((twin, twin_ids(twin, name)))
                select = [i for _, ids in placed for i in ids]
                with ThreadPoolExecutor(max_workers=CALIBRATION_RUNS, thread_name_prefix="taskforge-calibrate") as runs:
                    done = list(runs.map(lambda _: self._run(task, state, changes, prepared.kept, select,
                                                             timeout_s or self.timeout_s), range(CALIBRATION_RUNS)))
                if any(run.status == "timeout" for run in done):
                    continue
                kept = [twin for twin, ids in placed if all(fails_as_twin(twin, run, i) for run in done for i in ids)]
                break
        validation = json.loads(task.validation or "{}")
        validation["canaries"] = [twin.to_json() for twin in kept]
        return replace(task, validation=json.dumps(validation, sort_keys=True))

    def confirm(self, task: Task, *, timeout_s: float | None = None) -> tuple[Task, RewardResult]:
        """Gold scored as ``taskforge score`` will score it (mining's gate), and ``task`` with one
        twin per test, one this scoring showed gold fails in its test's place. Calibration ran each
        twin beside its test under another name; scoring puts it in the test's place, under its
        name, among its file's tests. A twin gold passes there (it failed beside only on state
        another twin left, or on data named after its test) would score correct solutions
        ``tampered``. So each test keeps one twin of its lowest rank (``one_twin_per_test``,
        seeded by the task), all placed by this scoring; those that canaries alone made tampered
        are dropped (``validation["canaries_dropped"]``) and gold scored again with the next
        choice, at most :data:`GATE_REPAIRS` times."""
        validation = json.loads(task.validation or "{}")
        twins = task_canaries(task)
        rng = random.Random(task.instance_id)
        for repair in range(GATE_REPAIRS + 1):
            chosen = one_twin_per_test(twins, rng)
            validation["canaries"] = [twins[i].to_json() for i in chosen]
            trial = replace(task, validation=json.dumps(validation, sort_keys=True))
            with every_twin_placed():  # this scoring places each chosen twin
                gold = self.score(trial, task.patch, timeout_s=timeout_s)
            by_canaries = all(t.startswith(_CANARY_TAMPER) for t in gold.tampering)
            if gold.status != "tampered" or not gold.canaries_passed or not by_canaries or repair == GATE_REPAIRS:
                return trial, gold
            passed = {chosen[i] for i in gold.canaries_passed}
            twins = [twin for index, twin in enumerate(twins) if index not in passed]
            validation["canaries_dropped"] = validation.get("canaries_dropped", 0) + len(passed)
        raise AssertionError("unreachable")


def _test_digests(state: _TaskState, changes: Mapping[str, bytes | None], select: list[str]) -> dict[str, str]:
    """The files the selected tests live in, as this run writes them: path in the sandbox -> sha256
    (the guard holds the collected tests to them)."""
    files = {nodeid.split("::", 1)[0] for nodeid in select}
    # The files test_patch puts back: a test class the collected module imports from a subfolder
    # (``from .unit.test_cache import TestCache`` in ``tests/__main__.py``) runs their code.
    files |= {rel for rel, text in state.hidden.items() if rel.endswith(".py") and text is not None}
    # Test modules beside them, above them in the tree, or below their folders may define what they
    # inherit (a mixin in tests/__init__.py) or import (an aggregating tests/__main__.py's classes
    # from tests/unit/): the guard holds those to their files too.
    folders = {parent for rel in files for parent in PurePosixPath(rel).parents}
    below = {PurePosixPath(rel).parent for rel in files} - {PurePosixPath(".")}
    for rel in state.python_files():
        if len(files) >= _MAX_GUARDED_FILES:
            break
        parents = PurePosixPath(rel).parents
        if (parents[0] in folders or any(p in below for p in parents)) and state.tests.layout.is_test_file(rel):
            files.add(rel)
    digests = {}
    for rel in sorted(files):
        if rel in changes:
            content = changes[rel]
        else:
            path = state.start.path / rel
            content = path.read_bytes() if path.is_file() and not path.is_symlink() else None
        if content is not None:
            digests[f"/workspace/{rel}"] = hashlib.sha256(content).hexdigest()
    return digests


def source_encoding(content: bytes) -> str:
    """The encoding Python reads a source file in: its BOM or coding declaration, else UTF-8
    (``invalid`` when the declaration names no codec)."""
    try:
        return tokenize.detect_encoding(io.BytesIO(content).readline)[0]
    except SyntaxError:
        return "invalid"


def _text(content: bytes, rel: str) -> str | None:
    """The text of a file as its reader sees it: a Python source as Python decodes it (its coding
    declaration honoured, so the lint reads what runs), anything else as UTF-8; None if it does
    not decode (a binary file)."""
    try:
        return importlib.util.decode_source(content) if rel.endswith(".py") else content.decode("utf-8")
    except (UnicodeDecodeError, SyntaxError, LookupError):
        return None


def _apply_candidate(start: Path, patch: str) -> list[tuple[str, Any, bytes | None]]:
    """Apply ``patch`` to the start state, as trees in a scratch index and object store (nothing
    of the patch is ever written as a file): each changed path, its kind (added, modified,
    deleted, symlink, submodule) and its new content (None when deleted)."""
    if not patch.strip():
        return []
    with StateTrees(start) as trees:
        head = trees.tree({})
        try:
            new = trees.apply(head, patch)
        except TaskforgeError as err:
            raise _PatchFailed(str(err)) from err
        changed: list[tuple[str, Any, bytes | None]] = []
        for rel, status, mode, object_id in trees.changed(head, new):
            if status == "D":
                changed.append((rel, "deleted", None))
            elif mode == "120000":
                changed.append((rel, "symlink", None))
            elif mode == "160000":
                changed.append((rel, "submodule", None))
            else:
                changed.append((rel, "added" if status == "A" else "modified", trees.blob(object_id)))
        return changed


def gate_scorer(backend: SandboxBackend, limits: SandboxLimits, timeout_s: float) -> Scorer:
    """The scorer of mining's gate (``taskforge.task.ScorerFactory``): the CLI hands it to the
    mining executors, so mining never imports scoring."""
    return Scorer(backend=backend, limits=limits, timeout_s=timeout_s)


def _worth_scoring_again(task: Task, pairs: list[tuple[Part, RunResult]]) -> list[str]:
    """The PASS_TO_PASS tests that failed in a scoring that is clean otherwise, when they are few
    (at most ``_MAX_AGAIN``); else none. Clean: no run timed out, every run's session ended with
    the exit status pytest gave, with the guard's record and a report, nothing in any run looks
    like tampering, every FAIL_TO_PASS test passed as itself, and each failed test was *reported*
    failed or errored (a test that never ran is not a failure of the machine's load).

    The second scoring is a whole new one (new placings, new twins) and alone decides: it has the
    shape of the first, so a candidate cannot behave well only there, and a forger that got
    through the first already had what it wanted."""
    fail_to_pass = set(task.FAIL_TO_PASS)
    failed: set[str] = set()
    for part, run in pairs:
        stream = run.stream
        if (run.status == "timeout" or stream is None or stream.finish is None or stream.finish != run.exit_code
                or stream.guard is None or not run.has_report):
            return []
        verdict = judge_run(run, part.select, canaries=part.canaries)
        if verdict.tampering or verdict.canaries_passed:
            return []
        for test, outcome in verdict.outcomes.items():
            if test in part.canaries or outcome == "passed":
                continue
            if test in fail_to_pass or outcome not in ("failed", "error"):
                return []
            failed.add(test)
    return sorted(failed) if len(failed) <= _MAX_AGAIN else []
