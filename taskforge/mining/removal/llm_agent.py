"""The LLM removal agent (``"llm"`` in :data:`taskforge.mining.removal.cst.REMOVAL_AGENTS`): a model removes
the feature through tools, over an OpenAI-compatible endpoint (:mod:`taskforge.llm.client`).

The model is told the target, its strategy (the same four as the libcst agent: ``body``,
``symbol``, ``module``, ``feature``) and where it is defined (for a feature: every member, with
its file and lines), and works in a tool loop:

``view``         a file with line numbers (a line range), or the files under a folder
``grep``         a regular expression over the tree (or under a path)
``edit``         replace one exact, unique occurrence of a string in a file (never a test file)
``delete_file``  delete a file (the module and feature strategies only)
``run_tests``    run pytest on the edited tree (only when a :class:`~taskforge.repo.suite.SuiteRunner`
                 of the same repository is handed in; mining hands in its warm one)
``finish``       done; ``give_up``: the feature cannot go without breaking the rest

The tree the model sees and edits is the repository with its edits on top, in memory: the agent
writes nothing and returns a :class:`~taskforge.mining.removal.cst.Removal`, so the edit goes through exactly
the validation, scrub and audit the libcst agent's does. ``finish`` is refused (the model is told
why and goes on) until the edit is what the strategy asks: for ``body`` the last definition keeps
its decorators, signature and docstring and its body is ``raise NotImplementedError``; for
``symbol`` no definition of the name is left in its scope; for ``module`` the file is gone; for
``feature`` no member is defined any more (a variable: assigned at module level); and
every changed Python file parses. ``Removal.removed`` and ``removed_code`` are read off the edit:
the target, then the other definitions that disappeared (a function nested in a hollowed body
counts as the body), with the code taken out of each.

Failures end the removal with a ``TaskforgeError`` whose reason mining records for the candidate:
``llm_budget_exhausted`` (``max_turns`` replies without a finish, or the token or cost budget),
``llm_malformed_output`` (three replies in a row without a tool call, or with a call that is not
valid: unknown tool, arguments that are not JSON or miss a field), ``removal_not_applicable``
(``give_up``, or a target the index cannot place), and the client's own ``llm_timeout``,
``llm_server_error``, ``llm_request_rejected``.

The trajectory (messages, tool calls, usage, outcome) rides on ``Removal.trajectory`` and mining
stores it in the task's ``validation`` column as ``agent_trajectory``. With
``LLMConfig.trajectories_dir`` every conversation, failed ones too, is also written there.
"""

from __future__ import annotations

import ast
import difflib
import json
import os
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from taskforge.errors import LLMError, TaskforgeError
from taskforge.llm.client import ChatClient, LLMConfig, ToolCall, write_trajectory
from taskforge.mining.removal.cst import NOT_APPLICABLE, STRATEGIES, Removal, Strategy
from taskforge.mining.removal.feature import module_variables
from taskforge.repo.symbols import SymbolIndex
from taskforge.repo.testfiles import is_test_path

if TYPE_CHECKING:
    from taskforge.repo.suite import SuiteRunner

__all__ = ["LLMRemovalAgent"]

MALFORMED_LIMIT = 3
"""Replies in a row without a valid tool call that end the removal (``llm_malformed_output``)."""
_VIEW_LINES = 400
_GREP_MATCHES = 100
_LIST_FILES = 300
_TOOL_OUTPUT_CHARS = 20_000
_SKIP_DIRS = frozenset({".git", ".hg", ".svn", "__pycache__", ".tox", ".nox", ".venv", "venv", "node_modules",
                        "build", "dist", ".mypy_cache", ".pytest_cache", ".ruff_cache", ".eggs", "htmlcov"})

SYSTEM_PROMPT = """\
You prepare coding exercises from real Python repositories. You remove one feature from a \
repository so that a developer can later implement it again; the feature's tests will check \
their work.

Rules:
- Remove exactly the feature named, in the way its strategy describes.
- Keep the rest of the package working: it must still import, and code that does not need the \
feature must behave as before.
- Never edit or delete test files; tests are handled separately.
- Change nothing else: no reformatting, no new comments, no hints of the removed code.
- Work only through the tools. Look before you edit: edits replace exact text.
- When the removal is complete, call finish. If the feature cannot be removed without breaking \
code that does not depend on it, call give_up with the reason."""

_STRATEGY_RULES: dict[str, str] = {
    "body": (
        "Replace the body of this function or method with `raise NotImplementedError`. Keep its "
        "decorators, its signature and its docstring exactly as they are. Leave its helpers where "
        "they are. Where the name is defined more than once, hollow the last definition."
    ),
    "symbol": (
        "Delete this function, method or class: every definition of the name in its scope, together "
        "with private helpers that only it uses. Remove the name from `__all__` lists and drop imports "
        "that only re-export it. A block left empty gets `pass`."
    ),
    "module": (
        "Delete this module's file. Remove the imports of it, and of names from it, elsewhere in the "
        "package, and drop those names from `__all__` lists."
    ),
    "feature": (
        "Delete every member listed above: each function, method or class (every definition of its "
        "name in its scope) and each module-level variable, wherever they are. Remove their names from "
        "`__all__` lists, drop imports that only re-export them, and take out the entries of module-level "
        "dispatch tables (dict, list, tuple or set literals) that name them. Delete a module file that is "
        "left with nothing but imports. A block left empty gets `pass`. Delete nothing that is not listed."
    ),
}


def _tool(name: str, description: str, properties: Mapping[str, Any], required: Sequence[str] = ()) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "description": description, "parameters": {
        "type": "object", "properties": dict(properties), "required": list(required), "additionalProperties": False}}}


_PATH = {"type": "string", "description": "Repository-relative path."}
TOOLS: dict[str, dict[str, Any]] = {
    "view": _tool("view", f"Show a file with line numbers (at most {_VIEW_LINES} lines per call), or list the files "
                  "under a folder ('.' for the repository).",
                  {"path": _PATH, "start_line": {"type": "integer"}, "end_line": {"type": "integer"}}, ["path"]),
    "grep": _tool("grep", f"Search the tree for a Python regular expression; prints path:line:text, at most "
                  f"{_GREP_MATCHES} matches.",
                  {"pattern": {"type": "string"}, "path": {**_PATH, "description": "A file or folder (default '.')."}},
                  ["pattern"]),
    "edit": _tool("edit", "Replace old_str, which must occur exactly once in the file, with new_str.",
                  {"path": _PATH, "old_str": {"type": "string"}, "new_str": {"type": "string"}},
                  ["path", "old_str", "new_str"]),
    "delete_file": _tool("delete_file", "Delete a file.", {"path": _PATH}, ["path"]),
    "run_tests": _tool("run_tests", "Run pytest on the edited tree: the test files or node ids given, or the whole "
                       "suite. Prints the outcome counts and the tests that did not pass.",
                       {"tests": {"type": "array", "items": {"type": "string"}}}),
    "finish": _tool("finish", "The feature is removed; end the task.", {"summary": {"type": "string"}}, ["summary"]),
    "give_up": _tool("give_up", "The feature cannot be removed without breaking the rest of the package.",
                     {"reason": {"type": "string"}}, ["reason"]),
}
_ARG_TYPES: dict[str, dict[str, type]] = {
    "view": {"path": str, "start_line": int, "end_line": int},
    "grep": {"pattern": str, "path": str},
    "edit": {"path": str, "old_str": str, "new_str": str},
    "delete_file": {"path": str},
    "run_tests": {"tests": list},
    "finish": {"summary": str},
    "give_up": {"reason": str},
}


class _Malformed(Exception):
    """A tool call the model got wrong (not its tool's fault): counts towards MALFORMED_LIMIT."""


class _ToolError(Exception):
    """A tool refused or failed; the message goes back to the model."""


class LLMRemovalAgent:
    """Removes a feature with a model in a tool loop; pure like every agent (see the module docstring).

    ``runner``: a test runner of the repository given to :meth:`remove`, for the ``run_tests`` tool;
    without one the tool is not offered.
    """

    name = "llm"

    def __init__(self, *, llm: LLMConfig, runner: SuiteRunner | None = None) -> None:
        self.llm = llm
        self.runner = runner

    def remove(
        self, repo: Path, index: SymbolIndex, *, target: str, strategy: Strategy, members: Sequence[str] = ()
    ) -> Removal:
        if strategy not in STRATEGIES:
            raise ValueError(f"strategy must be one of {', '.join(STRATEGIES)}, got {strategy!r}")
        members = tuple(members) if strategy == "feature" else ()
        where = _where(index, target, strategy, members)
        tools = [name for name in TOOLS if (name != "run_tests" or self.runner is not None)
                 and (name != "delete_file" or strategy in ("module", "feature"))]
        session = _Session(workspace=_Workspace(Path(repo)), index=index, target=target, strategy=strategy,
                           runner=self.runner, tools=tools, members=members)
        client = ChatClient(self.llm)
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": f"Remove `{target}` (strategy: {strategy}).\n\n{where}\n\n"
                                        f"{_STRATEGY_RULES[strategy]}"},
        ]
        record: dict[str, Any] = {"agent": self.name, "model": self.llm.model, "target": target, "strategy": strategy,
                                  "outcome": "", "turns": 0, "usage": {}, "messages": messages}
        started = time.monotonic()
        try:  # the Removal holds this very record, which ``finally`` completes
            removal = self._converse(client, messages, session, record)
            record["outcome"] = "finished"
            return replace(removal, trajectory=record)
        except TaskforgeError as err:
            record["outcome"] = err.reason
            record["error"] = str(err)
            raise
        finally:
            record["usage"] = client.usage.to_json()
            record["seconds"] = round(time.monotonic() - started, 3)
            if self.llm.trajectories_dir:
                write_trajectory(Path(self.llm.trajectories_dir), "removal", target, record)

    def _converse(self, client: ChatClient, messages: list[dict[str, Any]], session: _Session,
                  record: dict[str, Any]) -> Removal:
        specs = [TOOLS[name] for name in session.tools]
        strikes = 0
        for turn in range(1, self.llm.max_turns + 1):
            record["turns"] = turn
            reply = client.chat(messages, tools=specs)
            messages.append(reply.message)
            if not reply.tool_calls:
                strikes = _strike(strikes, "a reply without a tool call")
                messages.append({"role": "user", "content": "Answer with tool calls. Call finish once the feature is "
                                                            "removed, or give_up."})
                continue
            malformed = ""
            for call in reply.tool_calls:
                try:
                    outcome = session.call(call)
                except _Malformed as err:
                    malformed, outcome = str(err), f"error: {err}"
                if isinstance(outcome, Removal):
                    return outcome
                messages.append({"role": "tool", "tool_call_id": call.id, "content": _clip(outcome)})
            strikes = _strike(strikes, malformed) if malformed else 0
        raise LLMError(f"{record['target']}: no finish within llm.max_turns = {self.llm.max_turns} replies",
                       reason="llm_budget_exhausted")


def _strike(strikes: int, what: str) -> int:
    strikes += 1
    if strikes >= MALFORMED_LIMIT:
        raise LLMError(f"{strikes} replies in a row without a valid tool call; the last: {what}",
                       reason="llm_malformed_output")
    return strikes


def _clip(text: str) -> str:
    if len(text) <= _TOOL_OUTPUT_CHARS:
        return text
    return text[:_TOOL_OUTPUT_CHARS] + f"\n... ({len(text) - _TOOL_OUTPUT_CHARS} more characters cut)"


def _where(index: SymbolIndex, target: str, strategy: Strategy, members: Sequence[str] = ()) -> str:
    """Where the target is, for the prompt; refuses what the index cannot place (as the libcst agent does)."""
    if strategy == "feature":
        return _where_feature(index, target, members)
    if strategy == "module":
        path = index.modules.get(target)
        if path is None:
            raise TaskforgeError(f"{target} is not a module of the index", reason=NOT_APPLICABLE)
        return f"The module is the file `{path}`."
    symbol = index.symbols.get(target)
    if symbol is None:
        raise TaskforgeError(f"{target} is not a symbol of the index", reason=NOT_APPLICABLE)
    if strategy == "body" and symbol.kind == "class":
        raise TaskforgeError(f"{target} is a class: the body strategy applies to functions and methods",
                             reason=NOT_APPLICABLE)
    if target in index.import_time:
        raise TaskforgeError(f"{target} runs while the package is imported", reason=NOT_APPLICABLE)
    spans = index.spans[target]
    where = f"It is the {symbol.kind} `{symbol.name}` in `{symbol.path}`, lines {spans[-1][0]}-{spans[-1][1]}."
    if len(spans) > 1:
        others = ", ".join(f"{a}-{b}" for a, b in spans[:-1])
        where += f" The name has {len(spans)} definitions there; the others are at lines {others}."
    if strategy == "symbol":
        helpers = [f"`{h.partition(':')[2]}` (lines {index.symbols[h].start_line}-{index.symbols[h].end_line})"
                   for h in index.exclusive_private_helpers(target)]
        if helpers:
            where += f" Private helpers that only it uses: {', '.join(helpers)}."
        group = {target, *index.descendants(target)}
        users = sorted({u for q in group for u in index.used_by.get(q, ()) if u not in group})
        if users:
            shown = ", ".join(f"`{u}`" for u in users[:10]) + (f" and {len(users) - 10} more" if len(users) > 10 else "")
            where += f" Other package code uses it: {shown}."
    return where


def _where_feature(index: SymbolIndex, target: str, members: Sequence[str]) -> str:
    """The feature's members, each with its file and lines; refuses what the libcst agent refuses
    before any edit (a member the index cannot place, or one that runs at import)."""
    if target not in members:
        raise TaskforgeError(f"{target} is not among the feature's members", reason=NOT_APPLICABLE)
    variables = module_variables(index)
    lines = []
    for member in members:
        module, _, local = member.partition(":")
        if member in index.symbols:
            symbol = index.symbols[member]
            if member in index.import_time:
                raise TaskforgeError(f"{member} runs while the package is imported", reason=NOT_APPLICABLE)
            spans = ", ".join(f"{a}-{b}" for a, b in index.spans[member])
            lines.append(f"- the {symbol.kind} `{local}` in `{symbol.path}` (lines {spans})")
        elif member in variables:
            lines.append(f"- the module-level variable `{local}` in `{index.modules[module]}`")
        else:
            raise TaskforgeError(f"{member} is neither a symbol nor a module-level variable of the index",
                                 reason=NOT_APPLICABLE)
    return (f"The feature of `{target}` is these {len(members)} definitions, which the rest of the package "
            f"does not need:\n" + "\n".join(lines))


# --- the tree the model sees ---------------------------------------------------------------------


class _Workspace:
    """The repository with the model's edits on top, in memory; the repository itself is only read."""

    def __init__(self, repo: Path) -> None:
        self.repo = repo
        self.changes: dict[str, str | None] = {}
        """Path -> new text, None for a deleted file; only files that differ from the repository."""
        self._listing: list[str] | None = None

    def files(self) -> list[str]:
        if self._listing is None:
            found = []
            for dirpath, dirnames, filenames in os.walk(self.repo):
                dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS and not d.endswith(".egg-info"))
                rel_dir = Path(dirpath).relative_to(self.repo)
                found += [(rel_dir / name).as_posix() for name in sorted(filenames)]
            self._listing = found
        return [f for f in self._listing if self.changes.get(f, "") is not None]

    def rel(self, path: str) -> str:
        """A path the model gave, checked and made repository-relative ("" for the root)."""
        pure = PurePosixPath(path.strip() or ".")
        if pure.is_absolute() or ".." in pure.parts or (pure.parts and pure.parts[0] == ".git"):
            raise _ToolError(f"{path}: give a path inside the repository (relative, no '..', not .git)")
        rel = pure.as_posix()
        return "" if rel == "." else rel

    def original(self, rel: str) -> str | None:
        path = self.repo / rel
        if not path.is_file() or path.is_symlink():
            return None
        try:
            return path.read_bytes().decode("utf-8")
        except UnicodeDecodeError:
            raise _ToolError(f"{rel} is not a UTF-8 text file") from None

    def read(self, rel: str) -> str:
        text = self.changes[rel] if rel in self.changes else self.original(rel)
        if text is None:
            raise _ToolError(f"{rel}: no such file")
        return text

    def write(self, rel: str, text: str) -> None:
        if text == self.original(rel):
            self.changes.pop(rel, None)
        else:
            self.changes[rel] = text

    def delete(self, rel: str) -> None:
        self.read(rel)  # it must exist
        self.changes[rel] = None


# --- the tools -----------------------------------------------------------------------------------


@dataclass(kw_only=True, slots=True)
class _Session:
    workspace: _Workspace
    index: SymbolIndex
    target: str
    strategy: Strategy
    runner: SuiteRunner | None
    tools: list[str]
    members: tuple[str, ...] = ()
    handlers: dict[str, Callable[..., str | Removal]] = field(init=False)

    def __post_init__(self) -> None:
        self.handlers = {"view": self.view, "grep": self.grep, "edit": self.edit, "delete_file": self.delete_file,
                         "run_tests": self.run_tests, "finish": self.finish, "give_up": self.give_up}

    def call(self, call: ToolCall) -> str | Removal:
        """The tool's answer (text), or the Removal once ``finish`` is accepted."""
        if call.name not in self.tools:
            raise _Malformed(f"there is no tool {call.name!r}; the tools are {', '.join(self.tools)}")
        try:
            arguments = json.loads(call.arguments or "{}")
        except json.JSONDecodeError as err:
            raise _Malformed(f"the arguments of {call.name} are not valid JSON ({err})") from None
        if not isinstance(arguments, dict):
            raise _Malformed(f"the arguments of {call.name} must be a JSON object")
        types = _ARG_TYPES[call.name]
        required = TOOLS[call.name]["function"]["parameters"]["required"]
        problems = [f"missing {name!r}" for name in required if name not in arguments]
        problems += [f"unknown argument {name!r}" for name in arguments if name not in types]
        problems += [f"{name!r} must be a {_type_name(types[name])}" for name, value in arguments.items()
                     if name in types and (not isinstance(value, types[name]) or isinstance(value, bool))]
        if problems:
            raise _Malformed(f"{call.name}: {'; '.join(problems)}")
        try:
            return self.handlers[call.name](**arguments)
        except _ToolError as err:
            return f"error: {err}"

    def view(self, path: str, start_line: int | None = None, end_line: int | None = None) -> str:
        rel = self.workspace.rel(path)
        files = self.workspace.files()
        if rel not in files:
            under = [f for f in files if not rel or f.startswith(rel + "/")]
            if not under:
                raise _ToolError(f"{path}: no such file or folder")
            more = f"\n... and {len(under) - _LIST_FILES} more" if len(under) > _LIST_FILES else ""
            return "\n".join(under[:_LIST_FILES]) + more
        lines = self.workspace.read(rel).splitlines()
        first = max(1, start_line or 1)
        last = min(len(lines), end_line or len(lines), first + _VIEW_LINES - 1)
        if first > len(lines):
            raise _ToolError(f"{rel} has {len(lines)} lines")
        if last < first:
            raise _ToolError("end_line is before start_line")
        shown = "\n".join(f"{n:>6}\t{lines[n - 1]}" for n in range(first, last + 1))
        note = f"\n(lines {first}-{last} of {len(lines)})" if (first, last) != (1, len(lines)) else ""
        return shown + note

    def grep(self, pattern: str, path: str = ".") -> str:
        try:
            regex = re.compile(pattern)
        except re.error as err:
            raise _ToolError(f"not a valid regular expression: {err}") from None
        rel = self.workspace.rel(path)
        matches: list[str] = []
        for name in self.workspace.files():
            if rel and name != rel and not name.startswith(rel + "/"):
                continue
            try:
                text = self.workspace.read(name)
            except _ToolError:
                continue  # a binary file
            for n, line in enumerate(text.splitlines(), 1):
                if regex.search(line):
                    matches.append(f"{name}:{n}:{line[:200]}")
                    if len(matches) > _GREP_MATCHES:
                        return "\n".join(matches[:_GREP_MATCHES]) + "\n... more matches cut; narrow the search"
        return "\n".join(matches) or "no matches"

    def edit(self, path: str, old_str: str, new_str: str) -> str:
        rel = self._editable(path)
        text = self.workspace.read(rel)
        if not old_str:
            raise _ToolError("old_str is empty")
        if old_str not in text and "\r\n" in text:  # the model writes \n; the file has Windows line ends
            old_str, new_str = old_str.replace("\n", "\r\n"), new_str.replace("\n", "\r\n")
        count = text.count(old_str)
        if count != 1:
            raise _ToolError(f"old_str occurs {count} times in {rel}; it must occur exactly once"
                             + (" (view the file: whitespace counts)" if not count else " (include more context)"))
        start = text.index(old_str)
        self.workspace.write(rel, text[:start] + new_str + text[start + len(old_str):])
        first = text.count("\n", 0, start) + 1
        lines = self.workspace.read(rel).splitlines()
        last = min(len(lines), first + new_str.count("\n"))
        shown = "\n".join(f"{n:>6}\t{lines[n - 1]}" for n in range(max(1, first - 2), min(len(lines), last + 2) + 1))
        return f"edited {rel}; lines {max(1, first - 2)}-{min(len(lines), last + 2)} now read:\n{shown}"

    def delete_file(self, path: str) -> str:
        rel = self._editable(path)
        self.workspace.delete(rel)
        return f"deleted {rel}"

    def _editable(self, path: str) -> str:
        rel = self.workspace.rel(path)
        if is_test_path(PurePosixPath(rel)):
            raise _ToolError(f"{rel} is a test file: tests are not yours to change")
        return rel

    def run_tests(self, tests: Sequence[Any] = ()) -> str:
        assert self.runner is not None  # the tool is offered only with a runner
        if not all(isinstance(t, str) and t and not t.startswith("-") for t in tests):
            raise _ToolError("tests must be test files or node ids (no options)")
        run = self.runner.run(changes=self.workspace.changes, extra_args=tuple(tests))
        counts = ", ".join(f"{n} {outcome}" for outcome, n in sorted(run.counts().items())) or "no tests ran"
        bad = sorted(t for t, r in run.results.items() if r.outcome != "passed")
        lines = [f"status: {run.status}; {counts}"]
        if bad:
            lines.append("not passed:")
            lines += [f"  {t} ({run.results[t].outcome})" for t in bad[:30]]
            if len(bad) > 30:
                lines.append(f"  ... and {len(bad) - 30} more")
        if run.status not in ("ok", "tests_failed"):
            lines.append(run.output_tail[-2000:])
        return "\n".join(lines)

    def give_up(self, reason: str) -> str:
        raise TaskforgeError(f"the model gave up on {self.target}: {reason}", reason=NOT_APPLICABLE)

    def finish(self, summary: str) -> str | Removal:
        problems = self._problems()
        if problems:
            return "cannot finish yet:\n" + "\n".join(f"- {p}" for p in problems)
        return _removal(self.workspace, self.index, self.target, self.strategy)

    def _problems(self) -> list[str]:
        changes = self.workspace.changes
        if not changes:
            return ["nothing was changed"]
        problems = []
        for rel, text in sorted(changes.items()):
            if text is not None and rel.endswith(".py"):
                try:
                    ast.parse(text.removeprefix("\ufeff"))
                except SyntaxError as err:
                    problems.append(f"{rel} does not parse: line {err.lineno}: {err.msg}")
        if problems:
            return problems
        if self.strategy == "module":
            path = self.index.modules[self.target]
            if changes.get(path, "") is not None:
                problems.append(f"{path} still exists: the module strategy deletes it")
            return problems
        if self.strategy == "feature":
            for member in self.members:
                module, _, local = member.partition(":")
                path = self.index.modules[module]
                text = changes[path] if path in changes else self.workspace.read(path)
                if text is None:
                    continue
                if member in self.index.symbols:
                    found = _definitions(text).get(local)
                    if found:
                        problems.append(f"{local} is still defined in {path} (line {found[0].lineno})")
                elif local in _module_assignments(text):
                    problems.append(f"{local} is still assigned in {path}")
            return problems
        symbol = self.index.symbols[self.target]
        local = self.target.partition(":")[2]
        new_text = changes[symbol.path] if symbol.path in changes else self.workspace.read(symbol.path)
        if new_text is None:
            return [f"{symbol.path} was deleted: the {self.strategy} strategy keeps the file"]
        definitions = _definitions(new_text).get(local, [])
        if self.strategy == "symbol":
            if definitions:
                problems.append(f"{local} is still defined in {symbol.path} (line {definitions[0].lineno})")
            return problems
        if not definitions:
            return [f"{local} is gone from {symbol.path}: the body strategy keeps the definition"]
        original = _definitions(self.workspace.original(symbol.path) or "")[local][-1]
        hollowed = definitions[-1]
        if _header(hollowed) != _header(original):
            problems.append(f"the decorators or signature of {local} changed: keep them as they were")
        if ast.get_docstring(hollowed, clean=False) != ast.get_docstring(original, clean=False):
            problems.append(f"the docstring of {local} changed: keep it as it was")
        if not all(_is_placeholder(s) for s in _body(hollowed)):
            problems.append(f"the body of {local} (the last definition) must be just `raise NotImplementedError`")
        elif all(_is_placeholder(s) for s in _body(original)):
            problems.append(f"{local} had no body to remove")
        return problems


def _type_name(kind: type) -> str:
    return {str: "string", int: "integer", list: "list"}.get(kind, kind.__name__)


# --- reading the removal off the edit ------------------------------------------------------------

_Definition = ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef


def _definitions(text: str) -> dict[str, list[_Definition]]:
    """Local qualname (``Class.method``) -> its definitions in line order, nested as the index nests them."""
    found: dict[str, list[_Definition]] = {}

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, _Definition):
                found.setdefault(prefix + child.name, []).append(child)
                walk(child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.stmt | ast.excepthandler | ast.match_case):
                walk(child, prefix)

    walk(ast.parse(text.removeprefix("\ufeff")), "")
    return found


def _module_assignments(text: str) -> set[str]:
    """Names assigned by module-level statements."""
    names: set[str] = set()
    for node in ast.parse(text.removeprefix("\ufeff")).body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        names |= {t.id for t in targets if isinstance(t, ast.Name)}
    return names


def _header(node: _Definition) -> str:
    parts: list[ast.AST | None] = [*node.decorator_list]
    if isinstance(node, ast.ClassDef):
        parts += [*node.bases, *node.keywords]
    else:
        parts += [node.args, node.returns]
    return f"{type(node).__name__} {node.name} " + " ".join(ast.dump(p) if p is not None else "-" for p in parts)


def _body(node: _Definition) -> list[ast.stmt]:
    body = node.body
    if ast.get_docstring(node, clean=False) is not None:
        body = body[1:]
    return body


def _is_placeholder(statement: ast.stmt) -> bool:
    """``pass``, ``...`` or ``raise NotImplementedError[(...)]``."""
    if isinstance(statement, ast.Pass):
        return True
    if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant):
        return statement.value.value is Ellipsis
    if isinstance(statement, ast.Raise) and statement.exc is not None:
        exc = statement.exc.func if isinstance(statement.exc, ast.Call) else statement.exc
        return isinstance(exc, ast.Name) and exc.id == "NotImplementedError"
    return False


def _removal(workspace: _Workspace, index: SymbolIndex, target: str, strategy: Strategy) -> Removal:
    """The Removal the edit amounts to (see the module docstring)."""
    files = dict(sorted(workspace.changes.items()))
    if strategy == "module":
        path = index.modules[target]
        module_symbols = tuple(q for q, s in index.symbols.items() if s.module == target)
        return Removal(strategy=strategy, target=target, removed=(target, *module_symbols), files=files,
                       removed_code={target: workspace.original(path) or ""})
    vanished: set[str] = set()
    removed_lines: dict[str, list[int]] = {}
    for rel, new_text in files.items():
        old_text = workspace.original(rel)
        if old_text is None or not rel.endswith(".py"):
            continue
        in_file = [q for q, s in index.symbols.items() if s.path == rel]
        remaining = {} if new_text is None else _definitions(new_text)
        vanished |= {q for q in in_file if q.partition(":")[2] not in remaining}
        old_lines = old_text.splitlines(keepends=True)
        matcher = difflib.SequenceMatcher(None, old_lines, (new_text or "").splitlines(keepends=True), autojunk=False)
        removed_lines[rel] = [n + 1 for tag, i1, i2, _, _ in matcher.get_opcodes() if tag in ("replace", "delete")
                              for n in range(i1, i2)]

    def absorbed(q: str) -> bool:
        """A function nested in a function that stays: part of that function's body."""
        parent = index.symbols[q].parent
        return parent is not None and parent not in vanished and index.symbols[parent].kind != "class"

    # Listed: the definitions that went (a method, a class, a function), not those inside one that went.
    listed = [q for q in index.symbols if q in vanished and not absorbed(q)
              and (index.symbols[q].parent is None or index.symbols[q].parent not in vanished)]
    changed: dict[str, list[str]] = {}
    for rel, numbers in removed_lines.items():
        lines = (workspace.original(rel) or "").splitlines(keepends=True)
        owners = index.line_owners.get(rel, ())
        for n in numbers:
            owner = owners[n - 1] if n <= len(owners) else None
            while owner is not None and owner in vanished and not absorbed(owner) and owner not in listed:
                owner = index.symbols[owner].parent
            if owner is None or owner in listed:
                continue  # module-level code, or inside a listed definition (kept whole below)
            if owner in vanished:  # absorbed: the code counts as its parent's
                owner = index.symbols[owner].parent
                assert owner is not None
            changed.setdefault(owner, []).append(lines[n - 1])
    removed_code = {}
    for q in listed:
        text = workspace.original(index.symbols[q].path) or ""
        lines = text.splitlines(keepends=True)
        removed_code[q] = "".join("".join(lines[a - 1:b]) for a, b in index.spans[q]).strip("\n") + "\n"
    for q, lines_of_q in changed.items():
        if "".join(lines_of_q).strip():  # not just the blank line above a deleted method
            removed_code.setdefault(q, "".join(lines_of_q).strip("\n") + "\n")
    ordered = {q: i for i, q in enumerate(index.symbols)}
    removed = (target, *sorted((q for q in listed if q != target), key=ordered.__getitem__))
    removed_code = {target: removed_code.pop(target, ""), **removed_code}
    return Removal(strategy=strategy, target=target, removed=removed, files=files, removed_code=removed_code)
