"""What the baseline decides for the rest of mining: how long a validation run may take, which
tests time what they test, which ids hold the date of the run."""

from __future__ import annotations

from datetime import datetime, timezone

from taskforge.mining.baseline import date_dependent_ids, run_timeout, timing_tests


def test_a_run_may_take_five_times_the_whole_suite_within_the_ceiling() -> None:
    assert run_timeout(60.0, 1800.0) == 300.0
    # A quick suite still gets two minutes (a container's start, a slow machine).
    assert run_timeout(2.0, 1800.0) == 120.0
    # The configured ceiling stays the ceiling, for a slow suite and for a tight recipe.
    assert run_timeout(1000.0, 1800.0) == 1800.0
    assert run_timeout(2.0, 30.0) == 30.0


def test_tests_that_time_what_they_test_are_found_in_their_source(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A complexity fit, timeit or the high-resolution clock in a test, or in a helper it calls (of
    its module, or imported from a module of the repository), makes it a timing test; reading
    ``time.time`` for a timestamp does not."""
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_speed.py").write_text('''
import time
import timeit

import big_o


def linear(f):
    return timeit.timeit(f, number=10) < 1.0


class TestSpeed:
    def test_fit(self):
        best, _ = big_o.big_o(len, big_o.datagen.n_, max_n=100)
        assert best <= big_o.complexities.Linear

    def test_through_a_helper(self):
        assert self.quick()

    def quick(self):
        start = time.perf_counter()
        return time.perf_counter() - start < 1


def test_helper_of_the_module(n):
    assert linear(lambda: sum(range(n)))


def test_a_timestamp():
    assert time.time() > 0


def test_plain():
    assert 1 + 1 == 2
''')
    (tmp_path / "tests" / "test_broken.py").write_text("def test_x(:\n")
    # A helper module beside the tests, which the tests import three ways.
    (tmp_path / "tests" / "__init__.py").write_text("")
    (tmp_path / "tests" / "perf_utils.py").write_text('''
import time


def _measure(f):
    started = time.perf_counter()
    f()
    return time.perf_counter() - started


def assert_near_linear(f, sizes):
    assert max(_measure(lambda: f(n)) for n in sizes) < 1.0


def sizes():
    return [10, 100]
''')
    (tmp_path / "tests" / "test_imports.py").write_text('''
import tests.perf_utils as pu
from tests.perf_utils import assert_near_linear, sizes

from .perf_utils import assert_near_linear as quick


def test_from_import():
    assert_near_linear(range, sizes())


def test_module_import():
    pu.assert_near_linear(range, [1])


def test_relative_import():
    quick(range, [1])


def test_untimed_helper():
    assert sizes() == [10, 100]
''')
    ids = ["tests/test_speed.py::TestSpeed::test_fit", "tests/test_speed.py::TestSpeed::test_through_a_helper",
           "tests/test_speed.py::test_helper_of_the_module[1]", "tests/test_speed.py::test_helper_of_the_module[2]",
           "tests/test_speed.py::test_a_timestamp", "tests/test_speed.py::test_plain", "tests/test_broken.py::test_x",
           "docs/index.rst::index.rst"]
    imported = ["tests/test_imports.py::test_from_import", "tests/test_imports.py::test_module_import",
                "tests/test_imports.py::test_relative_import", "tests/test_imports.py::test_untimed_helper"]
    assert timing_tests(tmp_path, ids + imported) == set(ids[:4]) | set(imported[:3])


def test_ids_that_hold_the_date_or_time_of_the_run_are_found() -> None:
    """A parametrization over ``date.today()`` or ``time.time()`` has other ids another day; a
    date that is not the run's is the test's data."""
    now = datetime(2026, 12, 5, 23, 30, tzinfo=timezone.utc)
    dated = [
        "tests/test_objects.py::test_to_string[case7-2026-12-05]",
        "tests/test_objects.py::test_to_string[20261206]",  # tomorrow in another time zone
        "tests/test_dates.py::TestFormat::test_short[04/12/2026]",
        "tests/test_dates.py::test_stamp[1796513400]",
        "tests/test_dates.py::test_stamp[1796513400.25]",
        "tests/test_dates.py::test_2026_12_05_report",
        "tests/test_dates.py::test_x[2026-12-5]",  # (year, month, day) ints, joined unpadded
        "tests/test_dates.py::test_due[2026-12-12]",  # today + timedelta(days=7)
        "tests/test_dates.py::test_stamp[1796472000000]",  # milliseconds
        "tests/test_dates.py::test_long[Dec 05, 2026]",
        "tests/test_dates.py::test_short[05/12/26]",
    ]
    fixed = [
        "tests/test_objects.py::test_to_string[case6-2000-01-01]",
        "tests/test_dates.py::test_stamp[1000000000]",
        "tests/test_dates.py::test_big[17965134001]",
        "tests/2026-12-05/test_x.py::test_a",  # the file's path is the project's
        "docs/news/2026-12-05.rst::2026-12-05.rst",  # so is a text file of doctests'
        "tests/test_dates.py::test_big[9120261205]",
        "tests/test_dates.py::test_hash[ab20261205cd]",
        "tests/test_version.py::test_parse[1.2.3]",
        "tests/test_dates.py::test_release[2026-06-01]",  # half a year away: the test's data
    ]
    assert date_dependent_ids([*dated, *fixed], now) == set(dated)


def test_a_test_that_sleeps_in_a_loop_on_a_clock_is_a_timing_test(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A debounce test polls the project's own clock until a deadline, sleeping between calls:
    how many calls fit depends on the load. A loop that sleeps without reading a clock does not
    count, nor does a clock read without a loop."""
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_wait.py").write_text('''
import time

import pkg as _


def test_debounce_max_wait():
    start = _.now()
    while _.now() < start + 40:
        _.debounced()
        time.sleep(0.01)
    assert _.calls


def test_retries():
    for _attempt in range(3):
        time.sleep(0.01)
    while queue:
        time.sleep(0.01)


def test_stamp():
    assert _.now() > 0
''')
    ids = [f"tests/test_wait.py::{name}" for name in ("test_debounce_max_wait", "test_retries", "test_stamp")]
    assert timing_tests(tmp_path, ids) == {ids[0]}
