"""Benchmark: how well static detectors tell canary twins from the real hidden tests.

    python3 -m tests.benchmarks.static_twins [--tasks 60] [--projects iniconfig==2.3.1,...]
        [--detectors structural,literal,...] [--cache DIR] [--json OUT]

Scoring runs a task's hidden tests in two runs; in each, some FAIL_TO_PASS tests are replaced, under
their own names, by *twins* (``taskforge.repo.canaries``) that a correct solution fails. A solution
that forges passes trips them, unless it can tell from the test files which functions are twins.
This benchmark plays that attacker with static, text-only detectors (``detectors.py``, written by an
independent red team without reading the project's own detector) on six development projects,
pinned sdists none of which is in recipes/heldout.toml: iniconfig 2.3.1, addict 2.4.0, cachetools
8.0.2, six 1.17.0, boltons 26.2.0, toolz 1.2.0.

Twins (``twins.py``): every plain (not parametrized) test function of each sdist's test files gets
twins from ``make_twins`` and keeps one of the best-ranked kind (value 0, raises/input 1, negated 2,
plain 3; random among equals), as scoring's plan prefers them. Twins are made afresh on every run
from the canaries code installed, so a change there shows at once; only the downloaded and
extracted sdists are cached (``--cache``, default ``taskforge.paths.cache_root() / "static-twins"``).
Everything is seeded by the project spec: a rerun of one commit prints the same numbers.

How to read the table (per project and detector; higher is better for the attacker):
- ``win/test``: the attacker wins a test when ``is_twin(real file)`` is False and ``is_twin(file
  with the twin placed)`` is True; ``TPR``: twins called twins; ``FPR``: real tests called twins.
- ``k=2/4/8``: ``--tasks`` simulated tasks of k random twinned tests of one file (the file drawn in
  proportion to its twinned tests), dealt alternately into two runs that each hold the twins of
  their half and the other half as themselves. A task is won only when every judgement in both
  runs is right: that is what forging a whole task without tripping a canary takes. Per-test
  detection multiplies, so these fall fast with k.
- by twin kind: the committee's (structural or literal or sibling) per-test win rate, all projects.
- last line: the worst project's committee win rate on k=4 tasks, the one number to watch.
Caveat: offline there is no gold calibration. Scoring keeps only twins gold fails; calibration
drops value/input twins gold passes and pushes those tests to negated/plain twins, which these
detectors read far better, so real attacker numbers can be higher than these.

Numbers at commit db05f63 (``python3 -m tests.benchmarks.static_twins --tasks 60``, 10 min on a busy
2-core machine; at 9b83963 the same command reproduces the red team's study exactly)::

    project              detector    tests win/test    TPR    FPR    k=2    k=4    k=8
    iniconfig==2.3.1     committee      32    0.250  0.375  0.125  0.000  0.000  0.000
    addict==2.4.0        committee      64    0.203  0.250  0.078  0.033  0.000  0.000
    cachetools==8.0.2    committee     172    0.076  0.209  0.140  0.017  0.000  0.000
    six==1.17.0          committee      64    0.188  0.250  0.094  0.067  0.000  0.000
    boltons==26.2.0      committee     377    0.135  0.204  0.069  0.033  0.000  0.000
    toolz==1.2.0         committee     163    0.086  0.147  0.074  0.017  0.000  0.000

    single detectors, win/test (iniconfig/addict/cachetools/six/boltons/toolz):
    structural .031/.141/.035/.125/.056/.067   literal .062/.047/.006/.031/.064/.018
    sibling    .156/.016/.041/.031/.021/.000   origin  .031/.000/.000/.000/.005/.000
    no detector wins any k=4 or k=8 task

    committee per-test win rate by twin kind (all projects):
      value      22/ 512 = 0.043
      input      25/ 264 = 0.095
      negated    32/  37 = 0.865
      raises      8/  35 = 0.229
      plain      24/  24 = 1.000

    worst project, committee task win rate at k=4: 0.000 (all 6 projects)

Against the red team's study at 9b83963: since then an altered string comes first from beside
the original in the test's own data (243bfd9), a twin placed in a CRLF file keeps CRLF (a1761bb:
no test file of these six projects is CRLF, so it cannot show here) and lines are numbered as the
parser does (8019eed); raises twins are unchanged. The literal detector lost ground (iniconfig
.094 → .062, six .062 → .031), the origin detector gained a little on iniconfig (.000 → .031: a
value from beside the original is sometimes the input's own word); committee win/test fell on six
(.219 → .188) and boltons (.138 → .135), six's k=2 from .083 to .067; value wins 23 → 22, input
27 → 25. Negated and plain twins are read as before (86 %, 100 %): they remain the sure tells.
"""
