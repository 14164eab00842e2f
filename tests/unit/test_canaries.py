"""Canary twins (taskforge.repo.canaries): what a twin changes, where it goes, what gets none.

The end-to-end side (gold fails every twin kept; a forged pass trips one) is in
tests/integration/test_scorer_integrity.py."""

from __future__ import annotations

import ast
import random
import textwrap

import pytest

from taskforge.repo.canaries import Twin, make_twins, place_twin, place_twins, twin_ids

FILE = "tests/test_p.py"
SOURCE = textwrap.dedent('''\
    import pytest
    from pkg import parse, Thing

    WORDS = ["bee", "cat", "dog"]


    def test_parse():
        assert parse("a=1") == {"a": 1}
        assert parse("b") == "bee"


    class TestThing:
        @pytest.mark.slow
        def test_truthy(self):
            x = Thing("q")
            assert x


        def test_unittest_style(self):
            self.assertEqual(Thing("q").size, 3)


    def test_member():
        assert "a" in parse("a=1")


    @pytest.mark.parametrize("v", [1, 2])
    def test_param(v):
        assert parse(v) == 7


    def test_raises_only():
        with pytest.raises(ValueError):
            parse("?")
''')
IDS = [f"{FILE}::test_parse", f"{FILE}::TestThing::test_truthy", f"{FILE}::TestThing::test_unittest_style",
       f"{FILE}::test_member", f"{FILE}::test_param[1]", f"{FILE}::test_raises_only"]


def _twins(ids: list[str] = IDS, others: tuple[str, ...] = ()) -> list[Twin]:
    return make_twins({FILE: SOURCE}, ids, others=others, seed="task-1")


def _function(text: str, *path: str) -> ast.AST:
    tree = ast.parse(text)
    body = tree.body
    for cls in path[:-1]:
        body = next(n for n in body if isinstance(n, ast.ClassDef) and n.name == cls).body
    return next(n for n in body if isinstance(n, ast.FunctionDef) and n.name == path[-1])


def test_each_twin_changes_one_check_and_nothing_else() -> None:
    twins = _twins()
    assert {t.test for t in twins} == {f"{FILE}::test_parse", f"{FILE}::TestThing::test_truthy",
                                       f"{FILE}::TestThing::test_unittest_style", f"{FILE}::test_member",
                                       f"{FILE}::test_raises_only"}
    for twin in twins:
        if twin.kind == "plain":
            continue
        original = ast.get_source_segment(SOURCE, _function(SOURCE, *twin.test.split("::")[1:]))
        assert original is not None
        if twin.kind in ("input", "raises"):  # one line of input data or one exception differs
            assert len(set(twin.source.splitlines()) - set(SOURCE.splitlines())) == 1, twin.source
            continue
        ours = [line.strip() for line in twin.source.splitlines() if line.strip().startswith(("assert", "self.", "def"))]
        theirs = [line.strip() for line in original.splitlines() if line.strip().startswith(("assert", "self.", "def"))]
        assert len(ours) == len(theirs)
        assert sum(a != b for a, b in zip(ours, theirs, strict=True)) == 1, twin.source
        ast.parse(textwrap.dedent(twin.source))  # still Python


def test_value_twins_take_values_from_the_file() -> None:
    value = [t for t in _twins() if t.test.endswith("::test_parse") and t.kind == "value"]
    assert value
    altered = {line.strip() for t in value for line in t.source.splitlines()} - {line.strip() for line in SOURCE.splitlines()}
    assert altered  # e.g. parse("b") == "cat": another three-letter string of the same file
    for line in altered:
        assert any(word in line for word in ("cat", "dog", "a=1", '"a": 2', '"a": 0', '"a": 3', "1")), line


def test_only_what_a_result_is_gets_value_twins_and_no_input_twin_alters_a_check() -> None:
    """A twin must fail for every correct solution, every time. ``assert s in [[1, 2], [2, 1]]``
    accepts either answer (a random draw, an order that follows the hash seed): a twin with one
    of them altered passes whenever the solution gives another (glom's ``test_sample``: gold
    scored ``tampered`` in 11 of 15 scorings). So only equality checks that always run have value
    sites: not a membership (``"usage" in out`` as ``"options" in out`` holds for a solution that
    prints both), not what a result is *not*, not a check in a loop (it may never run). And no
    input twin alters a literal a check compares with, in place or bound to a name."""
    source = textwrap.dedent('''\
        from pkg import draw, records, text


        def test_draw():
            pair = draw([1, 2, 3])
            assert pair in [[1, 2], [1, 3], [2, 1], [2, 3], [3, 1], [3, 2]]
            assert len(pair) == 2


        def test_draw_named():
            allowed = [("a", "b"), ("b", "a")]
            assert draw("ab") in allowed


        def test_draw_unittest(self):
            self.assertIn(draw("xy"), ["xy", "yx"])


        def test_draw_either():
            one, other = "a,b", "b,a"
            assert draw("ab") == one or draw("ab") == other


        def test_contains():
            assert "word" in text()


        def test_not_this():
            assert draw([1, 2]) != 3
            assert draw("ab") not in ["c", "d"]


        def test_in_a_loop():
            for record in records(4):
                assert record == "INFO"
    ''')
    tests = ["test_draw", "test_draw_named", "test_draw_unittest", "test_draw_either", "test_contains",
             "test_not_this", "test_in_a_loop"]
    twins = make_twins({FILE: source}, [f"{FILE}::{name}" for name in tests], seed="draws")
    kinds = {(t.name, t.kind) for t in twins}
    value = {name for name, kind in kinds if kind == "value"}
    assert value == {"test_draw"}, value
    (altered,) = {line.strip() for t in twins if t.kind == "value" for line in t.source.splitlines()} \
        - {line.strip() for line in source.splitlines()}
    assert altered.startswith("assert len(pair) == ") and altered != "assert len(pair) == 2"
    checks = [line.strip() for line in source.splitlines() if line.strip().startswith(("assert", "self.assert"))]
    checks += ['allowed = [("a", "b"), ("b", "a")]', 'one, other = "a,b", "b,a"']
    for twin in twins:
        if twin.kind == "input":
            assert all(check in twin.source for check in checks if check in _function_source(source, twin.name)), \
                twin.source
    assert {"test_draw_named", "test_contains", "test_not_this"} <= {name for name, kind in kinds if kind == "negated"}


def _function_source(source: str, name: str) -> str:
    tree = ast.parse(source)
    (function,) = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == name]
    return ast.get_source_segment(source, function) or ""


def test_negated_twins_flip_the_last_check() -> None:
    by_test = {(t.test.split("::")[-1], t.kind): t.source for t in _twins()}
    assert "assert not x" in by_test[("test_truthy", "negated")]
    assert "assertNotEqual" in by_test[("test_unittest_style", "negated")]
    assert '"a" not in parse' in by_test[("test_member", "negated")]
    assert 'parse("b") != "bee"' in by_test[("test_parse", "negated")]


def test_parametrized_tests_get_none_and_checkless_ones_a_plain_failure() -> None:
    twins = _twins()
    assert f"{FILE}::test_param[1]" not in {t.test for t in twins}
    checkless = [t for t in twins if t.test == f"{FILE}::test_raises_only"]
    assert [t.kind for t in checkless] == ["input", "raises", "plain"]  # parse("?") gets another input
    assert 'parse("?")' not in checkless[0].source
    assert "pytest.raises(ValueError)" not in checkless[1].source and 'parse("?")' in checkless[1].source
    assert checkless[2].source.splitlines()[-1].startswith("    raise AssertionError(")
    # Every twinned test keeps a plain twin as the last resort: calibration may keep no other.
    assert {t.test for t in twins} == {t.test for t in twins if t.kind == "plain"}


def test_an_inherited_method_is_one_twin_for_every_id_that_runs_it() -> None:
    """``TestSub::test_truthy`` runs ``TestThing.test_truthy``: the twin replaces the method where
    it is defined and stands in for both ids; with one of them PASS_TO_PASS, it gets none."""
    text = SOURCE + "\n\nclass TestSub(TestThing):\n    pass\n"
    both = [f"{FILE}::TestThing::test_truthy", f"{FILE}::TestSub::test_truthy"]
    twins = make_twins({FILE: text}, both, seed="task-1")
    assert twins and all(t.tests == tuple(sorted(both)) and t.classes == ("TestThing",) for t in twins)
    assert twin_ids(twins[0], "x") == [f"{FILE}::TestSub::x", f"{FILE}::TestThing::x"]
    assert make_twins({FILE: text}, both[:1], others=both[1:], seed="task-1") == []


def test_a_twin_takes_its_tests_place_or_sits_beside_it() -> None:
    twin = next(t for t in _twins() if t.test.endswith("::TestThing::test_truthy"))
    replaced = place_twin(SOURCE, twin)
    assert "assert not x" in replaced and "        assert x\n" not in replaced
    assert replaced.count("def test_truthy") == 1
    assert len(replaced.splitlines()) == len(SOURCE.splitlines())
    beside = place_twin(SOURCE, twin, name="test_truthy_canary_0")
    assert "def test_truthy(self)" in beside and "def test_truthy_canary_0(self)" in beside
    assert twin_ids(twin, "test_truthy_canary_0") == [f"{FILE}::TestThing::test_truthy_canary_0"]
    tree = ast.parse(beside)
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef))
    assert [n.name for n in cls.body if isinstance(n, ast.FunctionDef)] == [
        "test_truthy", "test_truthy_canary_0", "test_unittest_style"]


def test_twins_round_trip_as_json_and_are_deterministic_per_seed() -> None:
    twins = _twins()
    assert [Twin.from_json(t.to_json()) for t in twins] == twins
    assert _twins() == twins


def test_a_test_that_is_gone_cannot_be_placed() -> None:
    twin = _twins()[0]
    with pytest.raises(ValueError):
        place_twin("def test_other():\n    pass\n", twin)


def test_non_ascii_lines_are_edited_at_the_right_columns() -> None:
    text = 'def test_u():\n    assert parse("é") == "ü-x"\n    assert "ß" == parse("ß")\n'
    twins = make_twins({FILE: text}, [f"{FILE}::test_u"], seed="s")
    assert twins
    for twin in twins:
        ast.parse(twin.source)
        assert "é" in twin.source


def test_the_two_runs_of_a_scoring_look_alike_and_never_hold_a_test_with_its_twin() -> None:
    """The scorer's plan (taskforge.scoring.verdict.plan_runs): both runs select every FAIL_TO_PASS
    test, sorted; PASS_TO_PASS is split between them by file, and the PASS_TO_PASS tests of a file
    that holds FAIL_TO_PASS tests run in both; each twinned id is a canary in at most one run,
    at random and on its own, and some id is one in every scoring; the file of each run has the
    twin in the test's place."""
    import json
    from dataclasses import replace

    from taskforge.datasets.testing import task_rows
    from taskforge.scoring.verdict import plan_runs
    from taskforge.task import Task

    twinned = [f"{FILE}::test_parse", f"{FILE}::TestThing::test_truthy", f"{FILE}::test_member"]
    fail_to_pass = [*twinned, f"{FILE}::test_param[1]"]
    beside = [f"{FILE}::test_beside_{n}" for n in range(3)]
    sizes = {"tests/test_a.py": 5, "tests/test_b.py": 3, "tests/test_c.py": 2, "tests/test_d.py": 2,
             "tests/test_e.py": 1}
    elsewhere = [f"{file}::test_{n}" for file, size in sizes.items() for n in range(size)]
    pass_to_pass = [*beside, *elsewhere]
    twins = make_twins({FILE: SOURCE}, fail_to_pass, seed="t")
    base = Task.from_row(task_rows(1)[0])
    task = replace(base, FAIL_TO_PASS=tuple(fail_to_pass), PASS_TO_PASS=tuple(pass_to_pass),
                   validation=json.dumps({"canaries": [t.to_json() for t in twins]}))
    selected = [*fail_to_pass, *pass_to_pass]
    placings: dict[str, set[int]] = {t.test: set() for t in twins}
    for _ in range(60):
        first, second = plan_runs(task, {FILE: SOURCE.encode()}, selected)
        assert first.select == sorted(first.select) and second.select == sorted(second.select)
        assert set(fail_to_pass) <= set(first.select) and set(fail_to_pass) <= set(second.select)
        assert set(beside) <= set(first.select) and set(beside) <= set(second.select)
        others = [set(part.select) - set(fail_to_pass) - set(beside) for part in (first, second)]
        assert others[0].isdisjoint(others[1]) and others[0] | others[1] == set(elsewhere)
        assert sorted(len(o) for o in others) == [6, 7]  # 5 | 3 + 2 + ... dealt largest first
        for file in sizes:  # a file's tests go together
            assert sum(any(t.startswith(file + "::") for t in o) for o in others) == 1
        assert first.canaries.isdisjoint(second.canaries) and first.canaries | second.canaries
        assert first.canaries | second.canaries <= {i for t in twins for i in t.tests}
        for twin in {t.test: t for t in twins}.values():  # each test's placing, on its own
            ids = set(twin.tests)
            placings[twin.test].add(0 if ids <= first.canaries else 1 if ids <= second.canaries else 2)
        for part in (first, second):
            text = part.changes[FILE].decode()
            assert text.count("def test_parse(") == 1 and text.count("def test_truthy(") == 1
            for test in part.canaries:
                name = test.split("::")[-1]
                assert name in text
            assert (text != SOURCE) == bool(part.canaries)
    # Twin in the first run, in the second, or none (itself in both): every test met all three
    # (a miss has odds of 3 * (2/3)^60 per test).
    assert all(seen == {0, 1, 2} for seen in placings.values()), placings
    # Mining's gate places every twin, so that its gold scoring meets each one.
    from taskforge.scoring.verdict import every_twin_placed

    with every_twin_placed():
        for _ in range(20):
            first, second = plan_runs(task, {FILE: SOURCE.encode()}, selected)
            assert first.canaries.isdisjoint(second.canaries)
            assert first.canaries | second.canaries == {i for t in twins for i in t.tests}


def test_a_raises_check_gets_an_exception_no_correct_solution_may_raise() -> None:
    """A raises twin expects another exception. Another correct solution may raise a subclass of
    the one the test expects (``json.JSONDecodeError`` for ``ValueError``, a project's
    ``UnexpectedToken`` for its ``ParseError``); if the twin expects that subclass, it passes. So
    the twin expects a builtin exception (none is a subclass of a project's), not a subclass of
    the original where that is a builtin too, and a test that expects any ``Exception`` gets
    none. The file's own builtin exceptions come first: they read like the file."""
    text = textwrap.dedent('''\
        import pytest
        from pkg import parse, ParseError


        def test_bad():
            with pytest.raises(KeyError):
                parse("?")


        def test_worse():
            with pytest.raises(ParseError, match="x"):
                parse("!")


        def test_lookup():
            with pytest.raises(LookupError):
                parse("[")


        def test_anything():
            with pytest.raises(Exception):
                parse("]")
    ''')
    tests = ["test_bad", "test_worse", "test_lookup", "test_anything"]
    for seed in "abcdef":
        twins = make_twins({FILE: text}, [f"{FILE}::{name}" for name in tests], seed=seed)
        raises = {t.test.split("::")[-1]: t.source for t in twins if t.kind == "raises"}
        assert "ParseError" not in raises["test_bad"]  # maybe a KeyError subclass: who knows
        assert any(f'pytest.raises({own}, match="x")' in raises["test_worse"] for own in ("KeyError", "LookupError"))
        assert "KeyError" not in raises["test_lookup"] and "IndexError" not in raises["test_lookup"]
        assert "test_anything" not in raises


@pytest.mark.parametrize("seed", ["a", "b", "c", "d"])
def test_an_altered_value_is_as_explained_by_the_tests_data_as_the_original(seed: str) -> None:
    """A reader that calls an expected value found among the test's inputs real, and one found
    nowhere a twin, cannot tell the twins here: the answer 2 of ``1 + 1`` (computed) is altered to
    another number the test does not hold, the answer 5 of ``pick(3, 5)`` (an input) to another
    input."""
    text = textwrap.dedent('''\
        from pkg import add, pick


        def test_add():
            d = {}
            d["y"] = 1
            d["y"] = add(d["y"], 1)
            assert d["y"] == 2


        def test_pick():
            assert pick(3, 5) == 5
    ''')
    twins = make_twins({FILE: text}, [f"{FILE}::test_add", f"{FILE}::test_pick"], seed=seed)
    value = {t.test.split("::")[-1]: t.source for t in twins if t.kind == "value"}
    computed = ast.literal_eval(value["test_add"].splitlines()[-1].split("==")[1].strip())
    assert computed not in (1, 2)
    assert value["test_pick"].splitlines()[-1].strip() == "assert pick(3, 5) == 3"


def test_a_form_feed_in_a_string_does_not_shift_the_lines_a_twin_is_cut_from() -> None:
    """``str.splitlines`` splits at a form feed, the ast does not: every function below one was
    cut a line off, and calibration died on a twin that was not Python (autopep8's test file)."""
    text = 'S = """a\x0cb"""\n\n\nclass TestT:\n    def test_one(self):\n        x = 1\n' \
           '        self.assertEqual(f(x), 2)\n\n    def test_two(self):\n        with pytest.raises(KeyError):\n' \
           '            f("k")\n'
    ids = [f"{FILE}::TestT::test_one", f"{FILE}::TestT::test_two"]
    twins = make_twins({FILE: text}, ids, seed="s")
    assert {t.test for t in twins} == set(ids)
    for twin in twins:
        assert twin.source.lstrip().startswith("def test_"), twin.source
        ast.parse(place_twin(text, twin))
        ast.parse(place_twin(text, twin, name=f"{twin.name}_canary_0"))


def test_a_twin_that_would_not_be_python_is_refused_where_it_is_placed() -> None:
    twin = next(t for t in _twins() if t.test.endswith("::test_parse"))
    broken = Twin.from_json({**twin.to_json(), "source": "def test_parse():\n    assert (\n"})
    with pytest.raises(ValueError, match="does not place as Python"):
        place_twin(SOURCE, broken)


def test_an_altered_string_sits_beside_the_original_in_the_tests_data() -> None:
    """A reader that looks for an expected value on the line of its key in the test's input (an
    ini text, a bytes payload) finds a twin's value there too: it is another word of that line,
    or the original cut at a word."""
    text = textwrap.dedent('''\
        from pkg import load


        def test_load():
            config = load("[s]\\nname1 = first\\nname2 = second value ; note\\n")
            assert config["s"]["name1"] == "first"
            assert config["s"]["name2"] == "second value"


        def test_load_bytes():
            config = load(b"[s]\\nkey = value\\n")
            assert config["s"]["key"] == "value"
    ''')
    ids = [f"{FILE}::test_load", f"{FILE}::test_load_bytes"]
    for seed in ("a", "b", "c"):
        for twin in make_twins({FILE: text}, ids, seed=seed):
            if twin.kind != "value":
                continue
            [line] = [line for line in twin.source.splitlines() if line not in text.splitlines()]
            altered = ast.literal_eval(line.split("==")[1].strip())
            assert altered in {"name1", "name2", "s", "second", "note", "key", "first"}, line


def test_a_twin_in_a_crlf_file_keeps_its_line_endings() -> None:
    """A CRLF test file that turned LF where a twin sits would tell the run that holds one."""
    crlf = SOURCE.replace("\n", "\r\n")
    ids = [f"{FILE}::test_parse", f"{FILE}::test_raises_only"]
    for twin in make_twins({FILE: crlf}, ids, seed="task-1"):
        for placed in (place_twin(crlf, twin), place_twin(crlf, twin, name=f"{twin.name}_canary_0")):
            assert placed.count("\n") == placed.count("\r\n"), twin.kind
            assert placed != crlf


def test_a_method_inherited_from_another_module_gets_no_twin() -> None:
    """``class TestAstroid(test_mark_tokens.TestMarkTokens)``: the base's methods run under the
    subclass's ids too. A twin placed in the base's file would fail those unseen (asttokens'
    held-out gate scored gold 0 on 13 tasks)."""
    base = "class TestMarkTokens:\n    def test_tuples(self):\n        assert f((1, 2)) == 'x'\n\n" \
           "    def test_own(self):\n        assert f(1) == 'y'\n"
    sub = "from tests.test_mark_tokens import TestMarkTokens\n\n\nclass TestAstroid(TestMarkTokens):\n    pass\n"
    files = {"tests/test_mark_tokens.py": base, "tests/test_astroid.py": sub}
    ids = ["tests/test_mark_tokens.py::TestMarkTokens::test_tuples", "tests/test_mark_tokens.py::TestMarkTokens::test_own"]
    others = ["tests/test_astroid.py::TestAstroid::test_tuples"]
    assert {t.name for t in make_twins(files, ids, others=others, seed="s")} == {"test_own"}
    assert {t.name for t in make_twins(files, ids, seed="s")} == {"test_tuples", "test_own"}


def test_a_class_imported_into_the_collected_module_gets_its_twin_where_it_is_defined() -> None:
    """``python_files = "__main__.py"``: pytest collects ``tests/__main__.py``, which imports
    ``TestCache`` from ``tests/test_cache.py``; the hidden test is defined, and its twin placed,
    there. A test of the class that stays PASS_TO_PASS gets none, and neither does a name two
    hidden files define."""
    cache = "class TestCache:\n    def test_b(self):\n        assert f(2) == 'x'\n\n" \
            "    def test_c(self):\n        assert f(3) == 'y'\n"
    files = {"tests/test_cache.py": cache}
    ids = ["tests/__main__.py::TestCache::test_b", "tests/__main__.py::TestCache::test_c"]
    for main in ("from .test_cache import TestCache\n", "from tests.test_cache import *\n"):
        twins = make_twins(files, ids[:1], others=ids[1:], seed="s", read={"tests/__main__.py": main}.get)
        assert {(t.file, t.name, t.tests) for t in twins} == {("tests/test_cache.py", "test_b", (ids[0],))}
    text = place_twin(cache, twins[0])
    assert text != cache and "def test_c" in text
    read = {"tests/__main__.py": "from .test_cache import TestCache\n"}.get
    assert make_twins({**files, "tests/test_copy.py": cache}, ids[:1], seed="s", read=read) == []
    # Imported from elsewhere, under another name, or not imported at all: none.
    for main in ("from .test_copy import TestCache\n", "from .test_cache import Other as TestCache\n", ""):
        assert make_twins(files, ids[:1], seed="s", read={"tests/__main__.py": main}.get) == []
    assert make_twins(files, ids[:1], seed="s") == []


def test_a_class_inherited_in_a_file_no_twin_reads_blocks_a_twin_of_its_name() -> None:
    """An independent review's case: ``tests/test_a.py`` (not hidden) has ``class
    TestParse(TestBase)``, which runs the hidden ``TestBase.test_x``; another hidden file has a
    ``TestParse`` of its own. No twin of ``test_x``: one in base.py would run under test_a's id."""
    base = "class TestBase:\n    def test_x(self):\n        assert f(1) == 'a'\n"
    other = "class TestParse:\n    def test_x(self):\n        assert f(2) == 'b'\n"
    files = {"tests/base.py": base, "tests/test_b.py": other}
    ids = ["tests/base.py::TestBase::test_x", "tests/test_a.py::TestParse::test_x", "tests/test_b.py::TestParse::test_x"]
    read = {"tests/test_a.py": "from tests.base import TestBase\n\n\nclass TestParse(TestBase):\n    pass\n"}.get
    assert make_twins(files, ids, seed="s", read=read) == []


def test_a_plain_twin_moves_no_line_of_its_file() -> None:
    """A plain twin fails after the test's last statement. On a line of its own, every later
    test of the file would move down a line, and one that checks a line number of its file (a
    traceback, an ``inspect`` call) would fail beside the twin where gold passes it alone. So the
    failure goes on the last statement's line where that is a simple statement; after a block,
    or where a comment ends the line, on a line of its own."""
    twins = _twins()
    plain = [t for t in twins if t.kind == "plain"]
    placed = place_twins(SOURCE, plain)

    def lines_of_defs(text: str) -> dict[str, int]:
        return {node.name: node.lineno for node in ast.walk(ast.parse(text))
                if isinstance(node, ast.FunctionDef | ast.ClassDef)}

    assert lines_of_defs(placed) == lines_of_defs(SOURCE)
    for twin in plain:
        function = next(node for node in ast.walk(ast.parse(textwrap.dedent(twin.source)))
                        if isinstance(node, ast.FunctionDef))
        assert isinstance(function.body[-1], ast.Raise), twin.source  # the failure runs last
    source = textwrap.dedent('''\
        def test_commented():
            assert f() == 1  # why

        def test_block():
            with ctx():
                assert f() == 1
    ''')
    by_name = {t.name: t for t in make_twins({FILE: source}, [f"{FILE}::test_commented", f"{FILE}::test_block"],
                                             seed="s") if t.kind == "plain"}
    assert by_name["test_commented"].source.splitlines()[-1].strip().startswith("raise AssertionError(")
    assert by_name["test_block"].source.splitlines()[-1].startswith("    raise AssertionError(")


def test_placing_twins_together_is_placing_them_one_by_one() -> None:
    """A scoring places one twin per test, all of a file's at once (one parse, not two per twin):
    the file is the one placing them in turn would give, whatever the order and the line counts,
    and with CRLF line ends kept."""
    rng = random.Random(7)
    twins = _twins()
    for text in (SOURCE, SOURCE.replace("\n", "\r\n")):
        for _ in range(20):
            group = rng.sample(twins, rng.randrange(1, len(twins) + 1))
            one_by_one = text
            for twin in group:
                one_by_one = place_twin(one_by_one, twin)
            assert place_twins(text, group) == one_by_one
    with pytest.raises(ValueError, match="is not one plain function"):
        place_twins("def test_other():\n    pass\n", twins[:1])
    broken = Twin.from_json({**twins[0].to_json(), "source": f"def {twins[0].name}():\n    assert (\n"})
    with pytest.raises(ValueError, match="does not place as Python"):
        place_twins(SOURCE, [twins[-1], broken])


def test_a_crlf_file_without_a_final_newline_keeps_its_line_ends_where_twins_sit() -> None:
    """A CRLF file whose last line has no newline: its lines still end CRLF, so the twins' do too,
    and a twin in the last place leaves no CR at the very end (either would tell the run)."""
    text = SOURCE.replace("\n", "\r\n").rstrip("\r\n")
    twins = _twins()
    last = max(twins, key=lambda t: text.find(f"def {t.name}("))
    for group in ([last], twins[:3], [*twins[:2], last]):
        placed = place_twins(text, group)
        one_by_one = text
        for twin in group:
            one_by_one = place_twin(one_by_one, twin)
        assert placed == one_by_one
        body = placed.split("\n")
        assert all(line.endswith("\r") for line in body[:-1] if line), "an LF-only line where a twin sits"
        assert not placed.endswith(("\r", "\n"))


FACTORY = '''\
import unittest

__all__ = []


def _make(fill):
    class _TestPad(unittest.TestCase):
        def test_pad(self):
            self.assertEqual(pad("ab", 4, fill), fill * 2 + "ab")

        def test_keep(self):
            self.assertEqual(pad("abcd", 2, fill), "abcd")

    name = "TestPad" + {" ": "Space", ".": "Dot"}[fill]
    globals()[name] = _TestPad
    __all__.append(name)


for _fill in (" ", "."):
    _make(_fill)
'''


def test_a_test_a_factory_makes_gets_its_twin_in_the_factory() -> None:
    """A factory function makes one test class per fill character: ``TestPadSpace::test_pad``
    and ``TestPadDot::test_pad`` both run the nested ``def test_pad``, which hiding took out of
    the start state. Its twin replaces that def and stands in for both ids, collected in the file
    itself or in an aggregating module that imports the classes. With one of the ids
    PASS_TO_PASS, or the def still in the start state (not the hidden one), there is none."""
    file = "tests/test_pad.py"
    start = FACTORY.replace('''        def test_pad(self):
            self.assertEqual(pad("ab", 4, fill), fill * 2 + "ab")

''', "")
    for where, main in ((file, None), ("tests/__main__.py", "from .test_pad import *\n")):
        ids = [f"{where}::TestPad{kind}::test_pad" for kind in ("Dot", "Space")]
        read = {file: start, "tests/__main__.py": main}.get
        twins = make_twins({file: FACTORY}, ids, seed="s", read=read)
        assert twins and {(t.file, t.classes, t.name, t.tests) for t in twins} == {(file, ("_make", "_TestPad"), "test_pad", tuple(ids))}
        placed = place_twin(FACTORY, twins[0])
        assert placed != FACTORY and placed.count("def test_pad(") == 1 and "def test_keep" in placed
        assert make_twins({file: FACTORY}, ids[:1], others=ids[1:], seed="s", read=read) == []
        assert make_twins({file: FACTORY}, ids, seed="s", read={file: FACTORY, "tests/__main__.py": main}.get) == []
    ids = [f"tests/__main__.py::TestPad{kind}::test_pad" for kind in ("Dot", "Space")]
    assert make_twins({file: FACTORY}, ids, seed="s", read={file: start, "tests/__main__.py": ""}.get) == []


CALLER = textwrap.dedent('''\
    import random
    from pkg import parse


    def test_text():
        assert parse(random.choice("ab")) in ("a", "b")


    def test_text_many_times():
        for _ in range(100):
            test_text()


    def test_other():
        assert parse("c") == "c"
''')
CALLER_IDS = [f"{FILE}::test_text", f"{FILE}::test_text_many_times", f"{FILE}::test_other"]


def test_a_test_other_code_calls_gets_no_twin() -> None:
    """A held-out text library's ``test_text_multiple_times`` calls ``test_text`` 100 times: a
    twin of ``test_text`` in its place failed that caller too, a real test, and the gold patch
    scored 0 in 2 of 10 tasks (the gate, placing each twin in one of two runs, passed them by
    chance). Mining makes none, and scoring places none a task mined before holds."""
    import json
    from dataclasses import replace

    from taskforge.datasets.testing import task_rows
    from taskforge.scoring.verdict import every_twin_placed, plan_runs
    from taskforge.task import Task

    twins = make_twins({FILE: CALLER}, CALLER_IDS, seed="t")
    assert {t.name for t in twins} == {"test_text_many_times", "test_other"}
    # What mining made before: a twin of test_text too.
    old = Twin(test=f"{FILE}::test_text", tests=(f"{FILE}::test_text",), file=FILE, classes=(), name="test_text",
               kind="plain", source="def test_text():\n    assert False\n")
    task = replace(Task.from_row(task_rows(1)[0]), FAIL_TO_PASS=tuple(CALLER_IDS), PASS_TO_PASS=(),
                   validation=json.dumps({"canaries": [t.to_json() for t in [*twins, old]]}))
    with every_twin_placed():
        for _ in range(20):
            parts = plan_runs(task, {FILE: CALLER.encode()}, list(CALLER_IDS))
            assert all(f"{FILE}::test_text" not in part.canaries for part in parts)
            assert {i for part in parts for i in part.canaries} == {f"{FILE}::test_text_many_times",
                                                                    f"{FILE}::test_other"}
