"""Targeted textual feedback: find the turns where the policy went wrong, write a short hint for
each, and build the teacher's context (the hint inserted right before that turn) beside the
student's (the conversation as it was).

The teacher is the same model reading the hinted context under no_grad; the student reads the
original one. `trainer.rl.kl.feedback_kl_loss` pulls the student toward the teacher on the tokens of
the hinted turn only, so the policy learns to act, without the hint, as it would with it.

    hints = detect_all(trajectory, default_detectors(), extra=monitor_flags)
    examples = [encode_feedback(trajectory, hint) for hint in hints]

A detector looks at a finished `Trajectory` and returns `Hint`s (a turn and a text). The built-in
ones, by registry name:

    unknown_tool    a call to a tool that is not in the trajectory's tool list
    malformed_call  a message that is not a well-formed call, or a call with wrong arguments
    test_edit       an edit of test code (``taskforge.is_test_path``: tests/, test/, testing/,
                    test_*.py, *_test.py, conftest.py)
    untested_submit a submit before any run_tests call
    overlong        an assistant message longer than `max_chars` characters
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from taskforge import is_test_path
from trainer.rl.chat import Message, Trajectory, Turn, render_prefix

if TYPE_CHECKING:
    import torch

    from trainer.pretrain.data import ByteTokenizer

__all__ = [
    "CALL_FORMAT",
    "DETECTORS",
    "Detector",
    "FeedbackExample",
    "Hint",
    "MalformedCallDetector",
    "OverlongMessageDetector",
    "TestEditDetector",
    "UnknownToolDetector",
    "UntestedSubmitDetector",
    "default_detectors",
    "detect_all",
    "encode_feedback",
    "make_detector",
    "teacher_context",
]

CALL_FORMAT = '{"tool": NAME, "args": {...}}'
"""The one shape of an assistant message (see trainer.rl.chat), as hints spell it out."""

# error_kind values (trainer.rl.chat.Turn) for which the tool never ran.
_NOT_RUN = ("malformed", "unknown_tool", "bad_args")


@dataclass(frozen=True, kw_only=True, slots=True)
class Hint:
    """A reminder for one turn: what the teacher reads right before that turn's assistant message."""

    turn: int
    """Index into `Trajectory.turns`."""
    text: str
    """The hint, one or a few short sentences."""
    detector: str
    """Name of the detector that wrote it (merged hints join names with "+")."""


class Detector(Protocol):
    """Finds the turns of a trajectory that deserve a hint."""

    @property
    def name(self) -> str: ...

    def detect(self, trajectory: Trajectory) -> list[Hint]: ...


def _strip_period(text: str) -> str:
    return text.strip().rstrip(".")


@dataclass(frozen=True, kw_only=True, slots=True)
class UnknownToolDetector:
    """A well-formed call whose tool is not in the trajectory's tool list (or that the environment
    marked ``unknown_tool``). The hint lists the tools."""

    name: ClassVar[str] = "unknown_tool"

    def detect(self, trajectory: Trajectory) -> list[Hint]:
        text = f"Reminder: available tools: {', '.join(trajectory.tools)}."
        return [Hint(turn=i, text=text, detector=self.name) for i, turn in enumerate(trajectory.turns)
                if turn.error_kind == "unknown_tool" or (turn.call.ok and turn.call.name not in trajectory.tools)]


@dataclass(frozen=True, kw_only=True, slots=True)
class MalformedCallDetector:
    """A message that does not parse as a call, or a call whose arguments the tool rejected
    (``bad_args``). The hint gives the exact format and what was wrong."""

    name: ClassVar[str] = "malformed_call"

    def detect(self, trajectory: Trajectory) -> list[Hint]:
        hints = []
        for i, turn in enumerate(trajectory.turns):
            if not turn.call.ok or turn.error_kind == "malformed":
                problem = _strip_period(turn.call.error or turn.error)
                text = (f"Reminder: reply with exactly one JSON object {CALL_FORMAT}. "
                        f"Your message was not a valid call: {problem}.")
            elif turn.error_kind == "bad_args":
                text = (f"Reminder: a call is {CALL_FORMAT}. "
                        f"The arguments of {turn.call.name} were wrong: {_strip_period(turn.error)}.")
            else:
                continue
            hints.append(Hint(turn=i, text=text, detector=self.name))
        return hints


@dataclass(frozen=True, kw_only=True, slots=True)
class TestEditDetector:
    """A call of an editing tool on test code: a path that taskforge's `is_test_path` (pytest's
    default layout) calls a test (backslashes read as separators)."""

    __test__: ClassVar[bool] = False  # not a pytest test class, despite its name
    name: ClassVar[str] = "test_edit"
    edit_tools: tuple[str, ...] = ("edit_file",)
    """Tools that write files; their ``path`` argument is checked."""

    def detect(self, trajectory: Trajectory) -> list[Hint]:
        text = "Do not edit tests; change the package code."
        return [Hint(turn=i, text=text, detector=self.name) for i, turn in enumerate(trajectory.turns)
                if turn.call.ok and turn.call.name in self.edit_tools
                and isinstance(path := turn.call.args.get("path"), str)
                and is_test_path(path.replace("\\", "/"))]


@dataclass(frozen=True, kw_only=True, slots=True)
class UntestedSubmitDetector:
    """A submit call with no earlier call of the test tool that ran (a call the environment
    rejected as malformed, unknown or with bad arguments did not run). Silent when the trajectory
    has no test tool."""

    name: ClassVar[str] = "untested_submit"
    submit_tool: str = "submit"
    """The tool that ends the episode."""
    test_tool: str = "run_tests"
    """The tool that runs the tests."""

    def detect(self, trajectory: Trajectory) -> list[Hint]:
        if self.test_tool not in trajectory.tools:
            return []
        text = f"Reminder: run the tests ({self.test_tool}) before you {self.submit_tool}."
        hints, tested = [], False
        for i, turn in enumerate(trajectory.turns):
            if not turn.call.ok or turn.error_kind in _NOT_RUN:
                continue
            if turn.call.name == self.test_tool:
                tested = True
            elif turn.call.name == self.submit_tool and not tested:
                hints.append(Hint(turn=i, text=text, detector=self.name))
        return hints


@dataclass(frozen=True, kw_only=True, slots=True)
class OverlongMessageDetector:
    """An assistant message longer than `max_chars` characters."""

    name: ClassVar[str] = "overlong"
    max_chars: int = 4000
    """Longest message that is not flagged."""

    def __post_init__(self) -> None:
        if self.max_chars < 1:
            raise ValueError(f"max_chars must be >= 1, got {self.max_chars}")

    def detect(self, trajectory: Trajectory) -> list[Hint]:
        text = f"Reminder: keep each message under {self.max_chars} characters: one tool call, nothing else."
        return [Hint(turn=i, text=text, detector=self.name) for i, turn in enumerate(trajectory.turns)
                if len(turn.text) > self.max_chars]


DETECTORS: dict[str, type[Detector]] = {
    UnknownToolDetector.name: UnknownToolDetector,
    MalformedCallDetector.name: MalformedCallDetector,
    TestEditDetector.name: TestEditDetector,
    UntestedSubmitDetector.name: UntestedSubmitDetector,
    OverlongMessageDetector.name: OverlongMessageDetector,
}
"""Registry name -> detector class (its options are keyword arguments)."""


def make_detector(name: str, **options: Any) -> Detector:
    """The detector registered as `name`; an unknown name lists the valid ones."""
    if name not in DETECTORS:
        raise ValueError(f"unknown detector {name!r}; valid detectors: {', '.join(sorted(DETECTORS))}")
    return DETECTORS[name](**options)


def default_detectors() -> list[Detector]:
    """Every built-in detector with its default options, in registry order."""
    return [make_detector(name) for name in DETECTORS]


def detect_all(trajectory: Trajectory, detectors: Sequence[Detector] | None = None,
               extra: Iterable[Hint | tuple[int, str]] = ()) -> list[Hint]:
    """The hints of all `detectors` (default: `default_detectors()`) and of `extra` (hints from
    outside, e.g. the reward-hacking monitor's flags, as Hints or (turn, text) pairs), one per turn,
    sorted by turn.

    Hints on the same turn merge into one: their distinct texts joined by newlines in the order
    given (detectors first, then `extra`) and their detector names joined by "+".
    """
    found = [hint for detector in (default_detectors() if detectors is None else detectors)
             for hint in detector.detect(trajectory)]
    found += [item if isinstance(item, Hint) else Hint(turn=item[0], text=item[1], detector="extra")
              for item in extra]
    by_turn: dict[int, list[Hint]] = {}
    for hint in found:
        if not 0 <= hint.turn < len(trajectory.turns):
            raise ValueError(f"hint turn {hint.turn} is out of range: the trajectory has "
                             f"{len(trajectory.turns)} turns")
        by_turn.setdefault(hint.turn, []).append(hint)
    merged = []
    for turn in sorted(by_turn):
        group = by_turn[turn]
        texts = list(dict.fromkeys(h.text for h in group))
        names = list(dict.fromkeys(h.detector for h in group))
        merged.append(Hint(turn=turn, text="\n".join(texts), detector="+".join(names)))
    return merged


def _assistant_turn(trajectory: Trajectory, hint: Hint) -> Turn:
    if not 0 <= hint.turn < len(trajectory.turns):
        raise ValueError(f"hint turn {hint.turn} is out of range: the trajectory has {len(trajectory.turns)} turns")
    turn = trajectory.turns[hint.turn]
    if not 0 <= turn.index < len(trajectory.messages) or trajectory.messages[turn.index].role != "assistant":
        raise ValueError(f"turn {hint.turn} points at message {turn.index}, which is not an assistant message")
    return turn


def teacher_context(trajectory: Trajectory, hint: Hint) -> tuple[list[Message], list[Message], str]:
    """(student prefix, teacher prefix, target) for the hinted turn.

    The student prefix is the conversation before the turn's assistant message, as the policy saw
    it. The teacher prefix is the same plus one ``hint`` message at its end, right before the
    assistant message: the hint is local to that turn and appears nowhere else. The target is the
    assistant text the policy wrote at that turn, the tokens the feedback KL covers.
    """
    turn = _assistant_turn(trajectory, hint)
    student = list(trajectory.messages[:turn.index])
    teacher = [*student, Message(role="hint", content=hint.text)]
    return student, teacher, turn.text


@dataclass(frozen=True, kw_only=True, slots=True)
class FeedbackExample:
    """Token sequences of one hinted turn for the byte-level trainer model.

    Each sequence is ``BOS, render_prefix(prefix), target, EOS``; the span ``[start, stop)`` covers
    the target and the EOS that ends the message, and holds the same tokens in both sequences.
    """

    hint: Hint
    """The hint this example teaches."""
    student_tokens: torch.Tensor
    """int64 [T_student]: the original context and the target."""
    teacher_tokens: torch.Tensor
    """int64 [T_teacher]: the hinted context and the same target."""
    student_span: tuple[int, int]
    """Positions of the target tokens in `student_tokens`."""
    teacher_span: tuple[int, int]
    """Positions of the target tokens in `teacher_tokens`."""


def _encode(prefix: Sequence[Message], target: str, tokenizer: ByteTokenizer,
            max_len: int | None) -> tuple[list[int], tuple[int, int]]:
    context = [tokenizer.bos_id, *render_prefix(prefix).encode("utf-8")]
    answer = [*target.encode("utf-8"), tokenizer.eos_id]
    if max_len is not None and len(context) + len(answer) > max_len:
        # Keep BOS and the end of the context: the hint sits right before the target, so it stays.
        keep = max_len - 1 - len(answer)
        if keep < 0:
            raise ValueError(f"the target ({len(answer)} tokens with EOS) does not fit in max_len {max_len}")
        context = [tokenizer.bos_id, *context[len(context) - keep:]]
    return context + answer, (len(context), len(context) + len(answer))


def encode_feedback(trajectory: Trajectory, hint: Hint, *, tokenizer: ByteTokenizer | None = None,
                    max_len: int | None = None) -> FeedbackExample:
    """Tokenize the student and teacher sequences of `hint` (see `FeedbackExample`).

    With `max_len` (the model's max_seq_len, say), a longer sequence loses the start of its context
    after BOS; the target itself must fit.
    """
    import torch

    from trainer.pretrain.data import ByteTokenizer

    tokenizer = tokenizer or ByteTokenizer()
    student, teacher, target = teacher_context(trajectory, hint)
    student_ids, student_span = _encode(student, target, tokenizer, max_len)
    teacher_ids, teacher_span = _encode(teacher, target, tokenizer, max_len)
    return FeedbackExample(hint=hint, student_tokens=torch.tensor(student_ids), teacher_tokens=torch.tensor(teacher_ids),
                           student_span=student_span, teacher_span=teacher_span)
