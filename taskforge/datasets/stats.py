"""What a task folder holds, in numbers: ``taskforge inspect`` and the inspection notebook.

:func:`summarize` reads a verified task folder (and its ``rewards/`` subfolder when there is one)
into a :class:`Summary`; :func:`render` prints it as plain-text tables; :func:`plot` draws its
histograms into a matplotlib ``Figure`` and :func:`write_plots` saves one PNG per histogram.
matplotlib is imported only by the plotting functions (the ``datasets`` extra).
"""

from __future__ import annotations

import json
import math
import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from taskforge.datasets.manifest import MANIFEST, Manifest
from taskforge.errors import TaskforgeError

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["MINE_SUMMARY", "REWARDS_DIR", "Distribution", "RewardSummary", "Summary", "plot", "read_rejections",
           "render", "render_rejections", "summarize", "write_plots"]

REWARDS_DIR = "rewards"
"""The subfolder of a task folder that holds reward rows for its tasks."""
MINE_SUMMARY = "mine-summary.json"
"""What ``taskforge mine`` writes beside the shards: per repository its counts, every rejected
candidate with its reason and detail, and the repositories that failed."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Distribution:
    """Numbers of one kind, one per task (or per reward row)."""

    label: str
    """What they measure, with the unit."""
    values: tuple[float, ...]

    @property
    def count(self) -> int:
        return len(self.values)

    def quantile(self, q: float) -> float:
        """The ``q`` quantile (nearest rank); nan when empty."""
        if not self.values:
            return float("nan")
        ordered = sorted(self.values)
        return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]

    def row(self) -> list[str]:
        if not self.values:
            return [self.label, "0", "-", "-", "-", "-", "-"]
        mean = statistics.fmean(self.values)
        return [self.label, str(self.count), _num(min(self.values)), _num(self.quantile(0.5)), _num(mean),
                _num(self.quantile(0.9)), _num(max(self.values))]


@dataclass(kw_only=True, slots=True)
class RewardSummary:
    """The reward rows of a task folder that scored its tasks as they are."""

    rows: int
    tasks: int
    """Distinct tasks scored."""
    by_candidate: dict[str, tuple[int, float, float]]
    """candidate_id → (rows, mean reward, fraction with reward 1)."""
    status: Counter[str]
    tampered: int
    reward: Distribution
    total_s: Distribution
    other: int = 0
    """Rows left out: they scored another version of their task (``task_sha256``), or a task the
    folder no longer holds."""


@dataclass(kw_only=True, slots=True)
class Summary:
    """A task folder in numbers."""

    directory: Path
    manifest: Manifest
    tasks: int
    per_repo: dict[str, Counter[str]]
    """repo → tasks per strategy."""
    per_strategy: Counter[str]
    fail_to_pass: Distribution
    pass_to_pass: Distribution
    lines_removed: Distribution
    validation_s: Distribution
    """Per task, the seconds of every validation run it recorded (affected tests, start state)."""
    audit: Counter[str]
    """clean / findings / not audited, and how many had the image scanned."""
    audit_s: Distribution
    difficulty: dict[str, dict[str, Distribution]] = field(default_factory=dict)
    """strategy (and ``all``) -> difficulty column -> its distribution (:mod:`taskforge.difficulty`)."""
    bands: dict[str, Counter[str]] = field(default_factory=dict)
    """strategy (and ``all``) -> tasks per difficulty band."""
    rewards: RewardSummary | None = None
    distributions: list[Distribution] = field(default_factory=list)
    """Every distribution above (and the rewards'), in display order."""


def _num(value: float) -> str:
    if math.isnan(value):
        return "-"
    return f"{value:.0f}" if float(value).is_integer() and abs(value) >= 1 else f"{value:.3g}"


def _validation_seconds(validation: str) -> float:
    """The seconds of every validation run a task recorded: the ``*_s`` lists of its JSON."""
    data = json.loads(validation) if validation else {}
    return float(sum(sum(v) for k, v in data.items() if k.endswith("_s") and isinstance(v, list)))


def _audit_status(audit: str) -> tuple[str, bool, float]:
    if not audit:
        return "not audited", False, 0.0
    data = json.loads(audit)
    return ("clean" if data["clean"] else "findings"), bool(data.get("image_scanned")), float(data["seconds"])


def _rewards(directory: Path, versions: dict[str, str]) -> RewardSummary | None:
    from taskforge.datasets.reader import open as open_dataset

    if not (directory / MANIFEST).exists():
        return None
    columns = ["instance_id", "candidate_id", "reward", "status", "tampered", "total_s", "task_sha256"]
    everything = open_dataset(directory).to_table(columns=columns).to_pydict()
    keep = [versions.get(i) == v for i, v in zip(everything["instance_id"], everything["task_sha256"], strict=True)]
    table = {c: [x for x, k in zip(everything[c], keep, strict=True) if k] for c in columns}
    by: dict[str, list[float]] = {}
    for candidate, reward in zip(table["candidate_id"], table["reward"], strict=True):
        by.setdefault(candidate, []).append(reward)
    return RewardSummary(
        rows=len(table["reward"]),
        tasks=len(set(table["instance_id"])),
        by_candidate={c: (len(r), statistics.fmean(r), sum(x == 1.0 for x in r) / len(r)) for c, r in sorted(by.items())},
        status=Counter(table["status"]),
        tampered=sum(table["tampered"]),
        reward=Distribution(label="reward", values=tuple(table["reward"])),
        total_s=Distribution(label="scoring time (s)", values=tuple(table["total_s"])),
        other=keep.count(False),
    )


def summarize(directory: Path | str) -> Summary:
    """Read a task folder (checked against its manifest) into a :class:`Summary`."""
    import pyarrow.compute as pc

    from taskforge.datasets.reader import open as open_dataset
    from taskforge.datasets.reader import read_tasks, verify

    directory = Path(directory)
    manifest = verify(directory)
    if manifest.kind != "tasks":
        raise TaskforgeError(f"{directory} holds {manifest.kind}, not tasks", reason="wrong_kind")
    columns = ["repo", "strategy", "FAIL_TO_PASS", "PASS_TO_PASS", "lines_removed", "validation", "audit",
               *_DIFFICULTY, "solve_rate"]
    table = open_dataset(directory, digests=False).to_table(columns=columns)
    data = table.select(["repo", "strategy", "lines_removed", "validation", "audit", *_DIFFICULTY,
                         "solve_rate"]).to_pydict()
    per_repo: dict[str, Counter[str]] = {}
    for repo, strategy in zip(data["repo"], data["strategy"], strict=True):
        per_repo.setdefault(repo, Counter())[strategy] += 1
    audits = [_audit_status(a) for a in data["audit"]]
    audit = Counter(status for status, _, _ in audits)
    audit["image scanned"] = sum(scanned for _, scanned, _ in audits)
    summary = Summary(
        directory=directory,
        manifest=manifest,
        tasks=table.num_rows,
        per_repo=dict(sorted(per_repo.items())),
        per_strategy=Counter(data["strategy"]),
        fail_to_pass=Distribution(label="FAIL_TO_PASS tests",
                                  values=tuple(pc.list_value_length(table["FAIL_TO_PASS"]).to_pylist())),
        pass_to_pass=Distribution(label="PASS_TO_PASS tests",
                                  values=tuple(pc.list_value_length(table["PASS_TO_PASS"]).to_pylist())),
        lines_removed=Distribution(label="lines removed", values=tuple(data["lines_removed"])),
        validation_s=Distribution(label="validation time (s)",
                                  values=tuple(_validation_seconds(v) for v in data["validation"])),
        audit=audit,
        audit_s=Distribution(label="audit time (s)", values=tuple(s for status, _, s in audits if status != "not audited")),
        rewards=_rewards(directory / REWARDS_DIR, {t.instance_id: t.grading_sha256 for t in read_tasks(directory)}
                         if (directory / REWARDS_DIR / MANIFEST).exists() else {}),
    )
    summary.difficulty, summary.bands = _difficulty(data)
    summary.distributions = [summary.fail_to_pass, summary.pass_to_pass, summary.lines_removed,
                             summary.validation_s, summary.audit_s, summary.difficulty["all"]["difficulty"]]
    if summary.rewards is not None:
        summary.distributions += [summary.rewards.reward, summary.rewards.total_s]
    return summary


_DIFFICULTY = ("removed_symbols", "removed_files", "call_depth", "fail_to_pass_count", "public_api_removed", "difficulty")


def _difficulty(data: dict[str, list[Any]]) -> tuple[dict[str, dict[str, Distribution]], dict[str, Counter[str]]]:
    from taskforge.difficulty import BANDS, in_band

    strategies = sorted(set(data["strategy"]))
    groups = {"all": list(range(len(data["strategy"]))),
              **{s: [i for i, t in enumerate(data["strategy"]) if t == s] for s in strategies}}
    columns = [*_DIFFICULTY[:5], "lines_removed", "difficulty"]
    labels = {"removed_symbols": "symbols removed", "removed_files": "files changed", "call_depth": "call depth",
              "fail_to_pass_count": "FAIL_TO_PASS tests", "public_api_removed": "public API removed (0/1)",
              "lines_removed": "lines removed", "difficulty": "difficulty estimate"}
    distributions = {
        group: {c: Distribution(label=labels[c], values=tuple(float(data[c][i]) for i in rows)) for c in columns}
        for group, rows in groups.items()
    }
    solved = [data["solve_rate"][i] for i in groups["all"] if data["solve_rate"][i] is not None]
    if solved:
        distributions["all"]["solve_rate"] = Distribution(label="solve rate", values=tuple(solved))
    bands = {group: Counter(next((b for b, bounds in BANDS.items() if in_band(data["difficulty"][i], bounds)), "?")
                            for i in rows) for group, rows in groups.items()}
    return distributions, bands


def _table(title: str, headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = [[str(c) for c in headers], *[[str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]

    def line(row: list[str]) -> str:
        # The first column is text (left-aligned); the others are numbers (right-aligned).
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True)))

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([title, line(cells[0]), rule, *(line(r) for r in cells[1:])])


def render(summary: Summary) -> str:
    """The summary as plain-text tables."""
    m = summary.manifest
    strategies = sorted(summary.per_strategy)
    parts = [
        (f"{summary.directory}: {summary.tasks} tasks in {len(m.shards)} shard{'' if len(m.shards) == 1 else 's'} "
         f"({sum(s.bytes for s in m.shards) / 1e6:.2f} MB), schema v{m.schema_version}, "
         f"{len(m.runs)} run(s), taskforge {m.runs[-1].versions.get('taskforge', '?') if m.runs else '?'}"
         + (f"; {sum(r.shard.rows for r in m.retracted)} task(s) retracted in {len(m.retracted)} shard(s): "
            + "; ".join(sorted({r.reason for r in m.retracted})) if m.retracted else "")),
        _table("tasks per repository", ["repository", "tasks", *strategies],
               [[repo, sum(c.values()), *(c[s] for s in strategies)] for repo, c in summary.per_repo.items()]),
        _table("tasks per strategy", ["strategy", "tasks", "share"],
               [[s, n, f"{n / summary.tasks:.0%}"] for s, n in sorted(summary.per_strategy.items())]),
        _table("distributions", ["per task", "n", "min", "median", "mean", "p90", "max"],
               [d.row() for d in (summary.fail_to_pass, summary.pass_to_pass, summary.lines_removed,
                                  summary.validation_s, summary.audit_s)]),
        _table("audit", ["status", "tasks"], [[k, v] for k, v in summary.audit.items()]),
    ]
    if summary.difficulty:
        from taskforge.difficulty import BANDS

        bands = list(BANDS)
        groups = ["all", *strategies]
        parts.append(_table("difficulty bands (taskforge.difficulty.BANDS)", ["strategy", *bands],
                            [[g, *(summary.bands[g][b] for b in bands)] for g in groups]))
        for column in ("difficulty", "removed_symbols", "removed_files", "call_depth", "lines_removed"):
            parts.append(_table(f"{summary.difficulty['all'][column].label} by strategy",
                                ["strategy", "n", "min", "median", "mean", "p90", "max"],
                                [[g, *summary.difficulty[g][column].row()[1:]] for g in groups]))
        if "solve_rate" in summary.difficulty["all"]:
            parts.append(_table("measured solve rates (taskforge rate)", ["per task", "n", "min", "median", "mean",
                                                                         "p90", "max"],
                                [summary.difficulty["all"]["solve_rate"].row()]))
    r = summary.rewards
    if r is None:
        parts.append(f"rewards: none (no {REWARDS_DIR}/ folder)")
    else:
        other = (f" ({r.other} more scored another version of their task, or a task no longer here: left out)"
                 if r.other else "")
        parts.append(_table(f"rewards: {r.rows} rows for {r.tasks} tasks, {r.tampered} tampered{other}",
                            ["candidate", "rows", "mean reward", "reward 1"],
                            [[c, n, f"{mean:.3f}", f"{solved:.0%}"] for c, (n, mean, solved) in r.by_candidate.items()]))
        parts.append(_table("reward status", ["status", "rows"], sorted(r.status.items())))
        parts.append(_table("reward distributions", ["per row", "n", "min", "median", "mean", "p90", "max"],
                            [r.reward.row(), r.total_s.row()]))
    return "\n\n".join(parts) + "\n"


def read_rejections(directory: Path | str) -> list[dict[str, str]]:
    """Every rejected candidate of the folder's mining runs (``mine-summary.json``): source,
    target, strategy, reason and detail; a repository that failed as a whole is one row with
    target ``-``."""
    path = Path(directory) / MINE_SUMMARY
    if not path.is_file():
        raise TaskforgeError(f"{directory} has no {MINE_SUMMARY}: it was not written by taskforge mine",
                             reason="no_mine_summary")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise TaskforgeError(f"{path} is not valid JSON: {err}", reason="corrupt_summary") from err
    rows = []
    for repository in data.get("repositories", []):
        for rejected in repository.get("rejected", []):
            rows.append({"source": repository["source"], **{k: str(rejected.get(k, "")) for k in
                                                             ("target", "strategy", "reason", "detail")}})
    for source, failure in sorted(data.get("failures", {}).items()):
        reason = failure.rsplit("[", 1)[-1].rstrip("]") if failure.endswith("]") else "failed"
        rows.append({"source": source, "target": "-", "strategy": "-", "reason": reason, "detail": failure})
    return rows


def render_rejections(rows: Sequence[dict[str, str]], *, width: int = 100) -> str:
    """The rejections as a plain-text table (details cut to ``width`` characters), then counts by reason."""
    headers = ["source", "target", "strategy", "reason", "detail"]
    cells = [headers, *[[row[h] if h != "detail" else _cut(row[h], width) for h in headers] for row in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers) - 1)]

    def line(row: list[str]) -> str:
        return "  ".join([*(c.ljust(w) for c, w in zip(row[:-1], widths, strict=True)), row[-1]]).rstrip()

    reasons = Counter(row["reason"] for row in rows)
    table = [f"{len(rows)} rejection(s)", line(cells[0]), "  ".join("-" * w for w in [*widths, 6]),
             *(line(r) for r in cells[1:])]
    return "\n".join([*table, "", _table("by reason", ["reason", "count"], reasons.most_common())]) + "\n"


def _cut(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def plot(distribution: Distribution, *, bins: int = 20) -> Figure:
    """A histogram of one distribution (a matplotlib ``Figure``, drawn without pyplot)."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=(5, 3.2), layout="constrained")
    axes = figure.subplots()
    integral = all(float(v).is_integer() for v in distribution.values)
    if integral and distribution.values:
        low, high = int(min(distribution.values)), int(max(distribution.values))
        step = max(1, (high - low + 1) // bins)
        edges: int | list[float] = [x - 0.5 for x in range(low, high + step + 1, step)]
    else:
        edges = bins
    axes.hist(distribution.values, bins=edges, color="#4c72b0", edgecolor="white")
    axes.set_xlabel(distribution.label)
    axes.set_ylabel("count")
    axes.set_title(f"{distribution.label} (n={distribution.count})")
    return figure


def write_plots(summary: Summary, out: Path) -> list[Path]:
    """One PNG histogram per distribution into ``out``; returns the files."""
    import re

    out.mkdir(parents=True, exist_ok=True)
    written = []
    for distribution in summary.distributions:
        if not distribution.values:
            continue
        path = out / (re.sub(r"[^a-z0-9]+", "_", distribution.label.lower()).strip("_") + ".png")
        plot(distribution).savefig(path, dpi=100)
        written.append(path)
    return written
