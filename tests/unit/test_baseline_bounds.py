"""What the baseline decides for the rest of mining: how long a validation run may take."""

from __future__ import annotations

from taskforge.mining.baseline import run_timeout


def test_a_run_may_take_five_times_the_whole_suite_within_the_ceiling() -> None:
    assert run_timeout(60.0, 1800.0) == 300.0
    # A quick suite still gets two minutes (a container's start, a slow machine).
    assert run_timeout(2.0, 1800.0) == 120.0
    # The configured ceiling stays the ceiling, for a slow suite and for a tight recipe.
    assert run_timeout(1000.0, 1800.0) == 1800.0
    assert run_timeout(2.0, 30.0) == 30.0
