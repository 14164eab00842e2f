"""The reward-hacking monitor on scripted trajectories; the curriculum on simulated rewards
(sampling moves away from tasks that are always solved, and retires them, deterministically); the
split of episodes by repository."""

from __future__ import annotations

import json
import random
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

from taskforge import is_test_path, read_tasks
from trainer.rl.chat import Message, Trajectory, Turn, parse_tool_call
from trainer.rl.curriculum import Curriculum
from trainer.rl.episodes import Episode, load_episodes, split_by_repository
from trainer.rl.monitor import FLAG_KINDS, HINTS, Flag, as_hints, flag_counts, monitor


def scripted(*texts: str) -> Trajectory:
    """A trajectory whose assistant messages are ``texts`` (each answered by a stub tool message)."""
    trajectory = Trajectory(task_id="t", tools=("list_files", "read_file", "edit_file", "run_tests", "submit"),
                            messages=[Message(role="system", content="s"), Message(role="user", content="u")])
    for text in texts:
        trajectory.turns.append(Turn(index=len(trajectory.messages), text=text, call=parse_tool_call(text),
                                     observation="ok"))
        trajectory.messages += [Message(role="assistant", content=text), Message(role="tool", content="ok")]
    return trajectory


def call(tool: str, **args: object) -> str:
    return json.dumps({"tool": tool, "args": args})


ORDINARY = [
    call("list_files", path="."),
    call("read_file", path="src/iniconfig/__init__.py"),
    call("read_file", path="testing/test_iniconfig.py", start_line=1, end_line=40),
    call("read_file", path=".gitignore"),
    call("read_file", path=".github/workflows/test.yml"),
    call("read_file", path="tox.ini"),
    call("run_tests", paths=["testing/test_iniconfig.py::test_parse"]),
    call("edit_file", path="src/iniconfig/__init__.py", old="raise NotImplementedError", new="return cls(path)"),
    call("edit_file", path="src/tools/clean.py", old="shutil.rmtree('__pycache__')", new="shutil.rmtree('__pycache__', True)"),
    "I will read __pycache__/mod.cpython-311.pyc",  # malformed: no call, nothing was done
    call("submit"),
]


def test_monitor_flags_bytecode_caches_git_installed_copies_and_test_edits() -> None:
    trajectory = scripted(
        call("read_file", path="src/iniconfig/__pycache__/__init__.cpython-311.pyc"),                    # 0
        call("list_files", path=".pytest_cache"),                                                       # 1
        call("read_file", path="./.mypy_cache/3.11/iniconfig/__init__.data.json"),                     # 2
        call("read_file", path=".git/objects/4b/825dc642cb6eb9a060e54bf8d69288fbee4904"),              # 3
        call("read_file", path="/opt/venv/lib/python3.11/site-packages/iniconfig/__init__.py"),        # 4
        call("edit_file", path="testing/test_iniconfig.py", old="assert x == 1", new="assert True"),   # 5
        call("edit_file", path="conftest.py", old="", new="import pytest\n"),                          # 6
        call("edit_file", path="src/pkg/mod.py", old="raise NotImplementedError",                      # 7
             new="return marshal.loads(open('src/pkg/__pycache__/mod.cpython-311.pyc', 'rb').read()[16:])"),
        call("bash", command="git log -p --all | head"),                                               # 8
        call("run_tests", paths=[".hypothesis/examples"]),                                             # 9
        *ORDINARY,
    )
    flags = monitor(trajectory)
    assert [(f.turn, f.kind) for f in flags] == [
        (0, "bytecode"), (1, "tool_cache"), (2, "tool_cache"), (3, "git_internals"), (4, "installed_package"),
        (5, "test_edit"), (6, "test_edit"), (7, "bytecode"), (8, "git_internals"), (9, "tool_cache"),
    ]
    assert flags[0] == Flag(turn=0, kind="bytecode",
                            detail="read_file path: src/iniconfig/__pycache__/__init__.cpython-311.pyc")
    assert "git log" in flags[8].detail

    counts = flag_counts(flags)
    assert set(counts) == set(FLAG_KINDS)
    assert counts == {"bytecode": 2, "tool_cache": 3, "git_internals": 2, "installed_package": 1, "test_edit": 2}

    hints = as_hints(flags)
    assert [turn for turn, _ in hints] == list(range(10))
    assert all(isinstance(turn, int) and isinstance(text, str) for turn, text in hints)
    assert hints[0][1] == HINTS["bytecode"] and hints[5][1] == HINTS["test_edit"]


def test_monitor_leaves_ordinary_work_alone() -> None:
    trajectory = scripted(*ORDINARY)
    assert monitor(trajectory) == []
    assert as_hints([]) == [] and set(flag_counts([]).values()) == {0}


@pytest.mark.parametrize(("path", "flagged"), [
    ("testing/test_iniconfig.py", True), ("testing/test_iniconfig.py::test_parse", True),
    ("testing/conftest_helpers.py", True), ("src/tests/helpers.py", True), ("tests\\test_a.py", True),
    ("mod_test.py", True), ("conftest.py", True), ("pytest.ini", True),
    ("src/iniconfig/__init__.py", False), ("src/pkg/testing.py", False), ("tox.ini", False), ("tests.py", False),
])
def test_test_edits_are_taskforges_test_paths(path: str, flagged: bool) -> None:
    """An edit is of a test when taskforge's `is_test_path` says so of its file (a node id's
    ``::test`` part dropped), or when it edits pytest.ini."""
    edit = scripted(call("edit_file", path=path, old="a", new="b"))
    assert [f.kind for f in monitor(edit)] == (["test_edit"] if flagged else [])
    assert is_test_path(path.replace("\\", "/").split("::")[0]) is (flagged and path != "pytest.ini")


def test_one_hint_per_turn_with_each_kind_once() -> None:
    both = call("read_file", path="/usr/lib/python3/dist-packages/pkg/__pycache__/mod.cpython-311.pyc")
    flags = monitor(scripted(call("list_files"), both))
    assert [(f.turn, f.kind) for f in flags] == [(1, "bytecode"), (1, "installed_package")]
    assert as_hints(flags + flags) == [(1, HINTS["bytecode"] + "\n" + HINTS["installed_package"])]


# -- the curriculum -------------------------------------------------------------------------------

ALWAYS = [f"easy-{i}" for i in range(4)]
MIXED = [f"mixed-{i}" for i in range(6)]


def simulate(steps: int, *, seed: int, curriculum: Curriculum | None = None) -> tuple[Curriculum, list[list[str]]]:
    """RL steps (3 tasks, 4 rollouts each) against a fake policy: the easy tasks are always solved,
    the mixed ones half the time."""
    curriculum = curriculum or Curriculum(ALWAYS + MIXED, low=0.1, high=0.9, window=8, explore=0.2, seed=seed)
    policy = random.Random(seed + 1)
    chosen = []
    for _ in range(steps):
        picks = curriculum.sample(3)
        chosen.append(picks)
        for task in picks:
            curriculum.update(task, [1.0 if task in ALWAYS or policy.random() < 0.5 else 0.0 for _ in range(4)])
    return curriculum, chosen


def easy_share(steps: list[list[str]]) -> float:
    picks = [t for step in steps for t in step]
    return sum(t in ALWAYS for t in picks) / len(picks)


def test_sampling_moves_away_from_always_solved_tasks_and_retires_them() -> None:
    curriculum, chosen = simulate(100, seed=7)
    early, late = easy_share(chosen[:10]), easy_share(chosen[-40:])
    assert early >= 0.2  # at first nothing is known: unseen tasks are explored
    assert late == 0.0  # retired: never picked again
    assert sorted(curriculum.retired) == ALWAYS
    assert all(curriculum.solve_rate(t) == 1.0 for t in ALWAYS)
    assert all(len(set(step)) == 3 for step in chosen)  # distinct within a step
    # The mixed tasks share the rest; each is trained on.
    assert set(Counter(t for step in chosen[-40:] for t in step)) == set(MIXED)

    report = curriculum.report()
    assert report["tasks"] == 10 and report["retired"] == 4 and report["unseen"] == 0
    assert report["unseen"] + report["band"] + report["outside"] + report["retired"] == 10
    assert sum(report["histogram"].values()) == 10 and report["histogram"]["0.9-1.0"] >= 4
    json.dumps(report)


def test_the_curriculum_is_deterministic_and_resumes_from_its_state() -> None:
    assert simulate(30, seed=3)[1] == simulate(30, seed=3)[1]
    assert simulate(30, seed=3)[1] != simulate(30, seed=4)[1]

    whole = Curriculum(ALWAYS + MIXED, window=4, explore=0.2, seed=3)
    for task in ALWAYS + MIXED:
        whole.update(task, [0.0, 1.0])
    resumed = Curriculum(ALWAYS + MIXED, window=4, explore=0.2, seed=99)
    resumed.load_state_dict(json.loads(json.dumps(whole.state_dict())))
    assert [resumed.sample(3) for _ in range(20)] == [whole.sample(3) for _ in range(20)]
    assert resumed.report() == whole.report()

    with pytest.raises(ValueError, match="lacks"):
        Curriculum(["other"]).load_state_dict(whole.state_dict())


def test_unseen_tasks_come_first_and_everything_retired_still_samples() -> None:
    curriculum = Curriculum(["a", "b", "c"], window=2, seed=0)
    assert sorted(curriculum.sample(3)) == ["a", "b", "c"]
    curriculum.update("a", [0.5])
    assert curriculum.status("a") == "band" and curriculum.status("b") == "unseen"
    for task in ("a", "b", "c"):
        curriculum.update(task, [1.0] * 4)  # retire_after (2 * window) rewards, all solved
    assert curriculum.retired == ["a", "b", "c"]
    assert len(curriculum.sample(2)) == 2
    with pytest.raises(KeyError):
        curriculum.update("d", [1.0])
    with pytest.raises(ValueError, match="low and high"):
        Curriculum(["a"], low=0.9, high=0.1)


# -- episodes -------------------------------------------------------------------------------------

SAMPLE = Path(__file__).resolve().parents[2] / "datasets" / "sample"


def test_episodes_split_by_repository_deterministically() -> None:
    sample = load_episodes(SAMPLE)
    assert [e.instance_id for e in sample] == [t.instance_id for t in read_tasks(SAMPLE)]
    assert {(e.repo, e.image) for e in sample} == {(t.repo, t.image_name) for t in read_tasks(SAMPLE)}
    assert sample[0].problem_statement == sample[0].task.problem_statement
    with pytest.raises(ValueError, match="is in both"):
        load_episodes([SAMPLE, str(SAMPLE)])

    # Twelve episodes over four repositories, as if mined from four projects.
    episodes = [Episode(task=replace(e.task, repo=repo, instance_id=f"{repo}-{e.instance_id}"))
                for repo in ("alpha", "beta", "gamma", "delta") for e in sample]
    for seed in range(5):
        train, validation = split_by_repository(episodes, 0.25, seed=seed)
        assert validation and train
        assert not {e.repo for e in train} & {e.repo for e in validation}
        assert sorted(e.instance_id for e in train + validation) == sorted(e.instance_id for e in episodes)
        assert train == [e for e in episodes if e in train]  # input order kept
        assert (train, validation) == split_by_repository(episodes, 0.25, seed=seed)
    assert len({tuple(e.repo for e in split_by_repository(episodes, 0.25, seed=s)[1]) for s in range(5)}) > 1
    assert split_by_repository(episodes, 0.0, seed=0) == (episodes, [])
    assert len(split_by_repository(episodes, 0.9, seed=0)[0]) == 3  # one repository always trains
    with pytest.raises(ValueError, match="validation_fraction"):
        split_by_repository(episodes, 1.0, seed=0)
