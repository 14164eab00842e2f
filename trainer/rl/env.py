"""A tool-calling coding environment on taskforge's sandbox: one mined task, one episode at a time.

    env = CodingEnv(task, backend=open_backend("docker"), scorer=scorer)
    messages = env.reset()                       # system (tools, call format) + user (the problem)
    done = False
    while not done:
        observation, done = env.step(policy(messages))   # one assistant message → one tool message
        messages = env.trajectory.messages
    env.trajectory.reward, env.trajectory.reward_status, env.trajectory.info["reward"]
    env.close()

**The chat** is ``trainer.rl.chat``'s: a ``system`` message that lists the tools and the call format,
a ``user`` message with the task's problem statement, then alternating ``assistant`` messages
(each exactly one JSON object ``{"tool": NAME, "args": {...}}``) and ``tool`` messages (the
tool's output, or an error), each cut to ``max_observation_chars``.

**The tools** (paths are relative to /workspace; an absolute path or a ``..`` component is
refused, and so is an edit inside ``.git``):

- ``list_files {"path": "."}``: the files under a folder, sorted (``.git`` is not listed).
- ``read_file {"path": P, "start_line": A, "end_line": B}``: a file's text from line A to line B
  (1-based, inclusive; both optional) after a one-line header ``P: lines A-B of N``.
- ``edit_file {"path": P, "old": O, "new": N}``: replace O by N; O must occur exactly once (the
  error says how often it does). ``"old": ""`` creates a file that does not exist yet.
- ``run_tests {"paths": [P, ...]}``: pytest on the repository's visible tests (all of them, or the
  files and node ids given), with the image's pytest arguments; the output's start and end, and
  pytest's exit status.
- ``submit {}``: ends the episode.

**Errors** go back as the tool message ``error (KIND): what is wrong``, and the episode goes on;
they are what textual feedback targets. The ``Turn`` records the kind: ``malformed`` (not one JSON
call; ``trainer.rl.chat.parse_tool_call``), ``unknown_tool``, ``bad_args`` (a missing, unknown or
mistyped argument, or a path outside /workspace) and ``tool_error`` (the call was well formed but
failed: no such file, ``old`` not found or found twice, ...).

**The start state** is rebuilt from the task row (``taskforge.rebuild_start_state``) into a
temporary folder once per environment and copied, with its ``.git``, into a fresh sandbox of the
task's image at every ``reset``. The hidden tests are not in it; ``run_tests`` runs only what is
there, with bytecode writing and pytest's cache off so that neither lands in the workspace.

**The end** comes with ``submit`` or when ``max_turns`` assistant messages have been answered. Either
way the candidate patch is ``git add -A && git diff --cached --binary HEAD`` of the workspace
against the start commit, taken inside the sandbox (the sandbox is untrusted, and so is the
patch: the scorer restores the trusted tests and looks for tampering), and it is scored by the
``Scorer`` or through the ``RewardClient``. An episode that runs out of turns is scored too, as it
stands: an unfinished edit usually fails the tests and earns 0, and a finished one that forgot to
submit earns its reward, so the policy is not taught that a correct fix is worth nothing for want
of one call; ``info["ended"]`` says ``budget`` (else ``submit``) so the two can be told apart.
When the sandbox dies under the policy's code (a test run that outlives even its hard timeout),
the workspace is gone: the episode ends with ``info["ended"] = "sandbox_dead"``, reward 0 and
status ``infra_error``.

At the end, ``trajectory.reward`` and ``trajectory.reward_status`` are the ``RewardResult``'s reward
and status, and ``trajectory.info`` holds ``ended``, ``turns``, ``candidate_id``, ``episode_s``
and ``reward`` (``RewardResult.to_json()``, the patch included), or ``reward_error`` (why there is
no result: the reward service failed, or the workspace was lost) with status ``infra_error``.
"""

from __future__ import annotations

import json
import posixpath
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

from taskforge import (
    WORKSPACE,
    Environment,
    Sandbox,
    SandboxBackend,
    SandboxError,
    SandboxLimits,
    TaskforgeError,
)
from trainer.rl.chat import Message, ToolCall, Trajectory, Turn, parse_tool_call

if TYPE_CHECKING:
    from taskforge import RewardClient, RewardResult, Scorer, Task

__all__ = ["ERROR_KINDS", "TOOLS", "CodingEnv", "system_prompt"]

ERROR_KINDS = ("malformed", "unknown_tool", "bad_args", "tool_error")


@dataclass(frozen=True, kw_only=True, slots=True)
class _Tool:
    name: str
    example: str
    """The call's arguments as the system message shows them."""
    doc: str
    required: Mapping[str, type]
    optional: Mapping[str, type]


TOOLS: dict[str, _Tool] = {
    tool.name: tool
    for tool in (
        _Tool(name="list_files", example='{"path": "."}', required={}, optional={"path": str},
              doc="the files under a folder, sorted (the .git folder is not listed)"),
        _Tool(name="read_file", example='{"path": "src/pkg/mod.py", "start_line": 1, "end_line": 80}',
              required={"path": str}, optional={"start_line": int, "end_line": int},
              doc="a file's text; start_line and end_line (1-based, inclusive) are optional"),
        _Tool(name="edit_file", example='{"path": "src/pkg/mod.py", "old": "exact old text", "new": "new text"}',
              required={"path": str, "old": str, "new": str}, optional={},
              doc='replace old, which must occur exactly once in the file, by new; "old": "" creates a new file'),
        _Tool(name="run_tests", example='{"paths": ["tests/test_mod.py"]}', required={}, optional={"paths": list},
              doc="run pytest on the repository's tests (all of them without paths) and show the output"),
        _Tool(name="submit", example="{}", required={}, optional={},
              doc="end the episode; your changes are then graded by tests you cannot see"),
    )
}
"""The tools, by name, in the order the system message lists them."""

_LIST_LIMIT = 5000
"""Most files one list_files names (the observation is cut to max_observation_chars anyway)."""
_READ_LIMIT = 4 * 1024 * 1024
"""Largest file read_file or edit_file reads, in bytes."""
_FS_TIMEOUT_S = 60.0
_DIFF_LIMIT = 16 * 1024 * 1024
"""Bytes of the candidate patch read back (the scorer refuses patches above 8 MiB)."""
_GIT = ("git", "-c", "safe.directory=*", "-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null",
        "-c", "core.quotepath=false")
_TEST_ENV = {"HOME": "/tmp", "PYTHONDONTWRITEBYTECODE": "1"}
"""No bytecode in the workspace: it would land in the candidate patch."""


def system_prompt(max_turns: int) -> str:
    """The system message: what the episode is, the call format and the tools."""
    tools = "\n".join(f'- {t.name} {t.example}: {t.doc}.' for t in TOOLS.values())
    return (
        "You are fixing a Python repository. Its files are in /workspace, and every path you give is "
        "relative to it.\n"
        "You act only through tools. Each of your messages must be exactly one JSON object and nothing "
        'else: {"tool": NAME, "args": {...}}\n'
        f"Tools:\n{tools}\n"
        f"You have {max_turns} messages. When they run out, the episode ends and your changes are graded "
        "as they stand."
    )


class _ToolFailed(Exception):
    """A well-formed call that could not be carried out (a ``tool_error``)."""


class _BadArgs(Exception):
    """Arguments that do not fit the tool (a ``bad_args``)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class _Outcome:
    text: str
    error: str = ""
    error_kind: str = ""
    submit: bool = False


class CodingEnv:
    """One task's coding environment (see the module docstring). Not thread-safe: one episode at
    a time; run several environments for parallel rollouts."""

    def __init__(
        self,
        task: Task,
        *,
        backend: SandboxBackend,
        scorer: Scorer | None = None,
        reward_client: RewardClient | None = None,
        limits: SandboxLimits | None = None,
        max_turns: int = 30,
        max_observation_chars: int = 8000,
        test_timeout_s: float = 300.0,
        candidate_id: str = "",
    ) -> None:
        """Exactly one of ``scorer`` and ``reward_client`` gives the reward. ``candidate_id`` goes
        with every scoring (empty: the reward server keys the row by the patch's hash)."""
        if (scorer is None) == (reward_client is None):
            raise ValueError("CodingEnv needs exactly one of scorer and reward_client")
        if max_turns < 1:
            raise ValueError(f"max_turns must be at least 1, got {max_turns}")
        if max_observation_chars < 200:
            raise ValueError(f"max_observation_chars must be at least 200, got {max_observation_chars}")
        if not test_timeout_s > 0:
            raise ValueError(f"test_timeout_s must be positive, got {test_timeout_s}")
        self.task = task
        self.backend = backend
        self.scorer = scorer
        self.reward_client = reward_client
        self.limits = limits or SandboxLimits.load()
        self.max_turns = max_turns
        self.max_observation_chars = max_observation_chars
        self.test_timeout_s = test_timeout_s
        self.candidate_id = candidate_id
        self.pytest_args = Environment.from_json(json.loads(task.environment)).pytest_args
        self.trajectory = Trajectory(task_id=task.instance_id, tools=tuple(TOOLS))
        self._box: Sandbox | None = None
        self._start: tempfile.TemporaryDirectory[str] | None = None
        self._done = True
        self._started = 0.0

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Destroy the sandbox and the host copy of the start state. Safe to call twice."""
        self._close_box()
        if self._start is not None:
            self._start.cleanup()
            self._start = None

    def _close_box(self) -> None:
        if self._box is not None:
            box, self._box = self._box, None
            box.close()

    # -- the episode ------------------------------------------------------------------------------

    def reset(self) -> list[Message]:
        """Start a new episode in a fresh sandbox holding the start state; returns its first
        messages (system and user), which also open ``self.trajectory.messages``."""
        # Imported here: rebuild_start_state's module pulls in the miner and libcst, which importing this
        # module must not.
        from taskforge import rebuild_start_state

        self._close_box()
        if self._start is None:
            self._start = tempfile.TemporaryDirectory(prefix="trainer-env-")
            rebuild_start_state(self.task, Path(self._start.name) / "repo")
        box = self.backend.start(self.task.image_name, limits=self.limits,
                                 labels={"taskforge.role": "rollout"})
        try:
            box.put_tree(Path(self._start.name) / "repo", WORKSPACE)
        except BaseException:
            box.close()
            raise
        self._box = box
        messages = [Message(role="system", content=system_prompt(self.max_turns)),
                    Message(role="user", content=self.task.problem_statement)]
        self.trajectory = Trajectory(task_id=self.task.instance_id, tools=tuple(TOOLS), messages=list(messages))
        self._done = False
        self._started = time.monotonic()
        return messages

    def step(self, assistant_text: str) -> tuple[Message, bool]:
        """Act on one assistant message; returns the tool message and whether the episode is over
        (then the trajectory holds the reward)."""
        if self._done or self._box is None:
            raise RuntimeError("no episode is running: call reset() first")
        trajectory = self.trajectory
        index = len(trajectory.messages)
        trajectory.messages.append(Message(role="assistant", content=assistant_text))
        call = parse_tool_call(assistant_text)
        outcome = self._act(call)
        ended = ""
        if outcome.submit:
            ended = "submit"
        elif self._box is None or not self._box.alive:
            ended = "sandbox_dead"
        elif len(trajectory.turns) + 1 >= self.max_turns:
            ended = "budget"
        note = (f"\n[the {self.max_turns} turns are spent: the episode ends, and the changes are graded as they stand]"
                if ended == "budget" else "")
        observation = _truncate(outcome.text, self.max_observation_chars - len(note),
                                keep="middle" if call.name == "run_tests" else "head") + note
        trajectory.messages.append(Message(role="tool", content=observation))
        trajectory.turns.append(Turn(index=index, text=assistant_text, call=call, observation=observation,
                                     error=outcome.error, error_kind=outcome.error_kind))
        if ended:
            self._finish(ended)
        return trajectory.messages[-1], bool(ended)

    def _finish(self, ended: str) -> None:
        self._done = True
        trajectory = self.trajectory
        trajectory.submitted = ended == "submit"
        trajectory.info.update(ended=ended, turns=len(trajectory.turns), candidate_id=self.candidate_id,
                               episode_s=round(time.monotonic() - self._started, 3))
        try:
            patch = self._candidate_patch()
        except SandboxError as err:
            self._close_box()
            trajectory.reward, trajectory.reward_status = 0.0, "infra_error"
            trajectory.info["reward_error"] = f"the workspace could not be read back: {err}"
            return
        self._close_box()
        try:
            result = self._score(patch)
        except TaskforgeError as err:  # the reward service refused or could not be reached
            trajectory.reward, trajectory.reward_status = 0.0, "infra_error"
            trajectory.info["reward_error"] = f"{err} [{err.reason}]"
            return
        trajectory.reward, trajectory.reward_status = result.reward, result.status
        trajectory.info["reward"] = result.to_json()

    def _candidate_patch(self) -> str:
        box = self._require_box()
        if not box.alive:
            raise SandboxError("the sandbox died during the episode", reason="sandbox_dead")
        script = " ".join(_GIT) + " add -A && " + " ".join(_GIT) + " diff --cached --binary --no-color --full-index HEAD"
        result = box.exec(["sh", "-c", script], timeout_s=_FS_TIMEOUT_S, workdir=WORKSPACE, env=_TEST_ENV,
                          output_limit=_DIFF_LIMIT)
        if result.exit_code != 0:
            raise SandboxError(f"git diff in the workspace failed: {result.text().strip()[-300:]}")
        return result.stdout.decode("utf-8", "surrogateescape")

    def _score(self, patch: str) -> RewardResult:
        if self.scorer is not None:
            return self.scorer.score(self.task, patch, candidate_id=self.candidate_id)
        assert self.reward_client is not None  # the constructor holds one of the two
        return self.reward_client.score(self.task.instance_id, patch, candidate_id=self.candidate_id)

    # -- one call ---------------------------------------------------------------------------------

    def _act(self, call: ToolCall) -> _Outcome:
        if not call.ok:
            return _error("malformed", f'{call.error}. Write exactly one JSON object: {{"tool": NAME, "args": {{...}}}}')
        tool = TOOLS.get(call.name)
        if tool is None:
            return _error("unknown_tool", f"there is no tool {call.name!r}; the tools are {', '.join(TOOLS)}")
        try:
            _check_args(tool, call.args)
            if tool.name == "submit":
                return _Outcome(text="submitted", submit=True)
            run = {"list_files": self._tool_list_files, "read_file": self._tool_read_file,
                   "edit_file": self._tool_edit_file, "run_tests": self._tool_run_tests}[tool.name]
            return _Outcome(text=run(call.args))
        except _BadArgs as err:
            return _error("bad_args", f"{err}. Call it as {tool.name} {tool.example}")
        except _ToolFailed as err:
            return _error("tool_error", str(err))
        except SandboxError as err:
            return _error("tool_error", f"the sandbox failed: {err}")

    def _require_box(self) -> Sandbox:
        if self._box is None:
            raise RuntimeError("no episode is running: call reset() first")
        return self._box

    def _tool_list_files(self, args: Mapping[str, Any]) -> str:
        rel, where = _workspace_path(args.get("path", "."))
        result = self._require_box().exec(
            ["find", where, "-path", f"{WORKSPACE}/.git", "-prune", "-o", "-type", "f", "-print"],
            timeout_s=_FS_TIMEOUT_S, workdir=WORKSPACE)
        if result.exit_code != 0:
            raise _ToolFailed(f"cannot list {rel}: {_sandbox_message(result.stderr)}")
        files = sorted(line.removeprefix(WORKSPACE + "/") for line in result.stdout.decode("utf-8", "replace").splitlines())
        if not files:
            return f"{rel}: no files"
        shown = files[:_LIST_LIMIT]
        more = f"\n[... {len(files) - len(shown)} more files]" if len(files) > len(shown) else ""
        return "\n".join(shown) + more

    def _read(self, rel: str, where: str) -> str | None:
        """The file's text, or None when it does not exist."""
        result = self._require_box().exec(["cat", "--", where], timeout_s=_FS_TIMEOUT_S, workdir=WORKSPACE,
                                          output_limit=_READ_LIMIT)
        if result.exit_code != 0:
            message = _sandbox_message(result.stderr)
            if "No such file or directory" in message:
                return None
            raise _ToolFailed(f"cannot read {rel}: {message}")
        if result.truncated:
            raise _ToolFailed(f"{rel} is larger than {_READ_LIMIT} bytes")
        try:
            return result.stdout.decode("utf-8")
        except UnicodeDecodeError:
            raise _ToolFailed(f"{rel} is not a text file (not UTF-8)") from None

    def _tool_read_file(self, args: Mapping[str, Any]) -> str:
        rel, where = _workspace_path(args["path"])
        text = self._read(rel, where)
        if text is None:
            raise _ToolFailed(f"{rel} does not exist")
        lines = text.splitlines(keepends=True)
        if not lines:
            return f"{rel}: an empty file"
        start = args.get("start_line", 1)
        end = args.get("end_line", len(lines))
        if start < 1 or end < start:
            raise _BadArgs(f"the lines must satisfy 1 <= start_line <= end_line, got {start} and {end}")
        if start > len(lines):
            raise _ToolFailed(f"{rel} has {len(lines)} lines; start_line {start} is past its end")
        end = min(end, len(lines))
        return f"{rel}: lines {start}-{end} of {len(lines)}\n" + "".join(lines[start - 1:end])

    def _tool_edit_file(self, args: Mapping[str, Any]) -> str:
        rel, where = _workspace_path(args["path"])
        if rel == ".git" or rel.startswith(".git/"):
            raise _ToolFailed("files inside .git cannot be edited")
        if rel == ".":
            raise _BadArgs("path must name a file")
        old, new = args["old"], args["new"]
        text = self._read(rel, where)
        if text is None:
            if old:
                raise _ToolFailed(f'{rel} does not exist (to create it, give "old": "")')
            self._write(rel, where, new)
            return f"created {rel} ({len(new.splitlines())} lines)"
        if not old:
            if text:
                raise _ToolFailed(f'{rel} already exists; "old" must be the exact text to replace')
            self._write(rel, where, new)
            return f"wrote {rel} ({len(new.splitlines())} lines)"
        count = text.count(old)
        if count != 1:
            advice = "copy it exactly from read_file" if count == 0 else "include more lines so that it occurs once"
            raise _ToolFailed(f"old occurs {count} times in {rel}; it must occur exactly once ({advice})")
        self._write(rel, where, text.replace(old, new, 1))
        return f"edited {rel}: replaced {len(old.splitlines())} line(s) with {len(new.splitlines())} line(s)"

    def _write(self, rel: str, where: str, text: str) -> None:
        # cat > keeps an existing file's mode; mkdir -p makes the folders of a new one.
        result = self._require_box().exec(
            ["sh", "-c", 'mkdir -p -- "$(dirname -- "$1")" && cat > "$1"', "sh", where],
            timeout_s=_FS_TIMEOUT_S, workdir=WORKSPACE, stdin=text.encode("utf-8"))
        if result.exit_code != 0:
            raise _ToolFailed(f"cannot write {rel}: {_sandbox_message(result.stderr)}")

    def _tool_run_tests(self, args: Mapping[str, Any]) -> str:
        paths = args.get("paths", [])
        selected = []
        for item in paths:
            if not isinstance(item, str):
                raise _BadArgs("paths must be a list of strings")
            file_part, sep, node = item.partition("::")
            rel, _ = _workspace_path(file_part)
            selected.append(rel + sep + node)
        timeout = f"{self.test_timeout_s:g}"
        command = ["timeout", "-k", "5", timeout, "python", "-m", "pytest", "-p", "no:cacheprovider", "-q",
                   "--tb=short", "-rfE", *self.pytest_args, *selected]
        result = self._require_box().exec(command, timeout_s=self.test_timeout_s + 30, workdir=WORKSPACE,
                                          env=_TEST_ENV)
        output = result.text().strip()
        if result.timed_out or result.exit_code in (124, 137):
            return f"{output}\n[the tests ran past {timeout} s and were stopped]"
        return f"{output}\n[pytest exited {result.exit_code}]"


def _check_args(tool: _Tool, args: Mapping[str, Any]) -> None:
    unknown = sorted(set(args) - set(tool.required) - set(tool.optional))
    if unknown:
        raise _BadArgs(f"{tool.name} takes no argument(s) {', '.join(map(repr, unknown))}")
    for name, kind in tool.required.items():
        if name not in args:
            raise _BadArgs(f"{tool.name} needs the argument {name!r}")
    for name, kind in {**tool.required, **tool.optional}.items():
        if name in args and (not isinstance(args[name], kind) or isinstance(args[name], bool)):
            raise _BadArgs(f"{tool.name}'s argument {name!r} must be a {_TYPE_NAMES[kind]}, "
                           f"not {type(args[name]).__name__}")


_TYPE_NAMES = {str: "string", int: "whole number", list: "list"}


def _workspace_path(path: str) -> tuple[str, str]:
    """``path`` (relative to /workspace) normalized, and its absolute form; ``_BadArgs`` if it is
    empty, absolute, climbs out with ``..``, or could be read as an option."""
    if not path or "\0" in path:
        raise _BadArgs("path must be a non-empty string")
    if path.startswith(("/", "\\", "~")):
        raise _BadArgs(f"path {path!r} is absolute; paths are relative to /workspace")
    if ".." in path.replace("\\", "/").split("/"):
        raise _BadArgs(f"path {path!r} leaves /workspace ('..' is not allowed)")
    rel = posixpath.normpath(path)
    if rel.startswith("-"):
        raise _BadArgs(f"path {path!r} starts with '-'")
    return rel, WORKSPACE if rel == "." else f"{WORKSPACE}/{rel}"


def _error(kind: str, detail: str) -> _Outcome:
    return _Outcome(text=f"error ({kind}): {detail}", error=detail, error_kind=kind)


def _sandbox_message(stderr: bytes) -> str:
    """A command's error, with the sandbox's absolute paths made relative again."""
    text = stderr.decode("utf-8", "replace").strip().splitlines()
    line = text[-1] if text else "failed"
    return line.replace(WORKSPACE + "/", "").replace(WORKSPACE, ".")


def _truncate(text: str, limit: int, *, keep: str) -> str:
    """``text`` cut to at most ``limit`` characters, keeping its head, or both ends (``middle``: the
    first failures and pytest's summary), with a marker where it was cut."""
    if len(text) <= limit:
        return text
    width = len(f"\n[... {len(text)} characters cut ...]\n")
    budget = max(0, limit - width)
    cut = len(text) - budget
    marker = f"\n[... {cut} characters cut ...]\n"
    if keep == "head":
        return text[:budget] + marker
    half = budget // 2
    return text[:half] + marker + text[len(text) - (budget - half):]
