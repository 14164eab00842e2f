"""The baseline: the unmodified suite in new interpreters under different hash seeds, then once in the
fork server, then once beside busy processes; the stable passing tests, and the tests that depend
on the seed or on timing."""

from __future__ import annotations

import ast
import random
import re
import secrets
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path, PurePosixPath

from taskforge.errors import TestRunError
from taskforge.mining.outcome import RepoResult
from taskforge.repo.suite import RunResult, SuiteRunner
from taskforge.repo.symbols import SymbolIndex
from taskforge.repo.testfiles import TestLayout
from taskforge.task import is_ambiguous_doctest_id

__all__ = ["Baseline", "agreed_outcomes", "date_dependent_ids", "fork_disagreement", "hash_seeds", "measured_import_time", "run_baseline",
           "run_timeout", "test_function", "timing_tests"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Baseline:
    passing: tuple[str, ...]
    """Tests that passed in every baseline run."""
    tests: tuple[str, ...]
    """Every test of the first baseline run, whatever its outcome."""
    coverage: dict[str, dict[str, list[int]]]
    definitions: dict[str, tuple[str, int, str]]
    """Where each test's function is defined (``RunResult.definitions`` of the coverage run):
    hiding finds a generated test's definition there."""
    importable: tuple[str, ...]
    """Package modules that import at baseline (the import check after a removal uses these)."""
    seed_dependent: tuple[str, ...] = ()
    """Tests whose node id or outcome differed between runs under different hash seeds: in
    neither FAIL_TO_PASS nor PASS_TO_PASS."""
    date_dependent: tuple[str, ...] = ()
    """Tests whose node id holds the date or time of the run (:func:`date_dependent_ids`), and the
    other parametrizations of their functions: another day's run has other ids. In neither list."""
    ignored: tuple[str, ...] = ()
    """Test modules that could not be collected in the unmodified project, left out of every run."""
    seconds: float = 0.0
    """The slowest of the baseline's runs without busy neighbours: what a whole suite run takes."""
    load_sensitive: tuple[str, ...] = ()
    """Tests whose outcome changed in a run beside busy processes, or whose code times what it
    tests (:func:`timing_tests`): in neither list."""
    selection_sensitive: tuple[str, ...] = ()
    """Tests that pass when the whole suite is collected but not when selected by id, as scoring
    selects them (only their files collected): a test that needs a module only the collection of
    the package's doctests imports. In neither list."""
    marked_flaky: tuple[str, ...] = ()
    """Tests the project itself marks flaky (``@pytest.mark.flaky``, the flaky package's
    ``@flaky``; ``RunResult.marked_flaky``): in neither list, whatever the baseline saw."""
    fork_server: str = ""
    """Whether the repository's later runs fork from a server: ``used``, ``not used: WHY``, or
    ``fallback: WHY`` (its run disagreed with the new interpreters')."""
    import_time: frozenset[str] | None = None
    """The functions and methods that ran while the package's modules were imported, as measured
    (``measured_import_time``); None where the measurement saw none of the package's code run."""


_RUN_TIMEOUT_FACTOR = 5.0
_MIN_RUN_TIMEOUT_S = 120.0
_BUSY = 2
"""Busy processes beside the baseline's load check (with the sandbox's one CPU, pytest gets a third)."""


def hash_seeds(count: int) -> list[int]:
    """``count`` different PYTHONHASHSEED values, new on every call: a test that depends on the
    seed should meet seeds it has not met before."""
    seeds: list[int] = []
    while len(seeds) < count:
        seed = secrets.randbelow(4_294_967_295) + 1
        if seed not in seeds:
            seeds.append(seed)
    return seeds


_DATE_FORMATS = ("%Y-%m-%d", "%Y%m%d", "%Y/%m/%d", "%Y.%m.%d", "%Y_%m_%d", "%d/%m/%Y", "%m/%d/%Y", "%d.%m.%Y",
                 "%d-%m-%Y", "%d/%m/%y", "%m/%d/%y", "%b %d, %Y", "%B %d, %Y", "%d %b %Y", "%d %B %Y")
_DATE_WINDOW = timedelta(days=31)
"""How far from the run a date or time in an id counts: ``today + timedelta(days=7)`` is as much
the run's date as today is; a project's fixed test data is rarely this close to it."""
_DATE_LIKE = re.compile(r"(?<![0-9A-Za-z])(?:\d{1,4}[-/._]\d{1,2}[-/._]\d{1,4}|\d{8}|[A-Z][a-z]+ \d{1,2}, \d{4}"
                        r"|\d{1,2} [A-Z][a-z]+ \d{4})(?![0-9A-Za-z])")
_EPOCH = re.compile(r"(?<!\d)(\d{10}|\d{13}|\d{16}|\d{19})(?:\.\d+)?(?!\d)")


def date_dependent_ids(ids: Iterable[str], now: datetime | None = None) -> set[str]:
    """The ids that hold a date or a Unix time (seconds to nanoseconds) within a month of the run
    in their parametrization or name: a test parametrized over ``date.today()`` (a held-out
    project's ``test_to_string[case7-2026-12-05]``) has another id on another day, so every task
    that lists it fails ``validate`` and scores gold with an expected test ``missing`` from the
    next day on. Dates count in the common spellings, padded or not. A text file of doctests, whose
    id repeats its file name, is the project's path, not a date."""
    now = now or datetime.now(timezone.utc)
    days = [now + timedelta(days=shift) for shift in range(-_DATE_WINDOW.days, _DATE_WINDOW.days + 1)]
    spellings = {day.strftime(fmt) for day in days for fmt in _DATE_FORMATS}
    spellings |= {text for d in days for text in (f"{d.year}-{d.month}-{d.day}", f"{d.month}/{d.day}/{d.year}",
                                                  f"{d.day}/{d.month}/{d.year}", f"{d.day}.{d.month}.{d.year}")}
    low, high = (now - _DATE_WINDOW).timestamp(), (now + _DATE_WINDOW).timestamp()
    found = set()
    for nodeid in ids:
        file, _, name = nodeid.partition("::")
        if name == PurePosixPath(file).name:
            continue
        if any(m.group(0) in spellings for m in _DATE_LIKE.finditer(name)) or any(low <= int(m.group(1)) / 10 ** (len(m.group(1)) - 10) <= high
                                       for m in _EPOCH.finditer(name)):
            found.add(nodeid)
    return found


def agreed_outcomes(runs: Sequence[RunResult]) -> dict[str, str]:
    """node id -> outcome of the tests every run has, with the same outcome in all."""
    first, *rest = runs
    return {t: r.outcome for t, r in first.results.items()
            if all(t in other.results and other.results[t].outcome == r.outcome for other in rest)}


def fork_disagreement(forked: RunResult, agreed: Mapping[str, str]) -> str:
    """Why the fork server's run of the unmodified suite cannot stand in for a new interpreter's
    (empty when it can): it did not run, or a test the new interpreters agree on differs."""
    if forked.status not in ("ok", "tests_failed"):
        tail = (forked.output_tail.strip().splitlines() or [""])[-1][:200]
        return f"the suite {forked.status.replace('_', ' ')} in the fork server: {tail}"
    differ = [t for t, outcome in agreed.items()
              if t not in forked.results or forked.results[t].outcome != outcome]
    if differ:
        seen = forked.results[differ[0]].outcome if differ[0] in forked.results else "missing"
        return (f"{len(differ)} test(s) differ from new interpreters' runs (first: {differ[0]}: "
                f"{agreed[differ[0]]} in new interpreters, {seen} in the fork server)")
    return ""


def run_baseline(runner: SuiteRunner, index: SymbolIndex, runs: int, result: RepoResult, layout: TestLayout) -> Baseline:
    """The unmodified suite, ``runs`` times, each in a new interpreter under its own hash seed (the
    first under coverage); then once in the fork server, which the repository keeps only if that
    run agrees with them (otherwise every later run starts a new interpreter).

    A test whose node id or outcome is not the same in every run is seed-dependent (or flaky): it
    joins neither list, and neither do the other parametrizations of its function. Parametrizations
    over a ``set`` get ids in the set's order (``expected3``), so their ids differ from seed to seed.
    """
    seeds = hash_seeds(runs)
    first = runner.run(coverage=True, imports=sorted(index.modules), env={"PYTHONHASHSEED": str(seeds[0])})
    ignored: tuple[str, ...] = ()
    if first.status == "collection_errors":
        # Test modules that do not even import in the unmodified project (a settings module the
        # sdist left out), beside others that run: every later run leaves them out (--ignore).
        broken = sorted({error.location.split("::", 1)[0] for error in first.collection_errors})
        leave_out = [f"--ignore={location}" for location in broken]
        result.runs += 1
        second = runner.run(coverage=True, imports=sorted(index.modules), env={"PYTHONHASHSEED": str(seeds[0])},
                            extra_args=leave_out)
        if second.status in ("ok", "tests_failed"):  # else nothing left runs: the first run's error says why
            first, ignored = second, tuple(broken)
            runner.need_args(*leave_out)
    fresh = [first]
    fresh += [runner.run(env={"PYTHONHASHSEED": str(seed)}, fork_server=False) for seed in seeds[1:]]
    result.runs += runs
    for run in fresh:
        if run.status not in ("ok", "tests_failed"):
            detail = run.collection_errors[0].message if run.collection_errors else run.output_tail.strip()[-200:]
            if run.status == "oom":
                progress = re.findall(r"\[\s*(\d+)%\]", run.output_tail)
                detail = (f"the suite needed more than the sandbox's {runner.limits.memory_mb} MB"
                          + (f" at about {progress[-1]}% of its tests" if progress else "")
                          + "; raise [sandbox] memory_mb in the recipe, or deselect "
                          "the test that needs it with the project's pytest options")
            raise TestRunError(f"the baseline suite of {runner.snapshot.source} did not run ({run.status}): {detail}",
                               reason=f"baseline_{run.status}")
    agreed = agreed_outcomes(fresh)
    fork_server = "not used: off for this run"
    if runner.fork_server:
        forked = runner.run()
        result.runs += 1
        if forked.interpreter == "fork":
            why = fork_disagreement(forked, agreed)
            if why:
                runner.fork_server = False
                fork_server = f"fallback: {why}"
            else:
                fork_server = "used"
                fresh.append(forked)  # one more hash seed, the server's
        else:  # no server would serve (pytest imports the code under test): one more new interpreter
            fork_server = f"not used: {forked.interpreter}"
            fresh.append(forked)
        agreed = agreed_outcomes(fresh)
    # One more new interpreter, with busy processes beside it in the sandbox's CPU quota: a test
    # whose outcome depends on timing (a "linear time" check) passes on a quiet machine and fails
    # on a loaded scoring host.
    contended = runner.run(env={"PYTHONHASHSEED": str(hash_seeds(1)[0])}, fork_server=False, contend=_BUSY)
    result.runs += 1
    load_sensitive: set[str] = set()
    if contended.status in ("ok", "tests_failed"):
        moved = {test_function(t) for t, outcome in agreed.items()
                 if t not in contended.results or contended.results[t].outcome != outcome}
        load_sensitive = {t for t in agreed if test_function(t) in moved}
    # One busy run catches a timing test only when the load happens to tip it; a test that times
    # what it tests (zipp's big-O checks, one of them not marked flaky) fails on some busy host
    # sooner or later, whatever the baseline saw.
    load_sensitive |= timing_tests(runner.snapshot.path, agreed)
    passed = [t for t, outcome in agreed.items() if outcome == "passed"]
    selection_sensitive = selection_sensitive_tests(runner, passed)
    result.runs += 2
    seen = set().union(*(run.results for run in fresh))
    # The parametrizations of one test function come from one parametrize call: if some of their
    # ids differ between seeds, the others only matched by chance (a set's order kept one element
    # at the same index), and another seed moves them too.
    unsettled = {test_function(t) for t in seen - set(agreed)}
    seed_dependent = {t for t in seen if test_function(t) in unsettled}
    dated = {test_function(t) for t in date_dependent_ids(seen)}
    date_dependent = {t for t in seen if test_function(t) in dated} - seed_dependent
    first = fresh[0]
    # What the scorer, reading ids alone, could take for a test or a doctest either way: in neither list.
    ambiguous = {t for t in first.results
                 if is_ambiguous_doctest_id(t, test_module=bool(layout.test_modules([t.split("::", 1)[0]])))}
    marked_flaky = set(first.marked_flaky)
    return Baseline(
        passing=tuple(t for t in first.results
                      if agreed.get(t) == "passed" and t not in seed_dependent and t not in date_dependent
                      and t not in ambiguous
                      and t not in load_sensitive and t not in marked_flaky and t not in selection_sensitive),
        tests=tuple(first.results),
        coverage=first.coverage or {},
        definitions=first.definitions or {},
        importable=tuple(m for m in sorted(index.modules) if m not in first.import_errors),
        seed_dependent=tuple(sorted(seed_dependent)),
        date_dependent=tuple(sorted(date_dependent)),
        seconds=max(run.duration_s for run in fresh),
        ignored=ignored,
        load_sensitive=tuple(sorted(load_sensitive - seed_dependent)),
        selection_sensitive=tuple(sorted(selection_sensitive - seed_dependent - load_sensitive)),
        marked_flaky=tuple(sorted(marked_flaky)),
        fork_server=fork_server,
        import_time=measured_import_time(index, first.import_calls),
    )


def selection_sensitive_tests(runner: SuiteRunner, passed: Sequence[str]) -> set[str]:
    """The tests of ``passed`` that fail when selected by id, as scoring selects them, among half
    of the files, in reverse order.

    Scoring collects only the files of the tests it runs, and deals a task's files to two runs. A
    test that passes only beside what the collection of other files imports (a handler registered
    by a package module that ``--doctest-modules`` collects), or only after another file's tests
    ran (a held-out project's test expects 43 digits of a ``Decimal`` that the default context
    rounds to 28; its tests of another language raise the precision, for good, and run first in a
    whole run), fails in some scoring and would fail the gold patch. So the passing tests run
    again in two runs, their files dealt at random, each file's tests in their order but the files
    in reverse: a dependence on a file of the other half always shows, and so does a dependence on
    state an earlier file's tests leave; one on an import by a file of the same half shows half
    the time."""
    files = sorted({t.split("::", 1)[0] for t in passed})
    random.Random(secrets.randbits(64)).shuffle(files)
    halves = [set(files[0::2]), set(files[1::2])]
    failed: set[str] = set()
    for half in halves:
        select = [t for t in passed if t.split("::", 1)[0] in half]
        if not select:
            continue
        run = runner.run(select=select, env={"PYTHONHASHSEED": str(hash_seeds(1)[0]), "TASKFORGE_ORDER": "reverse"})
        if run.status in ("ok", "tests_failed", "collection_errors"):
            failed |= {t for t in select if t not in run.results or run.results[t].outcome != "passed"}
    return failed


def measured_import_time(index: SymbolIndex, calls: Sequence[tuple[str, int, str]]) -> frozenset[str] | None:
    """The functions and methods of ``index`` whose code ran while the package's modules were
    imported: the owner of each called code object's first line (a lambda's or a comprehension's
    is the function it sits in). Class bodies and module bodies are not functions.

    What ran is what a removal can break at import; the index's :attr:`SymbolIndex.import_time`
    over-approximates it from the source (every dunder of a class instantiated at import, every
    method of an instance passed to a call), and refused a third of some projects' candidates
    that never run then. None where no module body of the package was seen to run (the package
    was imported from elsewhere than the workspace): the measurement says nothing then."""
    package_files = set(index.modules.values())
    if not any(name == "<module>" and path in package_files for path, _, name in calls):
        return None
    ran: set[str] = set()
    for path, line, name in calls:
        if name == "<module>" or path not in package_files:
            continue
        symbol = index.symbol_at(path, line)
        if symbol is None or symbol.kind == "class":
            continue  # a class body, or a lambda at module level
        # A def's code starts at its first decorator, which the def owns; a lambda's or a
        # comprehension's belongs to the function it sits in, which counts (a lambda in a default
        # value makes its function count though it never ran: an over-count, which only refuses).
        ran.add(symbol.qualname)
    return frozenset(ran)


def run_timeout(baseline_s: float, ceiling_s: float) -> float:
    """How long a run of the suite, or of part of it, may take once the baseline has shown how long
    the whole suite takes: a removal that makes a test loop forever (an iterator that never ends)
    costs minutes, not the configured ceiling."""
    return min(ceiling_s, max(_MIN_RUN_TIMEOUT_S, _RUN_TIMEOUT_FACTOR * baseline_s))


def test_function(nodeid: str) -> str:
    """The node id without its parametrization: ``f.py::test_x[a-1]`` is ``f.py::test_x``."""
    return nodeid.split("[", 1)[0]


TIMERS = frozenset({"big_o", "timeit", "perf_counter", "perf_counter_ns", "pytest_benchmark"})
"""Names whose use in a test's code means the test times what it tests: a complexity fit
(``big_o``), ``timeit``, the high-resolution clock (not ``time.time``, which tests read for
timestamps too)."""


def timing_tests(root: Path, nodeids: Iterable[str]) -> set[str]:
    """Of ``nodeids``, the tests whose function, or a function it calls by name, uses one of
    :data:`TIMERS`: a function or method of its own module, or one it imports from a module of the
    repository (a ``perf_utils`` helper beside the tests). Read from the source: a file that does
    not parse contributes none."""
    by_file: dict[str, list[str]] = {}
    for nodeid in nodeids:
        path, sep, _ = nodeid.partition("::")
        if sep and path.endswith(".py"):
            by_file.setdefault(path, []).append(nodeid)
    parsed: dict[Path, ast.Module | None] = {}
    found: set[str] = set()
    for path, ids in by_file.items():
        tree = _parse(root / path, parsed)
        if tree is None:
            continue
        timed = _timed_names(tree, _imported_timed_names(root, root / path, tree, parsed))
        for qualname, _ in _functions(tree, ()):
            if qualname[-1] in timed:
                prefix = "::".join(qualname)
                found |= {i for i in ids if test_function(i).partition("::")[2] == prefix}
    return found


def _parse(path: Path, parsed: dict[Path, ast.Module | None]) -> ast.Module | None:
    if path not in parsed:
        try:
            parsed[path] = ast.parse(path.read_bytes())
        except (OSError, SyntaxError, ValueError):
            parsed[path] = None
    return parsed[path]


def _timed_names(tree: ast.Module, imported: set[str] | frozenset[str] = frozenset()) -> set[str]:
    """Names of the module's functions and methods that use a timer, or call one that does (of
    the module, or ``imported``: names it imports timing functions under)."""
    functions = list(_functions(tree, ()))
    timed = {qualname[-1] for qualname, node in functions if _uses_timer(node)}
    grown = True
    while grown:
        more = {qualname[-1] for qualname, node in functions if _calls(node) & (timed | imported)} - timed
        timed |= more
        grown = bool(more)
    return timed


def _imported_timed_names(root: Path, file: Path, tree: ast.Module, parsed: dict[Path, ast.Module | None]) -> set[str]:
    """The names under which ``tree`` imports a timing function from a module of the repository:
    ``from tests.perf_utils import assert_linear as quick`` gives ``quick``; ``import
    tests.perf_utils as pu`` gives the module's timing functions' own names (``pu.assert_linear``)."""
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            module = _module_file(root, file, node.module or "", node.level)
            other = _parse(module, parsed) if module else None
            if other is not None:
                timed = _timed_names(other)
                names |= {alias.asname or alias.name for alias in node.names if alias.name in timed}
        elif isinstance(node, ast.Import):
            for alias in node.names:
                module = _module_file(root, file, alias.name, 0)
                other = _parse(module, parsed) if module else None
                if other is not None:
                    names |= _timed_names(other)
    return names


def _module_file(root: Path, file: Path, module: str, level: int) -> Path | None:
    """The repository's file of ``module`` as imported from ``file``: relative to the file's
    package for a relative import, else from the repository's root or the test file's folder."""
    parts = [p for p in module.split(".") if p]
    if level:
        bases = [file.parents[level - 1]] if level - 1 < len(file.parents) else []
    else:
        bases = [root, root / "src", file.parent]
    for base in bases:
        for candidate in (base.joinpath(*parts).with_suffix(".py") if parts else None, base.joinpath(*parts, "__init__.py")):
            if candidate is not None and candidate.is_file() and candidate.resolve().is_relative_to(root.resolve()):
                return candidate
    return None


def _functions(node: ast.AST, scope: tuple[str, ...]) -> Iterable[tuple[tuple[str, ...], ast.FunctionDef | ast.AsyncFunctionDef]]:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield (*scope, child.name), child
        elif isinstance(child, ast.ClassDef):
            yield from _functions(child, (*scope, child.name))


def _uses_timer(node: ast.AST) -> bool:
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and sub.id in TIMERS or isinstance(sub, ast.Attribute) and sub.attr in TIMERS:
            return True
        if isinstance(sub, ast.alias) and sub.name.split(".")[0] in TIMERS:
            return True
        if isinstance(sub, ast.While) and _waits_on_a_clock(sub):
            return True
    return False


def _waits_on_a_clock(loop: ast.While) -> bool:
    """``while now() < deadline: ...; sleep(0.01)``: a loop that compares a call's result (a clock
    read) and sleeps, which counts on how much runs between two reads (a held-out project's
    debounce test, whose own clock no timer name gives away, failed its gold runs under load)."""
    compares_a_call = any(isinstance(sub, ast.Compare) and any(isinstance(s, ast.Call) for s in ast.walk(sub))
                          for sub in ast.walk(loop.test))
    sleeps = any(isinstance(sub, ast.Call) and (isinstance(sub.func, ast.Name) and sub.func.id == "sleep"
                                               or isinstance(sub.func, ast.Attribute) and sub.func.attr == "sleep")
                 for stmt in loop.body for sub in ast.walk(stmt))
    return compares_a_call and sleeps


def _calls(node: ast.AST) -> set[str]:
    """Names the function calls: ``f(...)`` and ``self.f(...)``/``cls.f(...)``."""
    names = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call):
            if isinstance(sub.func, ast.Name):
                names.add(sub.func.id)
            elif isinstance(sub.func, ast.Attribute) and isinstance(sub.func.value, ast.Name):
                names.add(sub.func.attr)
    return names
