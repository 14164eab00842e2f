"""Static twin detectors: ``is_twin(file_text, function_name, classes) -> bool``.

Each looks only at the text of the file a run shows: does this test function read as a twin?
Written by a red team that had not read the project's own red-team detector, against the twin
kinds of ``taskforge.repo.canaries`` (value, input, raises, negated, plain).

- ``structural``: the form of plain and negated twins: a function that ends in
  ``raise AssertionError(<constant>)``, or whose last check is negative where the function's
  other checks (or the file's) are positive, or ``assert not (<compare|boolop>)``.
- ``literal``: oddities value/input substitution leaves in literals: one duplicate in a list of
  distinct strings, ``{'a': {'a': ...}}``, a one-line ``repr()`` copy of a string the file writes
  in another form elsewhere, ``ord()`` of a string that is not one character.
- ``sibling``: consistency with the rest of the file: a raises check whose exception the file
  never pairs with that callee while it pairs another, a builtin exception the file expects
  nowhere else, an expression checked in two or more other tests always against one literal and
  here against another.
- ``origin``: an expected string copied verbatim from an input of the same call (weak; not in
  the committee).
- ``committee``: structural or literal or sibling.
"""

from __future__ import annotations

import ast
import io
import tokenize
from collections import Counter
from collections.abc import Callable
from functools import lru_cache
from typing import Any

__all__ = ["DETECTORS", "committee", "literal", "origin", "sibling", "structural"]

Detector = Callable[[str, str, tuple[str, ...]], bool]
Function = ast.FunctionDef | ast.AsyncFunctionDef

_NEGATIVE_CHECKS = {"assertFalse", "assertNotEqual", "assertNotIn", "assertIsNot", "assertIsNotNone",
                    "assertNotIsInstance", "assertIsNone"}
_POSITIVE_CHECKS = {"assertTrue", "assertEqual", "assertEquals", "assertIn", "assertIs", "assertIsInstance"}
_RAISES_CHECKS = {"raises", "assertRaises", "assertRaisesRegex", "assertRaisesRegexp"}
_EQUALITY_CHECKS = {"assertEqual", "assertEquals", "assertIs", "assertIn", "assertListEqual", "assertDictEqual",
                    "assertTupleEqual", "assertSequenceEqual", "assertCountEqual", "assertSetEqual"}
_BUILTIN_ERRORS = {"ValueError", "TypeError", "KeyError", "IndexError", "AttributeError", "RuntimeError"}
_NO = object()
"""What :func:`_literal` answers for a node that is not a literal."""


@lru_cache(maxsize=64)  # the detectors of one run judge the same text in turn: parse it once
def _parse(text: str) -> ast.Module:
    return ast.parse(text)


def _find(tree: ast.Module, classes: tuple[str, ...], name: str) -> Function | None:
    body = tree.body
    for c in classes:
        found = [n for n in body if isinstance(n, ast.ClassDef) and n.name == c]
        if not found:
            return None
        body = found[0].body
    functions = [n for n in body if isinstance(n, Function) and n.name == name]
    if functions:
        return functions[0]
    if classes:  # inherited from a module-level base class
        cls = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == classes[-1]]
        for base in (cls[0].bases if cls else []):
            if isinstance(base, ast.Name):
                got = _find(tree, (base.id,), name)
                if got is not None:
                    return got
    return None


def _test_functions(tree: ast.AST) -> list[Function]:
    return [n for n in ast.walk(tree) if isinstance(n, Function) and n.name.startswith("test")]


def _literal(node: ast.AST) -> Any:
    try:
        return ast.literal_eval(node)
    except Exception:  # noqa: BLE001 - literal_eval raises several kinds for "not a literal"
        return _NO


def _checks(function: Function) -> list[tuple[ast.expr, ast.expr, ast.AST]]:
    """``(left, expected, statement)`` of the equality-like checks in ``function``."""
    out: list[tuple[ast.expr, ast.expr, ast.AST]] = []
    for n in ast.walk(function):
        if isinstance(n, ast.Assert) and isinstance(n.test, ast.Compare) and len(n.test.ops) == 1:
            out.append((n.test.left, n.test.comparators[0], n))
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in _EQUALITY_CHECKS \
                and len(n.args) >= 2:
            out.append((n.args[0], n.args[1], n))
    return out


def _negative(statement: ast.AST) -> bool | None:
    """Whether a check is negative (``!=``, ``not in``, ``assert not``, ``assertFalse``...); None
    for a statement that is no check of known polarity."""
    if isinstance(statement, ast.Assert):
        test = statement.test
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            return True
        if isinstance(test, ast.Compare) and len(test.ops) == 1:
            return isinstance(test.ops[0], ast.NotEq | ast.NotIn | ast.IsNot)
        return False
    if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call) \
            and isinstance(statement.value.func, ast.Attribute):
        if statement.value.func.attr in _NEGATIVE_CHECKS:
            return True
        if statement.value.func.attr in _POSITIVE_CHECKS:
            return False
    return None


# -- structural: the form of plain and negated twins -------------------------------------------


def _last_check(function: Function) -> ast.stmt | None:
    for statement in reversed(function.body):
        if _negative(statement) is not None:
            return statement
        if isinstance(statement, ast.Return | ast.With | ast.Try | ast.If | ast.For | ast.While):
            return None
    return None


@lru_cache(maxsize=64)
def _file_negative_rate(tree: ast.Module) -> float:
    positive = negative = 0
    for function in _test_functions(tree):
        for statement in ast.walk(function):
            polarity = _negative(statement) if isinstance(statement, ast.Assert | ast.Expr) else None
            if polarity is True:
                negative += 1
            elif polarity is False:
                positive += 1
    return negative / max(1, positive + negative)


def structural(text: str, name: str, classes: tuple[str, ...]) -> bool:
    tree = _parse(text)
    function = _find(tree, classes, name)
    if function is None:
        return False
    last = function.body[-1]
    # plain twin: the test ends in raise AssertionError(<constant>)
    if isinstance(last, ast.Raise) and isinstance(last.exc, ast.Call) \
            and getattr(last.exc.func, "id", "") == "AssertionError" \
            and all(isinstance(a, ast.Constant) for a in last.exc.args):
        return True
    check = _last_check(function)
    if check is None or not _negative(check):
        return False
    # `assert not (a == b)` / `assert not (x and y)` is a machine's form
    if isinstance(check, ast.Assert) and isinstance(check.test, ast.UnaryOp) \
            and isinstance(check.test.operand, ast.Compare | ast.BoolOp):
        return True
    # the last check is negative while the function's other checks are all positive
    others = [_negative(s) for s in ast.walk(function) if s is not check and isinstance(s, ast.Assert | ast.Expr)]
    others = [o for o in others if o is not None]
    if others and not any(others):
        return True
    # a lone negative check in a file that rarely negates
    return not others and _file_negative_rate(tree) < 0.12


# -- literal: spelling and shape of substituted values (value and input twins) -----------------


@lru_cache(maxsize=64)
def _spellings(text: str) -> dict[tuple[type, Any], Counter[str]]:
    """``(type, value)`` of every string/bytes token of the file → how often each spelling occurs."""
    out: dict[tuple[type, Any], Counter[str]] = {}
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type == tokenize.STRING:
                try:
                    value = ast.literal_eval(token.string)
                except Exception:  # noqa: BLE001 - an f-string part, for one
                    continue
                out.setdefault((type(value), value), Counter())[token.string] += 1
    except (tokenize.TokenError, IndentationError, SyntaxError):
        pass  # the spellings read up to the error are what there is
    return out


def _one_line_segment(lines: list[str], node: ast.expr) -> str | None:
    if node.lineno != node.end_lineno:
        return None
    return lines[node.lineno - 1].encode()[node.col_offset:node.end_col_offset].decode(errors="replace")


def _one_duplicate(node: ast.AST) -> bool:
    """A list/tuple/set of three or more strings, all distinct but one pair."""
    if isinstance(node, ast.List | ast.Tuple | ast.Set) and len(node.elts) >= 3:
        values = [_literal(e) for e in node.elts]
        if all(v is not _NO for v in values) and all(isinstance(v, str | bytes) for v in values):
            spelled = [repr(v) for v in values]
            return len(Counter(spelled)) == len(spelled) - 1
    return False


def literal(text: str, name: str, classes: tuple[str, ...]) -> bool:
    tree = _parse(text)
    function = _find(tree, classes, name)
    if function is None:
        return False
    lines = text.splitlines()
    spellings = _spellings(text)
    for n in ast.walk(function):
        if n in function.decorator_list:
            continue
        if _one_duplicate(n):
            return True
        if isinstance(n, ast.Dict):
            keys = [_literal(k) for k in n.keys if k is not None]
            for v in n.values:
                if isinstance(v, ast.Dict) and v.keys and keys:
                    inner = [_literal(k) for k in v.keys if k is not None]
                    if len(keys) == 1 and inner == keys and isinstance(keys[0], str) and len(keys[0]) == 1:
                        return True  # {'a': {'a': ...}} made from {'a': {'b': ...}}
        if isinstance(n, ast.Constant) and isinstance(n.value, str | bytes):
            segment = _one_line_segment(lines, n)
            if segment is None:
                continue
            # a value copied from a triple-quoted / raw / prefixed / multi-line literal by repr():
            # spelled once like this, and otherwise elsewhere in the file
            forms = spellings.get((type(n.value), n.value), Counter())
            other_forms = {f for f in forms if f != segment}
            if other_forms and forms[segment] == 1 and any(
                    f.startswith(("'''", '"""', "r", "R", "u", "b'''", 'b"""')) or "\n" in f for f in other_forms):
                return True
            if ("\\x" in segment or "\\n" in segment) and len(n.value) > 8 and forms[segment] == 1 and other_forms:
                return True
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in ("ord", "chr") and n.args:
            value = _literal(n.args[0])
            if (n.func.id == "ord" and isinstance(value, str | bytes) and len(value) != 1) or \
                    (n.func.id == "chr" and isinstance(value, str)):
                return True
    return False


# -- sibling: the same check elsewhere in the file (value and raises twins) --------------------


def _key(node: ast.AST) -> str:
    return ast.dump(node, annotate_fields=False, include_attributes=False)


def _callee(node: ast.AST) -> str:
    if isinstance(node, ast.Call):
        node = node.func
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return "?"


def _raises(function: Function) -> list[tuple[str, str]]:
    """``(exception, callee)`` of every raises check of ``function``: the callee is the callable
    passed to ``assertRaises``, or the first call in the ``with raises(...)`` block."""
    out = []
    for n in ast.walk(function):
        if isinstance(n, ast.Call) and _callee(n.func) in _RAISES_CHECKS and n.args \
                and isinstance(n.args[0], ast.Name | ast.Attribute):
            exception = ast.unparse(n.args[0])
            if len(n.args) >= 2:
                callee = _callee(n.args[1])
            else:
                callee = "?"
                for w in ast.walk(function):
                    if isinstance(w, ast.With | ast.AsyncWith) and any(item.context_expr is n for item in w.items):
                        calls = [c for s in w.body for c in ast.walk(s) if isinstance(c, ast.Call)]
                        if calls:
                            callee = _callee(calls[0].func)
                        else:
                            accesses = [c for s in w.body for c in ast.walk(s)
                                        if isinstance(c, ast.Subscript | ast.Attribute)]
                            callee = type(accesses[0]).__name__ if accesses else "?"
            out.append((exception, callee))
    return out


@lru_cache(maxsize=64)
def _file_index(text: str) -> tuple[dict[str, list[tuple[str, int, str]]], dict[str, Counter[str]], Counter[str]]:
    """Over the file's test functions: checked expression → ``(function, line, repr(expected))``;
    callee → exceptions expected of it; exception → how often it is expected."""
    tree = _parse(text)
    expected_by_left: dict[str, list[tuple[str, int, str]]] = {}
    raises_by_callee: dict[str, Counter[str]] = {}
    exception_count: Counter[str] = Counter()
    for function in _test_functions(tree):
        for left, expected, _ in _checks(function):
            value = _literal(expected)
            if value is not _NO:
                expected_by_left.setdefault(_key(left), []).append((function.name, function.lineno, repr(value)))
        for exception, callee in _raises(function):
            raises_by_callee.setdefault(callee, Counter())[exception] += 1
            exception_count[exception] += 1
    return expected_by_left, raises_by_callee, exception_count


def sibling(text: str, name: str, classes: tuple[str, ...]) -> bool:
    tree = _parse(text)
    function = _find(tree, classes, name)
    if function is None:
        return False
    expected_by_left, raises_by_callee, exception_count = _file_index(text)
    for exception, callee in _raises(function):
        others = raises_by_callee.get(callee, Counter()).copy()
        others[exception] -= 1
        others = +others
        if callee != "?" and others and exception not in others:
            return True  # every other raises check on this callee expects something else
        if exception_count[exception] == 1 and sum(exception_count.values()) >= 3 and exception in _BUILTIN_ERRORS:
            return True  # a builtin exception this file expects nowhere else
    for left, expected, _ in _checks(function):
        value = _literal(expected)
        if value is _NO:
            continue
        same = [r for (f, _line, r) in expected_by_left.get(_key(left), []) if f != function.name]
        # the same expression checked in two or more other tests, always against one value, not this one
        if len(same) >= 2 and len(set(same)) == 1 and same[0] != repr(value):
            return True
    return False


# -- origin: an expected string copied from the call's own input -------------------------------


def origin(text: str, name: str, classes: tuple[str, ...]) -> bool:
    """An ``assert f(..., 'x', ...) == 'x'`` where ``f(...)`` is a call or an operation (not a
    name, attribute or subscript) and the expected string is one of its inputs, verbatim."""
    tree = _parse(text)
    function = _find(tree, classes, name)
    if function is None:
        return False
    for left, expected, statement in _checks(function):
        value = _literal(expected)
        if isinstance(value, str) and len(value) >= 2:
            inputs = [c.value for c in ast.walk(left) if isinstance(c, ast.Constant) and isinstance(c.value, str)]
            if value in inputs and isinstance(statement, ast.Assert) and isinstance(statement.test, ast.Compare) \
                    and isinstance(statement.test.ops[0], ast.Eq) \
                    and not isinstance(left, ast.Subscript | ast.Name | ast.Attribute):
                return True
    return False


def committee(text: str, name: str, classes: tuple[str, ...]) -> bool:
    return any(d(text, name, classes) for d in (structural, literal, sibling))


DETECTORS: dict[str, Detector] = {"structural": structural, "literal": literal, "sibling": sibling,
                                  "origin": origin, "committee": committee}
"""Every detector by the name the tables print."""
