"""What the baseline decides for the rest of mining: how long a validation run may take."""

from __future__ import annotations

from taskforge.mining.baseline import run_timeout, timing_tests


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
