"""The chat format the policy reads and writes, and the trajectories it makes.

A conversation is a list of :class:`Message` rendered as plain text, one block per message:

    <|system|>
    You are fixing a repository. Tools: list_files, read_file, edit_file, run_tests, submit.
    <|user|>
    Implement `pkg.mod:func` ...
    <|assistant|>
    {"tool": "read_file", "args": {"path": "src/pkg/mod.py"}}
    <|tool|>
    def func(x):
        raise NotImplementedError
    <|assistant|>
    ...

Each assistant message is exactly one JSON object: ``{"tool": NAME, "args": {...}}``. Anything
else (not JSON, not an object, no ``tool``, ``args`` not an object) is a malformed call; a name
outside the tool list is an unknown tool. Both become an error observation in the next ``tool``
message, which is what textual feedback targets. A ``hint`` block (``<|hint|>``) is never in a
rollout: it exists only in the teacher's context (``trainer.rl.feedback``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = [
    "ROLES",
    "Message",
    "ToolCall",
    "Trajectory",
    "Turn",
    "parse_tool_call",
    "render",
    "render_prefix",
]

Role = Literal["system", "user", "assistant", "tool", "hint"]
ROLES: tuple[Role, ...] = ("system", "user", "assistant", "tool", "hint")


def tag(role: Role) -> str:
    return f"<|{role}|>\n"


@dataclass(frozen=True, kw_only=True, slots=True)
class Message:
    role: Role
    content: str

    def render(self) -> str:
        return tag(self.role) + self.content.rstrip("\n") + "\n"


def render(messages: Sequence[Message]) -> str:
    """The text of a whole conversation."""
    return "".join(m.render() for m in messages)


def render_prefix(messages: Sequence[Message]) -> str:
    """The text the policy continues to write the next assistant message: the conversation so far
    and the assistant tag."""
    return render(messages) + tag("assistant")


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolCall:
    """A parsed assistant message: a call, or why it is not one (``error``)."""

    name: str = ""
    args: dict[str, Any] = field(default_factory=dict)
    error: str = ""
    """Empty for a well-formed call; else what is wrong with the message."""

    @property
    def ok(self) -> bool:
        return not self.error


def parse_tool_call(text: str) -> ToolCall:
    """Read one assistant message as a tool call (see the module docstring)."""
    stripped = text.strip()
    try:
        data = json.loads(stripped)
    except json.JSONDecodeError as err:
        return ToolCall(error=f"not JSON: {err.msg} at column {err.colno}")
    if not isinstance(data, dict):
        return ToolCall(error=f"a call is a JSON object, not {type(data).__name__}")
    name = data.get("tool")
    if not isinstance(name, str) or not name:
        return ToolCall(error='a call needs "tool": a tool name')
    args = data.get("args", {})
    if not isinstance(args, dict):
        return ToolCall(name=name, error='"args" must be a JSON object')
    extra = set(data) - {"tool", "args"}
    if extra:
        return ToolCall(name=name, args=args, error=f"unknown key(s) {sorted(extra)}; a call has only tool and args")
    return ToolCall(name=name, args=args)


@dataclass(kw_only=True, slots=True)
class Turn:
    """One step of an episode: what the policy wrote, how it was read, and what came back."""

    index: int
    """Position of the assistant message in ``Trajectory.messages``."""
    text: str
    """The assistant message exactly as generated."""
    call: ToolCall
    observation: str
    """The tool message that followed (the tool's output, or the error)."""
    error: str = ""
    """Why the call failed: malformed, unknown tool, bad arguments, a tool error; empty if it worked."""
    error_kind: str = ""
    """``malformed``, ``unknown_tool``, ``bad_args``, ``tool_error`` or empty."""
    ending: str = ""
    """How sampling ended the message: ``eos``, ``tag`` (the start of another block), ``limit``
    (the token budget), or empty when no sampler wrote it (`trainer.rl.policy.trajectory_sequence`)."""


@dataclass(kw_only=True, slots=True)
class Trajectory:
    """A whole episode: the messages, the turns, and how it ended."""

    task_id: str
    tools: tuple[str, ...]
    messages: list[Message] = field(default_factory=list)
    turns: list[Turn] = field(default_factory=list)
    submitted: bool = False
    reward: float = 0.0
    reward_status: str = ""
    """The scorer's status (ok, tampered, ..., or infra_error when no result came); how the episode ended is ``info["ended"]``."""
    info: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id, "tools": list(self.tools), "submitted": self.submitted,
            "reward": self.reward, "reward_status": self.reward_status, "info": self.info,
            "messages": [{"role": m.role, "content": m.content} for m in self.messages],
            "turns": [{"index": t.index, "text": t.text, "tool": t.call.name, "args": t.call.args,
                       "error": t.error, "error_kind": t.error_kind} for t in self.turns],
        }
