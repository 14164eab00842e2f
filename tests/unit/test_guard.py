"""The scoring guard (taskforge/guest/guard.py) in a real pytest run on the host: honest suites,
decorated tests included, give no finding; hidden tests that do not run as written do.

Each case is a small project run with ``python -m pytest -p taskforge_pytest_guard``, the
environment the scorer gives the guard (the candidate's files, the test files' sha256), and the
JUnit report read for the guard's ``taskforge.tampered`` properties."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from taskforge import guest

TESTS = textwrap.dedent("""\
    import functools
    import unittest
    from unittest import mock

    import feature
    from hypothesis import given, settings, strategies
    from mixins import Mixin


    def test_plain():
        assert feature.double(2) == 4


    @mock.patch("os.getcwd", return_value="/x")
    def test_under_mock_patch(getcwd):
        assert feature.double(3) == 6


    @settings(max_examples=5, database=None)
    @given(strategies.integers())
    def test_a_property(x):
        assert feature.double(x) == x + x


    def passthrough(f):
        @functools.wraps(f)
        def wrapper(*a, **k):
            return f(*a, **k)
        return wrapper


    @passthrough
    def test_under_a_wrapper():
        assert feature.double(1) == 2


    @getattr(feature, "checked", passthrough)
    def test_under_the_features_own_decorator():
        assert feature.double(6) == 12


    class Base:
        def test_inherited(self):
            assert feature.double(0) == 0


    class TestCase(Base, Mixin, unittest.TestCase):
        def test_method(self):
            self.assertEqual(feature.double(5), 10)
""")
FEATURE = "def double(x):\n    return 2 * x\n"
MIXINS = "import feature\n\n\nclass Mixin:\n    def test_from_a_mixin(self):\n        assert feature.double(4) == 8\n"


DOCS = "Doubling\n========\n\n>>> import feature\n>>> feature.double(21)\n42\n"


def project_with_start(tmp: Path, start: str | None) -> Path:
    """A project folder; with ``start``, a repository whose one commit holds it as ``feature.py``
    (the start state the guard reads from ``HEAD``)."""
    project = tmp / "project"
    project.mkdir()
    if start is not None:
        (project / "feature.py").write_text(start)
        git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(project)]
        subprocess.run([*git, "init", "-q"], check=True)
        subprocess.run([*git, "add", "feature.py"], check=True)
        subprocess.run([*git, "commit", "-q", "-m", "start"], check=True)
    return project


def _run(tmp: Path, feature: str = FEATURE, *, after_digest: str | None = None, mixins_known: bool = True,
         docs: bool = False, image_plugin: bool = False, start: str | None = None) -> list[str]:
    """Run the project; the guard's findings. ``start``: the start state's ``feature.py``,
    committed in the project's repository, which the candidate's ``feature`` then replaces."""
    project = project_with_start(tmp, start)
    (project / "test_feature.py").write_text(TESTS)
    (project / "mixins.py").write_text(MIXINS)
    (project / "feature.py").write_text(feature)
    digests = {str((project / "test_feature.py").resolve()): hashlib.sha256(TESTS.encode()).hexdigest()}
    selected = ["test_feature.py"]
    if docs:  # a text file of doctests, selected as a test file (--doctest-glob)
        (project / "usage.rst").write_text(DOCS)
        digests[str((project / "usage.rst").resolve())] = hashlib.sha256(DOCS.encode()).hexdigest()
        selected += ["--doctest-glob=*.rst", "usage.rst"]
    if mixins_known:  # the scorer names the test modules beside the selected ones
        digests[str((project / "mixins.py").resolve())] = hashlib.sha256(MIXINS.encode()).hexdigest()
    if after_digest is not None:
        (project / "test_feature.py").write_text(after_digest)
    plugins = tmp / "plugins"
    plugins.mkdir()
    shutil.copy(guest.source_path("guard"), plugins / "taskforge_pytest_guard.py")
    trusted = []
    if image_plugin:  # a plugin of the image, loaded by name after the guard as the scorer loads them
        (plugins / "image_plugin.py").write_text("def pytest_configure(config):\n    pass\n")
        trusted = ["image_plugin"]
    env = {**os.environ, "PYTHONPATH": f"{plugins}{os.pathsep}{project}", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
           "TASKFORGE_GUARD_CANDIDATE": json.dumps([str((project / "feature.py").resolve())]),
           "TASKFORGE_GUARD_TESTS": json.dumps(digests), "TASKFORGE_GUARD_TRUSTED": json.dumps(trusted),
           **({"TASKFORGE_GUARD_START": str(project)} if start is not None else {})}
    report = tmp / "report.xml"
    subprocess.run([sys.executable, "-m", "pytest", "-p", "taskforge_pytest_guard",
                    *(arg for name in trusted for arg in ("-p", name)), "-p", "no:cacheprovider",
                    f"--junitxml={report}", "-q", *selected], cwd=project, env=env, capture_output=True,
                   text=True, timeout=120, check=False)
    root = ET.parse(report).getroot()
    props = [(p.get("name"), p.get("value") or "") for p in root.iter("property")]
    assert ("taskforge.guard", "1") in props, props
    return [value for name, value in props if name == "taskforge.tampered"]


def test_an_honest_suite_with_decorated_and_inherited_tests_has_no_finding(tmp_path: Path) -> None:
    """mock.patch, functools.wraps and hypothesis's @given (whose wrapper borrows the test's file
    and line: a held-out project's property tests were a false finding before) included."""
    assert _run(tmp_path) == []


def test_a_text_file_of_doctests_is_held_to_its_digest_not_compiled(tmp_path: Path) -> None:
    """semver's held-out tasks select doctests of docs/*.rst: the guard compiled the .rst as
    Python and the gate refused every gold patch as tampered."""
    assert _run(tmp_path, docs=True) == []


def test_a_test_whose_code_is_swapped_at_import(tmp_path: Path) -> None:
    swap = FEATURE + textwrap.dedent("""\
        import sys
        def _later():
            mod = sys.modules.get("test_feature")
            if mod is not None and hasattr(mod, "test_plain"):
                mod.test_plain.__code__ = (lambda: None).__code__
        import builtins
        _orig = builtins.__import__
        def _hook(name, *a, **k):
            result = _orig(name, *a, **k)
            _later()
            return result
        builtins.__import__ = _hook
    """)
    findings = _run(tmp_path, swap)
    assert any("code of" in f and "swapped" in f for f in findings), findings
    assert any("test_plain does not run the code of its file" in f for f in findings), findings


def test_an_import_hook_from_the_candidates_code(tmp_path: Path) -> None:
    hook = FEATURE + textwrap.dedent("""\
        import sys
        class Finder:
            def find_spec(self, *args, **kwargs):
                return None
        sys.meta_path.insert(0, Finder())
    """)
    assert any(f.startswith("import hook Finder installed from") for f in _run(tmp_path, hook))


# A module of the project that installs an import hook as it is imported (a single-module web
# framework redirects ``pkg.ext.*`` imports so), in the file the candidate completes.
PROJECT_HOOK = textwrap.dedent("""\
    import sys


    class _Redirect:
        def __init__(self, name):
            self.name = name
            sys.meta_path.append(self)

        def find_spec(self, fullname, path=None, target=None):
            if not fullname.startswith(self.name + "."):
                return None
            return None


    _redirect = _Redirect("feature_ext")
""")


def test_the_projects_own_import_hook_in_the_candidates_file_is_no_tampering(tmp_path: Path) -> None:
    """The start state's copy of the file vouches for the code the candidate left as it was,
    wherever the candidate's lines moved it. (A held-out project scored its gold patches
    ``tampered`` before: every task of it removes code from the module that installs the hook.)"""
    start = PROJECT_HOOK
    candidate = FEATURE + "\n\n" + PROJECT_HOOK  # the feature written back above the hook
    assert _run(tmp_path, candidate, start=start) == []


def test_a_warning_the_guards_own_lookups_raise_is_no_tampering(tmp_path: Path) -> None:
    """An object of the project that warns as an attribute is looked up, attributed to the caller
    (``stacklevel=2``): the guard, judging the project's hook, is that caller, and the interpreter
    adds ``__warningregistry__`` to the guard's namespace. A held-out project's gold patches were
    ``tampered`` by it."""
    start = PROJECT_HOOK + textwrap.dedent("""\


        import warnings


        class _Legacy:
            def __call__(self):
                return None

            def __getattr__(self, name):
                warnings.warn(f"{name} is deprecated", UserWarning, stacklevel=2)
                raise AttributeError(name)


        _redirect.handler = _Legacy()
    """)
    assert _run(tmp_path, FEATURE + "\n\n" + start, start=start) == []


@pytest.mark.parametrize("attack", ["method", "instance", "no_start"])
def test_the_projects_import_hook_changed_by_the_candidate(tmp_path: Path, attack: str) -> None:
    """A method of the hook's class changed, a function set on the project's hook object, or a
    file the start state does not have: the hook runs the candidate's code."""
    start = PROJECT_HOOK
    if attack == "method":
        candidate = FEATURE + PROJECT_HOOK.replace('self.name + "."', 'self.name + ":"')
    elif attack == "instance":
        candidate = FEATURE + PROJECT_HOOK + "_redirect.find_spec = lambda fullname, path=None, target=None: None\n"
    else:
        start, candidate = "", FEATURE + PROJECT_HOOK
    assert any(f.startswith("import hook _Redirect installed from") for f in _run(tmp_path, candidate, start=start))


# A third red team (2026-12-07, against the start state's vouching above) ran the candidate's
# code through the project's own hook, and through objects and data the guard judged no code of.
EVIL = """\
    import os as _os
    def _evil(*args, **kwargs):
        _os.environ.get("ran")
        return None
    class _Evil:
        def __call__(self, *args, **kwargs):
            return _evil()
        def __add__(self, other):
            return _evil()
        def __get__(self, obj, owner=None):
            return "feature_ext"
"""
THROUGH_THE_PROJECTS_HOOK = {
    "builtins of the candidate's under the hook's unchanged code": (
        "import builtins as _b\n__builtins__ = dict(vars(_b), __import__=lambda *a, **k: _b.__import__(*a, **k))\n"
        + FEATURE + PROJECT_HOOK, "import hook _Redirect installed from"),
    "an object of the candidate's in the hook's attributes": (
        FEATURE + PROJECT_HOOK + textwrap.dedent(EVIL) + "_redirect.name = _Evil()\n",
        "import hook _Redirect installed from"),
    "a descriptor of the candidate's on the hook's class, its methods unchanged": (
        FEATURE + PROJECT_HOOK + textwrap.dedent(EVIL) + "_Redirect.name = _Evil()\n",
        "import hook _Redirect installed from"),
    "a staticmethod set on the hook": (
        FEATURE + PROJECT_HOOK + textwrap.dedent(EVIL) + "_redirect.find_spec = staticmethod(_evil)\n",
        "import hook _Redirect installed from"),
    "a cached function set on the hook": (
        FEATURE + PROJECT_HOOK + textwrap.dedent(EVIL) + "import functools\n_redirect.find_spec = functools.lru_cache(_evil)\n",
        "import hook _Redirect installed from"),
}


@pytest.mark.parametrize("attack", sorted(THROUGH_THE_PROJECTS_HOOK))
def test_the_projects_hook_does_not_vouch_for_what_the_candidate_gives_it(tmp_path: Path, attack: str) -> None:
    candidate, finding = THROUGH_THE_PROJECTS_HOOK[attack]
    findings = _run(tmp_path, candidate, start=PROJECT_HOOK)
    assert any(f.startswith(finding) for f in findings), findings


WITHOUT_CODE_OF_ITS_OWN = {
    "a callable object as a finder's method": ("""\
        import sys
        class Finder:
            find_spec = _Evil()
        sys.meta_path.insert(0, Finder())
    """, "import hook Finder installed from"),
    "a partialmethod as a finder's method": ("""\
        import functools, sys
        class Finder:
            find_spec = functools.partialmethod(_evil)
        sys.meta_path.insert(0, Finder())
    """, "import hook Finder installed from"),
    "a namespace as a finder": ("""\
        import sys, types
        sys.meta_path.insert(0, types.SimpleNamespace(find_spec=staticmethod(_evil)))
    """, "import hook SimpleNamespace installed from"),
    "a thread that runs a string": ("""\
        import threading
        threading.Thread(target=exec, args=("import time; time.sleep(5)", {}), daemon=True).start()
    """, "a thread runs the builtin exec"),
    "a module of pytest's swapped for a lookalike": ("""\
        import re, types, _pytest.junitxml
        fake = types.ModuleType("re")
        vars(fake).update(vars(re))
        fake.sub = lambda *args, **kwargs: re.sub(*args, **kwargs)
        _pytest.junitxml.re = fake
    """, "replaced _pytest.junitxml.re"),
    "the standard library's re.sub the report is written with": ("""\
        import re
        _sub = re.sub
        re.sub = lambda *args, **kwargs: _sub(*args, **kwargs)
    """, "replaced re.sub"),
    "the standard library's os.write the outcome stream is written with": ("""\
        import os
        os.write = _evil
    """, "replaced os.write"),
    "the code of the JUnit writer swapped from a string run in a thread": ("""\
        import threading
        src = "from _pytest.junitxml import _NodeReporter as N\\nN.append_failure.__code__ = N.append_pass.__code__"
        threading.Thread(target=lambda: exec(src, {})).start()
    """, "the code of _NodeReporter.append_failure swapped from"),
}


# A fourth red team (2026-12-07, against the fixes above): the guard's own module, pytest's second
# reference to the hook table, the terminal writer's file, a descriptor that is no callable, and
# the standard library's abstract mappings the JUnit writer reads the environment through.
PLACES_NO_LIST_NAMED = {
    "the guard's own judge replaced": ("""\
        import sys
        sys.modules["taskforge_pytest_guard"]._untrusted = lambda *args, **kwargs: None
    """, "replaced taskforge_pytest_guard._untrusted, which the verdict is written with"),
    "config.hook set to a proxy": ("""\
        import gc, _pytest.config
        config = next(o for o in gc.get_objects() if isinstance(o, _pytest.config.Config))
        class Proxy:
            def __init__(self, inner):
                self._inner = inner
            def __getattr__(self, name):
                return getattr(self._inner, name)
        config.hook = Proxy(config.hook)
    """, "config.hook is not the plugin manager's"),
    "the terminal writer's file": ("""\
        import gc, _pytest.config
        config = next(o for o in gc.get_objects() if isinstance(o, _pytest.config.Config))
        class File:
            def __init__(self, inner):
                self._inner = inner
            def write(self, text):
                return self._inner.write(text)
            def flush(self):
                return self._inner.flush()
            def __getattr__(self, name):
                return getattr(self._inner, name)
        def _wrap(config=config):
            writer = config.pluginmanager.get_plugin("terminalreporter")._tw
            writer._file = File(writer._file)
        _wrap()
    """, "replaced _file on the terminal writer"),
    "a descriptor that is no callable on a report class": ("""\
        import types, _pytest.reports
        _pytest.reports.TestReport.failed = types.DynamicClassAttribute(lambda self: self.outcome == "failed")
    """, "added _pytest.reports.TestReport.failed"),
    "the abstract mapping the JUnit writer reads the environment through": ("""\
        import collections.abc
        _get = collections.abc.Mapping.get
        collections.abc.Mapping.get = lambda self, key, default=None: _get(self, key, default)
    """, "replaced collections.abc.Mapping.get"),
}


@pytest.mark.parametrize("attack", sorted({**WITHOUT_CODE_OF_ITS_OWN, **PLACES_NO_LIST_NAMED}))
def test_what_runs_without_a_function_of_its_own_or_in_a_place_no_list_named_is_judged(
        tmp_path: Path, attack: str) -> None:
    code, finding = {**WITHOUT_CODE_OF_ITS_OWN, **PLACES_NO_LIST_NAMED}[attack]
    findings = _run(tmp_path, FEATURE + textwrap.dedent(EVIL) + textwrap.dedent(code))
    assert any(f.startswith(finding) for f in findings), findings


def test_an_instance_member_replaced_after_the_first_check_is_found(tmp_path: Path) -> None:
    """The watched instances' members are compared after every test, not only at the first check:
    the plugin manager's own ``_inner_hookexec`` (an attribute it has from the start, so only its
    value changes) replaced while the third call of the feature runs."""
    candidate = textwrap.dedent("""\
        import gc, _pytest.config
        _calls = []

        def double(x):
            _calls.append(x)
            if len(_calls) == 3:
                config = next(o for o in gc.get_objects() if isinstance(o, _pytest.config.Config))
                inner = config.pluginmanager._inner_hookexec
                def hookexec(hook_name, methods, kwargs, firstresult):
                    return inner(hook_name, methods, kwargs, firstresult)
                config.pluginmanager._inner_hookexec = hookexec
            return 2 * x
    """)
    findings = _run(tmp_path, candidate)
    assert any(f.startswith("replaced _inner_hookexec on the plugin manager") for f in findings), findings


def test_a_hook_from_a_candidate_file_later_swapped_for_a_link(tmp_path: Path) -> None:
    # The hook's code still names the candidate's file; resolved, the path now leads into the
    # standard library. Named or resolved, it is the candidate's.
    hook = FEATURE + textwrap.dedent("""\
        import gc, os, sys
        import _pytest.config

        def pytest_runtest_makereport(item, call):
            return None

        config = next(o for o in gc.get_objects() if isinstance(o, _pytest.config.Config))
        config.pluginmanager.register(sys.modules[__name__], "helper")
        here = os.path.abspath(__file__)
        os.rename(here, here + ".moved")
        os.symlink(os.__file__, here)
    """)
    findings = _run(tmp_path, hook)
    assert any(f.startswith("hook pytest_runtest_makereport implemented in") for f in findings), findings


def test_a_hook_under_a_relative_name_resolved_elsewhere_at_first(tmp_path: Path) -> None:
    # The candidate's own file compiled under the name "feature.py", and the working folder moved
    # away while the first check resolves it: a path the sandbox can change is resolved again at
    # each check, never answered from a cache.
    hook = FEATURE + textwrap.dedent("""\
        import gc, os, types
        import _pytest.config
        if __name__ == "feature":
            home = os.getcwd()
            again = types.ModuleType("feature_again")
            again.HOME = home
            with open("feature.py") as f:
                exec(compile(f.read(), "feature.py", "exec"), vars(again))
            config = next(o for o in gc.get_objects() if isinstance(o, _pytest.config.Config))
            config.pluginmanager.register(again, "helper")
            os.chdir("/")
        else:
            import pytest

            _seen = [0]

            @pytest.hookimpl(wrapper=True)
            def pytest_runtest_makereport(item, call):
                report = yield
                if report.when == "teardown":
                    _seen[0] += 1
                    if _seen[0] == 2:  # after the first test's check: home again for the rest
                        os.chdir(HOME)
                return report
    """)
    findings = _run(tmp_path, hook)
    assert any(f.startswith("hook pytest_runtest_makereport implemented in") for f in findings), findings


REPORTING_OVERRIDES = {
    "a new member of a watched class": ("""\
        import _pytest.reports
        def __setattr__(self, name, value):
            object.__setattr__(self, name, value)
        _pytest.reports.TestReport.__setattr__ = __setattr__
    """, "added _pytest.reports.TestReport.__setattr__"),
    "the plugin manager's hook executor": ("""\
        import gc, _pytest.config
        config = next(o for o in gc.get_objects() if isinstance(o, _pytest.config.Config))
        inner = config.pluginmanager._inner_hookexec
        def hookexec(hook_name, methods, kwargs, firstresult):
            return inner(hook_name, methods, kwargs, firstresult)
        config.pluginmanager._inner_hookexec = hookexec
    """, "replaced _inner_hookexec on the plugin manager"),
    "a method of the JUnit writer instance": ("""\
        import gc, _pytest.config
        from _pytest.junitxml import xml_key
        config = next(o for o in gc.get_objects() if isinstance(o, _pytest.config.Config))
        writer = config.stash[xml_key]
        opened = writer._opentestcase
        def _opentestcase(report):
            return opened(report)
        writer._opentestcase = _opentestcase
    """, "replaced _opentestcase on the JUnit writer"),
}


@pytest.mark.parametrize("override", sorted(REPORTING_OVERRIDES))
def test_an_override_the_snapshot_did_not_record(tmp_path: Path, override: str) -> None:
    # A red team's finds: members the guard never recorded (a new override on a class, an
    # instance's own attribute) decide the report as much as those it did.
    code, finding = REPORTING_OVERRIDES[override]
    findings = _run(tmp_path, FEATURE + textwrap.dedent(code))
    assert any(f.startswith(finding) for f in findings), findings


# A red team of the guard alone (2026-12-06) put these past a guard that named code by the file its
# code object names, compared only recorded members and trusted plugins by name. Each forges the
# first test's failure into a pass; the guard now trusts code that the image loaded before the
# project's, or that matches code compiled afresh from a file laid before the run.
FORGE = """\
    def forge(report):
        if report.when == "call":
            report.outcome, report.longrepr = "passed", None
        return report
"""
SPOOFS = {
    "exec in pytest's own namespace (code from a string)": ('''\
        import _pytest.reports as R
        exec("""
        _tf_orig = TestReport.from_item_and_call.__func__
        def from_item_and_call(cls, item, call):
            return _tf_forge(_tf_orig(cls, item, call))
        TestReport.from_item_and_call = classmethod(from_item_and_call)
        """, {**vars(R), "_tf_forge": forge})
    ''', "replaced _pytest.reports.TestReport.from_item_and_call (code compiled from a string"),
    "compile under pytest's own file name": ('''\
        import _pytest.reports as R
        namespace = {"_orig": R.TestReport.from_item_and_call.__func__, "forge": forge}
        exec(compile("def from_item_and_call(cls, item, call):\\n    return forge(_orig(cls, item, call))\\n",
                     R.__file__, "exec"), namespace)
        R.TestReport.from_item_and_call = classmethod(namespace["from_item_and_call"])
    ''', "replaced _pytest.reports.TestReport.from_item_and_call (code that names"),
    "CodeType.replace with an image file's name": ('''\
        import _pytest.reports as R
        _orig = R.TestReport.from_item_and_call.__func__
        def from_item_and_call(cls, item, call):
            return forge(_orig(cls, item, call))
        code = from_item_and_call.__code__.replace(co_filename=R.__file__)
        R.TestReport.from_item_and_call = classmethod(type(from_item_and_call)(code, globals(), "from_item_and_call"))
    ''', "replaced _pytest.reports.TestReport.from_item_and_call (code that names"),
    "a hook from a file written during the run": ('''\
        import gc, importlib.util, os, tempfile, _pytest.config
        path = os.path.join(tempfile.mkdtemp(), "helper_rt.py")
        with open(path, "w") as f:
            f.write("def pytest_runtest_makereport(item, call):\\n    return None\\n")
        spec = importlib.util.spec_from_file_location("helper_rt", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        config = next(o for o in gc.get_objects() if isinstance(o, _pytest.config.Config))
        config.pluginmanager.register(module, "helper")
    ''', "hook pytest_runtest_makereport implemented in"),
    "a hook with no code of its own (a callable instance)": ('''\
        import gc, _pytest.config
        from pluggy._hooks import HookImpl
        class Forge:
            def __call__(self, item, call):
                return forge((yield))
        config = next(o for o in gc.get_objects() if isinstance(o, _pytest.config.Config))
        class Plugin:
            pass
        plugin = Plugin()
        config.pluginmanager.register(plugin, "helper")
        impl = HookImpl(plugin, "helper", Forge(), {"wrapper": True, "hookwrapper": False, "optionalhook": False,
                                                    "tryfirst": False, "trylast": False, "specname": None})
        impl.argnames, impl.kwargnames = ("item", "call"), ()
        config.pluginmanager.hook.pytest_runtest_makereport._add_hookimpl(impl)
    ''', "hook pytest_runtest_makereport implemented in"),
    "pluggy's hook-call monitoring (a closure of pluggy's own code)": ('''\
        import gc, _pytest.config
        config = next(o for o in gc.get_objects() if isinstance(o, _pytest.config.Config))
        def after(outcome, hook_name, hook_impls, kwargs):
            if hook_name == "pytest_runtest_makereport":
                forge(outcome.get_result())
        config.pluginmanager.add_hookcall_monitoring(lambda *args: None, after)
    ''', "replaced _inner_hookexec on the plugin manager"),
    "an import hook whose class claims the standard library's module": ('''\
        import sys
        class Finder:
            __module__ = "importlib.machinery"
            def find_spec(self, *args, **kwargs):
                return None
        sys.meta_path.insert(0, Finder())
    ''', "import hook Finder installed from"),
    "a finder put straight into sys.path_importer_cache": ('''\
        import importlib.machinery, os, sys
        class Finder(importlib.machinery.FileFinder):
            def find_spec(self, fullname, target=None):
                return super().find_spec(fullname, target)
        here = os.path.dirname(os.path.abspath(__file__))
        sys.path_importer_cache[here] = Finder(here, (importlib.machinery.SourceFileLoader, [".py"]))
    ''', "import hook Finder for"),
    "a replacement in pytest's collectors, undone at the last test": ('''\
        import _pytest.python as P
        orig = P.Function.runtest
        def runtest(self):
            mine = [item for item in self.session.items if type(item).runtest is runtest]
            if mine[-1] is self:  # the last test that runs this: put back before the session ends
                P.Function.runtest = orig
            try:
                orig(self)
            except AssertionError:
                pass
        P.Function.runtest = runtest
    ''', "replaced _pytest.python.Function.runtest"),
}


@pytest.mark.parametrize("spoof", sorted(SPOOFS))
def test_code_is_trusted_for_what_it_is_not_for_the_file_it_names(tmp_path: Path, spoof: str) -> None:
    code, finding = SPOOFS[spoof]
    findings = _run(tmp_path, FEATURE + textwrap.dedent(FORGE) + textwrap.dedent(code))
    assert any(f.startswith(finding) for f in findings), findings


# A second red team (2026-12-06, against the design above) put these past it: trusted code in the
# wrong place or bound to the candidate's data, the hook table and hook implementations edited in
# place, lookalike modules, a class of pytest's in a module no list named, and code the
# interpreter calls when nobody scheduled it. Each forges the first test's failure into a pass.
BORROWED = {
    "an override on a class in a module no list named": ('''\
        import _pytest._code.code as C
        C.ExceptionInfo.__bool__ = lambda self: False
    ''', "added _pytest._code.code.ExceptionInfo.__bool__"),
    "a builtin as a property": ('''\
        import _pytest.reports
        _pytest.reports.BaseReport.passed = property(bool)
    ''', "replaced _pytest.reports.BaseReport.passed (bool, no function"),
    "pytest's own code in another member's place": ('''\
        from _pytest.junitxml import _NodeReporter
        _NodeReporter.append_failure = _NodeReporter.append_pass
    ''', "replaced _pytest.junitxml._NodeReporter.append_failure (the code of"),
    "the standard library's code with a planted global": ('''\
        import builtins, re, types
        from _pytest.junitxml import _NodeReporter
        def _evil(self, report):
            self.append_pass(report)
        _NodeReporter.append_failure = types.FunctionType(
            re.compile.__code__, {"_compile": _evil, "__builtins__": builtins}, "append_failure", re.compile.__defaults__)
    ''', "replaced _pytest.junitxml._NodeReporter.append_failure (the code of compile"),
    "a lookalike in the hook table": ('''\
        import gc, _pytest.config
        config = next(o for o in gc.get_objects() if isinstance(o, _pytest.config.Config))
        relay = config.pluginmanager.hook
        class Proxy:
            def __init__(self, inner):
                self._inner = inner
            def __getattr__(self, name):
                return getattr(self._inner, name)
            def __call__(self, **kw):
                return forge(self._inner(**kw))
        relay.pytest_runtest_makereport = Proxy(relay.pytest_runtest_makereport)
    ''', "hook pytest_runtest_makereport is not pluggy's caller"),
    "a hook implementation's function swapped for a C object": ('''\
        import gc, operator, types, _pytest.config
        config = next(o for o in gc.get_objects() if isinstance(o, _pytest.config.Config))
        plugin = types.ModuleType("innocent")
        exec("def pytest_runtest_logreport(report):\\n    pass\\n", vars(plugin))
        config.pluginmanager.register(plugin, "innocent")
        for impl in config.pluginmanager.hook.pytest_runtest_logreport.get_hookimpls():
            if impl.plugin is plugin:
                impl.function = operator.methodcaller("__setattr__", "outcome", "passed")
    ''', "hook pytest_runtest_logreport implemented in a callable methodcaller object"),
    "pluggy's hook executor bound to the candidate's object": ('''\
        import gc, types, _pytest.config
        from pluggy import PluginManager
        config = next(o for o in gc.get_objects() if isinstance(o, _pytest.config.Config))
        caller = config.pluginmanager.hook.pytest_runtest_makereport
        real = caller._hookexec
        class Self:
            @staticmethod
            def _inner_hookexec(name, methods, kwargs, firstresult):
                return forge(real(name, methods, kwargs, firstresult))
        caller._hookexec = types.MethodType(PluginManager._hookexec, Self())
    ''', "hook pytest_runtest_makereport called through"),
    "a hook caller's class swapped": ('''\
        import gc, _pytest.config
        from pluggy import HookCaller
        config = next(o for o in gc.get_objects() if isinstance(o, _pytest.config.Config))
        class Caller(HookCaller):
            __slots__ = ()
            def __call__(self, **kwargs):
                return forge(super().__call__(**kwargs))
        config.pluginmanager.hook.pytest_runtest_makereport.__class__ = Caller
    ''', "the class of HookCaller swapped from"),
    "a lookalike module in sys.modules": ('''\
        import sys, types
        import _pytest.runner as real
        shadow = types.ModuleType(real.__name__)
        vars(shadow).update(vars(real))
        sys.modules[real.__name__] = shadow
    ''', "sys.modules['_pytest.runner'] is not the module pytest loaded"),
    "a profile function": ('''\
        import sys
        def profile(frame, event, arg):
            if event == "return" and frame.f_code.co_name == "pytest_runtest_makereport" and arg is not None:
                forge(arg)
        sys.setprofile(profile)
    ''', "a profile function set from"),
    "a gc callback": ('''\
        import gc
        gc.callbacks.append(lambda phase, info: None)
    ''', "a gc callback runs"),
    "a signal handler": ('''\
        import signal
        signal.signal(signal.SIGUSR2, lambda number, frame: None)
    ''', "the handler of signal"),
    "a thread": ('''\
        import threading, time
        threading.Thread(target=lambda: time.sleep(5), daemon=True).start()
    ''', "a thread runs"),
    "a thread with no Thread object, which threading.enumerate does not list": ('''\
        import _thread, time
        _thread.start_new_thread(lambda: time.sleep(5), ())
    ''', "a thread runs"),
    "a thread with no Thread object that asked for current_thread (a dummy Thread)": ('''\
        import _thread, threading, time
        _thread.start_new_thread(lambda: (threading.current_thread(), time.sleep(5)), ())
    ''', "a thread runs"),
}


@pytest.mark.parametrize("attack", sorted(BORROWED))
def test_trust_is_not_borrowed(tmp_path: Path, attack: str) -> None:
    code, finding = BORROWED[attack]
    findings = _run(tmp_path, FEATURE + textwrap.dedent(FORGE) + textwrap.dedent(code))
    assert any(f.startswith(finding) for f in findings), findings


def test_a_plugin_registered_under_an_image_plugins_name_is_not_the_image_plugin(tmp_path: Path) -> None:
    takeover = FEATURE + textwrap.dedent("""\
        import gc, _pytest.config
        config = next(o for o in gc.get_objects() if isinstance(o, _pytest.config.Config))
        class Evil:
            def pytest_runtest_makereport(self, item, call):
                return None
        config.pluginmanager.unregister(name="image_plugin")
        config.pluginmanager.register(Evil(), "image_plugin")
    """)
    (tmp_path / "honest").mkdir()
    (tmp_path / "attack").mkdir()
    assert _run(tmp_path / "honest", image_plugin=True) == []
    findings = _run(tmp_path / "attack", takeover, image_plugin=True)
    assert any(f.startswith("hook pytest_runtest_makereport implemented in") for f in findings), findings


def test_an_audit_hook_from_the_candidates_code(tmp_path: Path) -> None:
    hook = FEATURE + "import sys\nsys.addaudithook(lambda event, args: None)\n"
    assert any(f.startswith("an audit hook added from") for f in _run(tmp_path, hook))


def test_a_project_that_makes_its_own_objects_of_a_subclass_is_no_tampering(tmp_path: Path) -> None:
    """zipp's ``CompleteDirs.make`` turns a ``zipfile.ZipFile`` into one of its subclasses with
    ``res.__class__ = cls``, and a package may give its own module a class; the gate scored zipp's
    gold patches ``tampered`` for it. Only the class of an object the verdict rests on counts."""
    own = FEATURE + textwrap.dedent("""\
        import io, sys, types, zipfile

        class Complete(zipfile.ZipFile):
            pass

        archive = zipfile.ZipFile(io.BytesIO(), "w")
        archive.__class__ = Complete

        class Lazy(types.ModuleType):
            pass

        sys.modules[__name__].__class__ = Lazy
    """)
    assert _run(tmp_path, own) == []


@pytest.mark.parametrize("target", ["a module of pytest's", "an object of a hidden test's class",
                                    "a hook caller whose class claims another module",
                                    "a module that claims the candidate's file"])
def test_the_class_of_an_object_the_verdict_rests_on_swapped(tmp_path: Path, target: str) -> None:
    """Objects the verdict rests on are known by identity, held before any project code: a class's
    ``__module__`` and a module's ``__file__`` are the candidate's to rewrite for the moment of the
    swap (an independent red team's two ways past a rule that read them)."""
    swap = {
        "a hook caller whose class claims another module": textwrap.dedent("""\
            import gc, _pytest.config
            from pluggy import HookCaller
            config = next(o for o in gc.get_objects() if isinstance(o, _pytest.config.Config))
            class Relay(HookCaller):
                __slots__ = ()
            HookCaller.__module__ = "zipp"
            config.pluginmanager.hook.pytest_runtest_logreport.__class__ = Relay
            HookCaller.__module__ = "pluggy._hooks"
        """),
        "a module that claims the candidate's file": textwrap.dedent("""\
            import types, pytest
            real = pytest.__file__
            pytest.__file__ = __file__
            pytest.__class__ = type("Shim", (types.ModuleType,), {})
            pytest.__file__ = real
        """),
        "a module of pytest's": "import types, _pytest.runner as runner\n"
                                "runner.__class__ = type('Runner', (types.ModuleType,), {})\n",
        "an object of a hidden test's class": "import sys\n"
                                              "_double = double\n"
                                              "def double(x):\n"
                                              "    test = sys._getframe(1).f_locals.get('self')\n"
                                              "    if type(test).__module__ == 'test_feature':\n"
                                              "        test.__class__ = type('Other', (type(test),), {})\n"
                                              "    return _double(x)\n",
    }[target]
    findings = _run(tmp_path, FEATURE + swap)
    assert any(" swapped from " in f for f in findings), findings


def test_an_audit_hook_added_later_by_code_the_candidate_made(tmp_path: Path) -> None:
    # No frame of the candidate's file is on a thread's stack: the code that adds the hook is
    # what gives it away (compiled from a string, by no file of the image or the project).
    hook = FEATURE + textwrap.dedent("""\
        import sys, threading
        namespace = {"sys": sys}
        exec("def later():\\n    sys.addaudithook(lambda event, args: None)\\n", namespace)
        thread = threading.Thread(target=namespace["later"])
        thread.start()
        thread.join()
    """)
    findings = _run(tmp_path, hook)
    assert any(f.startswith("an audit hook added from code compiled from a string") for f in findings), findings


def test_a_test_file_that_differs_from_the_one_the_scorer_wrote(tmp_path: Path) -> None:
    neutered = TESTS.replace("assert feature.double(2) == 4", "assert True")
    assert any("changed at run time" in f for f in _run(tmp_path, after_digest=neutered))


def test_a_test_inherited_from_a_module_the_scorer_did_not_name(tmp_path: Path) -> None:
    findings = _run(tmp_path, mixins_known=False)
    assert any("test_from_a_mixin does not run the code of its file" in f for f in findings), findings


def test_set_display_constants_compare_by_their_elements_not_their_order() -> None:
    """A module pytest loaded from a .pyc that another interpreter wrote holds that interpreter's
    order of a set display's frozenset constant; compiled here, the same set may iterate in another
    order (colliding hashes, other insertion order). That is the same code, not a swapped test."""
    from taskforge.guest.guard import _same_code

    # Two strings whose hashes collide in a small set table: their order follows insertion.
    words = [f"item{i}" for i in range(200)]
    a, b = next((x, y) for x in words for y in words if x < y and hash(x) & 7 == hash(y) & 7 and repr(frozenset([x, y])) != repr(frozenset([y, x])))
    first, second = frozenset([a, b]), frozenset([b, a])
    assert first == second and repr(first) != repr(second)
    code = compile(f"def f():\n    return {{{a!r}, {b!r}, 'other'}}\n", "t.py", "exec").co_consts[0]
    consts = tuple(c for c in code.co_consts)
    index = next(i for i, c in enumerate(consts) if isinstance(c, frozenset))
    one = code.replace(co_consts=consts[:index] + (first,) + consts[index + 1:])
    two = code.replace(co_consts=consts[:index] + (second,) + consts[index + 1:])
    assert _same_code(one, two)
    other = code.replace(co_consts=consts[:index] + (frozenset([a, "other"]),) + consts[index + 1:])  # other elements
    assert not _same_code(one, other)
    assert not _same_code(code.replace(co_consts=(*consts[:index], frozenset([1, 2]), *consts[index + 1:])),
                          code.replace(co_consts=(*consts[:index], frozenset([1.0, 2]), *consts[index + 1:])))


@pytest.mark.parametrize("swap", [
    "doctest.DocTestRunner.run = lambda self, test, *a, **k: doctest.TestResults(0, len(test.examples))",
    "doctest.OutputChecker.check_output = lambda self, want, got, flags: True",
])
def test_the_stdlib_doctest_runner_swapped_by_the_candidate(tmp_path: Path, swap: str) -> None:
    """A text file of doctests can be FAIL_TO_PASS (``--doctest-glob``); the guard holds it to its
    digest, and pytest's doctest plugin runs it through the stdlib's ``doctest``, whose runner or
    checker the candidate's code could make pass anything. The swap happens in a call made by an
    earlier test, after pytest made its runner class: the stdlib's ``doctest`` is held as pytest's
    modules are (before, only the runner class pytest makes lazily gave it away, by chance)."""
    feature = f"import doctest\n\n\ndef double(x):\n    {swap}\n    return 2 * x\n"
    findings = _run(tmp_path, feature, docs=True)
    assert any(f.startswith(f"replaced {swap.split(' = ')[0]} ") for f in findings), findings


# A held-out type checker's suite (2026-12-07): every gold patch scored ``tampered`` for what the
# project itself does. Each honest case below had a finding before.
HONEST = {
    "the feature's own decorator, applied to a test by the test file": (
        "import functools\n\n\ndef checked(f):\n    @functools.wraps(f)\n    def wrapper(*a, **k):\n"
        "        return f(*a, **k)\n    return wrapper\n\n\n" + FEATURE),
    "a stdlib module imported by the candidate's code swaps its own function's code": (
        # asyncio.tasks runs @types.coroutine on its __sleep0 as it is imported (here, again: the
        # suite's plugins import asyncio before any candidate code runs).
        "def double(x):\n    import importlib, sys\n    sys.modules.pop('asyncio.tasks', None)\n"
        "    importlib.import_module('asyncio.tasks')\n    return 2 * x\n"),
    "a pytest module left imported by a run that put sys.modules back (pytester)": (
        "def double(x):\n    import sys\n    import _pytest.pytester_assertions\n"
        "    sys.modules.pop('_pytest.pytester_assertions', None)\n    return 2 * x\n"),
    "pytest modules imported by a run that put sys.modules back, their imports gone too": (
        # As pytester's SysModulesSnapshot does: stepwise imports the cache provider, which the
        # run's -p no:cacheprovider kept out of the outer session.
        "def double(x):\n    import sys\n    before = set(sys.modules)\n    import _pytest.stepwise\n"
        "    for name in set(sys.modules) - before:\n        del sys.modules[name]\n    return 2 * x\n"),
    "the feature's own code, in a thread it starts, that ends soon after the test": (
        # diskcache's memoize_stampede recomputes a value in the background.
        "import threading, time\n\n\ndef _recompute():\n    time.sleep(0.5)\n\n\n"
        "def double(x):\n    threading.Thread(target=_recompute).start()\n    return 2 * x\n"),
    "the feature's own code, in a pool's worker thread, that ends soon after the test": (
        # The worker's target is the standard library's; its stack holds the feature's code.
        "import time\nfrom concurrent.futures import ThreadPoolExecutor\n\n_POOL = ThreadPoolExecutor(1)\n\n\n"
        "def _recompute():\n    time.sleep(0.2)\n\n\n"
        "def double(x):\n    _POOL.submit(_recompute)\n    return 2 * x\n"),
    "threads of the feature's in C calls with plain arguments, still running at every check": (
        # A C callable with values that call nothing back (a sleep, a blocking read, a C sort
        # with no key) is no loop the guard cannot see, whether run by a thread or a pool's worker.
        "import os, threading, time\nfrom concurrent.futures import ThreadPoolExecutor\n\n"
        "_POOL = ThreadPoolExecutor(1)\n_READ, _WRITE = os.pipe()\n_STARTED = []\n\n\n"
        "def double(x):\n    if not _STARTED:\n"
        "        _STARTED.append(threading.Thread(target=time.sleep, args=(30,), daemon=True))\n"
        "        _STARTED.append(threading.Thread(target=os.read, args=(_READ, 1), daemon=True))\n"
        "        [thread.start() for thread in _STARTED]\n"
        "        _POOL.submit(sorted, list(range(100000, 0, -1)))\n"
        "        timer = threading.Timer(30, print, args=('late',))\n        timer.daemon = True\n"
        "        timer.start()\n    return 2 * x\n"),
}


@pytest.mark.parametrize("case", sorted(HONEST))
def test_what_a_project_does_itself_is_no_tampering(tmp_path: Path, case: str) -> None:
    assert _run(tmp_path, HONEST[case]) == []


def test_a_lookalike_of_a_pytest_module_left_as_a_package_member_is_still_found(tmp_path: Path) -> None:
    candidate = FEATURE + textwrap.dedent("""\
        import sys, types, _pytest
        fake = types.ModuleType("_pytest.pytester_assertions")
        fake.__file__ = _pytest.__file__
        fake.assert_outcomes = lambda *args, **kwargs: None
        _pytest.pytester_assertions = fake
    """)
    findings = _run(tmp_path, candidate)
    assert any(f.startswith("added _pytest.pytester_assertions") for f in findings), findings
