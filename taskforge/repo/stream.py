"""The outcome stream as the scorer reads it: what the scoring supervisor
(``taskforge/guest/supervisor.py``) read, as root, from the pipe the report plugin writes each
test's outcome to as it ends, and the guard each finding as it makes it."""

from __future__ import annotations

import json
from dataclasses import dataclass

__all__ = ["OutcomeStream", "parse_stream"]


@dataclass(frozen=True, kw_only=True, slots=True)
class OutcomeStream:
    """What the scoring supervisor (``taskforge/guest/supervisor.py``) read, as root, from the pipe
    pytest's plugin writes each test's outcome to as the test finishes."""

    outcomes: dict[str, str]
    """Node id → outcome (``passed`` only when setup, call and teardown passed), first line each."""
    finish: int | None
    """pytest's exit status as its session ended; None when the session never ended."""
    faults: tuple[str, ...]
    """What does not belong in an honest stream: a test reported twice, a second session end, a
    line that is not one of the plugin's, more than the supervisor keeps."""
    driver_exit: int | None = None
    guard: tuple[str, ...] | None = None
    """The scoring guard's findings: those it sent as it made them (``{"noted": ...}``) and those it
    sent when the session ended; None when it sent none."""


def parse_stream(text: str, *, overflow: bool = False, closed: bool = True) -> OutcomeStream:
    """The supervisor's raw stream as :class:`OutcomeStream`."""
    outcomes: dict[str, str] = {}
    finish: int | None = None
    guard: tuple[str, ...] | None = None
    noted: list[str] = []
    faults: list[str] = []
    for number, line in enumerate(text.splitlines(), 1):
        try:
            record = json.loads(line)
        except ValueError:
            faults.append(f"line {number} of the outcome stream is not JSON")
            continue
        if isinstance(record, dict) and set(record) == {"t", "o"} and isinstance(record["t"], str) \
                and isinstance(record["o"], str):
            if record["t"] in outcomes or finish is not None:
                faults.append(f"{record['t']} reported {'again' if record['t'] in outcomes else 'after the session ended'}")
            else:
                outcomes[record["t"]] = record["o"]
        elif isinstance(record, dict) and set(record) == {"finish"} and isinstance(record["finish"], int):
            if finish is not None:
                faults.append("the session ended twice")
            finish = record["finish"]
        elif isinstance(record, dict) and set(record) == {"noted"} and isinstance(record["noted"], str):
            noted.append(record["noted"])  # a finding the guard sent as it made it
        elif isinstance(record, dict) and set(record) == {"guard"} and isinstance(record["guard"], list) \
                and all(isinstance(f, str) for f in record["guard"]):
            if guard is not None:
                faults.append("the guard reported twice")
            guard = tuple(record["guard"])
        else:
            faults.append(f"line {number} of the outcome stream is not the plugin's")
    if noted:  # what the guard noted counts whether or not its last record says it again
        guard = tuple(dict.fromkeys([*(guard or ()), *noted]))
    if overflow:
        faults.append("the outcome stream overflowed")
    if not closed:
        faults.append("the outcome stream never closed")
    return OutcomeStream(outcomes=outcomes, finish=finish, faults=tuple(faults), guard=guard)
