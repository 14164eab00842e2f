"""The corpus yield report: what mining many repositories gave, one row per repository, as Markdown.

``taskforge report DIR`` reads what the commands wrote into a mined folder: ``mine-summary.json``
(per repository its tests, candidates, attempts, tasks, rejections; the repositories that failed),
the task rows, and optionally ``taskforge validate --report`` output and reward folders of
``taskforge score --gold --empty`` runs. Every repository below the task target gets a one-line
cause, derived from its own numbers: why it failed, or that its candidates or attempts ran out
and what rejected them.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from taskforge.datasets.reader import read_rows, read_tasks
from taskforge.datasets.stats import MINE_SUMMARY
from taskforge.errors import TaskforgeError

__all__ = ["ProjectRow", "YieldReport", "build_report", "render_report"]


@dataclass(kw_only=True, slots=True)
class ProjectRow:
    source: str
    baseline: bool
    tests: int = 0
    passing: int = 0
    seed_dependent: int = 0
    """Tests whose ids depend on the hash seed or on the date of the run."""
    load_sensitive: int = 0
    candidates: int = 0
    attempted: int = 0
    refused: int = 0
    tasks: int = 0
    rejections: dict[str, int] = field(default_factory=dict)
    failure: str = ""
    cause: str = ""
    valid: int = 0
    """Tasks that ``taskforge validate`` confirmed (when its report was given)."""


@dataclass(kw_only=True, slots=True)
class YieldReport:
    rows: list[ProjectRow]
    target: int
    validated: int | None = None
    """Tasks validate confirmed, of ``tasks`` (None: no validate report given)."""
    tasks: int = 0
    scoring: list[dict[str, Any]] = field(default_factory=list)
    """Per scoring run: gold and empty counts, how many scored as wanted, and missing outcomes."""

    @property
    def with_baseline(self) -> int:
        return sum(r.baseline for r in self.rows)

    @property
    def at_target(self) -> int:
        return sum(r.tasks >= self.target and (self.validated is None or r.valid >= self.target) for r in self.rows)


def _cause(row: ProjectRow, target: int, max_attempts: int) -> str:
    if row.failure and not row.tasks:
        return row.failure
    if row.tasks >= target:
        return ""
    top = ", ".join(f"{reason} {count}" for reason, count in Counter(row.rejections).most_common(3))
    rejected = f"; rejected: {top}" if top else ""
    if row.candidates == 0:
        return (f"no candidates: no function of the package is exercised by between 1 and 25% of its "
                f"{row.passing} stable passing tests")
    if row.attempted < max_attempts:
        refused = f" ({row.refused} more refused before any run)" if row.refused else ""
        return f"candidates ran out after {row.attempted} attempts of {row.candidates}{refused}{rejected}"
    return f"max_attempts ({max_attempts}) reached{rejected}"


def build_report(
    directory: Path | str, *, target: int = 10, validation: Path | None = None, rewards: Sequence[Path] = ()
) -> YieldReport:
    """The yield report of a mined folder (see the module docstring)."""
    directory = Path(directory)
    summary_path = directory / MINE_SUMMARY
    if not summary_path.is_file():
        raise TaskforgeError(f"{directory} has no {MINE_SUMMARY}: it was not written by taskforge mine",
                             reason="no_mine_summary")
    summary = json.loads(summary_path.read_text(encoding="utf-8"))
    tasks = read_tasks(directory)
    source_of = {t.instance_id: t.source for t in tasks}
    versions = {t.instance_id: t.grading_sha256 for t in tasks}
    # A check or a reward row counts only for the task as it is (one mined again since is unchecked).
    checks: Mapping[str, Any] = {
        i: c for i, c in (json.loads(validation.read_text(encoding="utf-8")) if validation else {}).items()
        if isinstance(c, dict) and c.get("task_sha256") == versions.get(i)}
    max_attempts = _max_attempts(directory)
    rows: list[ProjectRow] = []
    for repository in summary.get("repositories", []):
        row = ProjectRow(source=repository["source"], baseline=True, tests=repository.get("tests", 0),
                         passing=repository.get("passing", 0), seed_dependent=repository.get("seed_dependent", 0) + repository.get("date_dependent", 0),
                         load_sensitive=repository.get("load_sensitive", 0),
                         candidates=repository["candidates"], attempted=repository["attempted"],
                         refused=int(repository.get("refused", 0)),
                         tasks=repository["tasks"], rejections=dict(repository.get("rejections", {})))
        row.valid = sum(1 for i, c in checks.items() if source_of.get(i) == row.source and c.get("ok"))
        rows.append(row)
    mined = {row.source: row for row in rows}
    for source, failure in summary.get("failures", {}).items():
        if source in mined:  # mined before; a later run of it failed for a reason that kept its tasks
            mined[source].failure = f"its tasks are from an earlier run; the last run failed: {failure}"
            continue
        reason = failure.rsplit("[", 1)[-1].rstrip("]") if failure.endswith("]") else ""
        # A repository whose baseline ran but in which no test passes reliably did run one.
        rows.append(ProjectRow(source=source, baseline=reason == "no_passing_tests", failure=failure))
    for row in rows:
        row.cause = _cause(row, target, max_attempts)
        if row.failure and row.tasks:
            row.cause = "; ".join(c for c in (row.cause, row.failure) if c)
    rows.sort(key=lambda r: r.source.lower())
    report = YieldReport(rows=rows, target=target, tasks=len(tasks),
                         validated=sum(1 for i, c in checks.items() if i in source_of and c.get("ok"))
                         if validation else None)
    for folder in rewards:
        report.scoring.append(_scoring(folder, versions))
    return report


def _max_attempts(directory: Path) -> int:
    from taskforge.datasets.manifest import read_manifest

    recipe = read_manifest(directory).recipe
    return int(recipe.get("config", {}).get("max_attempts", 60)) if isinstance(recipe, dict) else 60


def _scoring(folder: Path, versions: Mapping[str, str]) -> dict[str, Any]:
    """Gold and empty rows of ``folder`` scored against the tasks as they are (``versions``:
    instance_id → grading_sha256)."""
    rows = [r for r in read_rows(folder) if versions.get(r["instance_id"]) == r["task_sha256"]]
    instance_ids = set(versions)
    result: dict[str, Any] = {"folder": str(folder)}
    for candidate, wanted in (("gold", 1.0), ("empty", 0.0)):
        mine = [r for r in rows if r["candidate_id"] == candidate and r["instance_id"] in instance_ids]
        result[candidate] = len(mine)
        result[f"{candidate}_as_wanted"] = sum(1 for r in mine if r["status"] == "ok" and r["reward"] == wanted)
        result[f"{candidate}_missing"] = sum(
            1 for r in mine for outcome in json.loads(r["outcomes"] or "{}").values() if outcome == "missing")
    result["tasks_unscored"] = len(instance_ids - {r["instance_id"] for r in rows if r["candidate_id"] == "gold"})
    return result


def render_report(report: YieldReport, *, title: str = "Corpus yield report", preamble: str = "") -> str:
    """The report as Markdown: the targets, then one row per repository."""
    n = len(report.rows)
    lines = [f"# {title}", ""]
    if preamble:
        lines += [preamble.strip(), ""]
    pct = (lambda k: f"{k} of {n} ({k / n:.0%})") if n else (lambda k: str(k))
    lines += [
        f"- repositories: {n}; baseline ran: {pct(report.with_baseline)}; "
        f"yielded {report.target} valid tasks: {pct(report.at_target)}",
        f"- tasks written: {report.tasks}"
        + ("" if report.validated is None else f"; hold under `taskforge validate`: {report.validated} of {report.tasks}"),
    ]
    for number, scoring in enumerate(report.scoring, 1):
        lines.append(
            f"- scoring run {number}: gold 1.0 on {scoring['gold_as_wanted']} of {scoring['gold']}, empty 0.0 on "
            f"{scoring['empty_as_wanted']} of {scoring['empty']}; expected tests `missing` in gold runs: "
            f"{scoring['gold_missing']}; tasks not scored: {scoring['tasks_unscored']}")
    lines += ["", "| project | baseline | tests | passing | seed/date-dep. | load-sens. | candidates | attempted | tasks | valid | "
              "rejections by reason | cause (below target) |",
              "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|---|---|"]
    for row in report.rows:
        rejections = ", ".join(f"{k} {v}" for k, v in sorted(row.rejections.items(), key=lambda kv: -kv[1]))
        cause = row.cause.replace("|", "\\|").replace("\n", " ")[:240]
        valid = str(row.valid) if report.validated is not None else "-"
        lines.append(f"| {row.source.removeprefix('pypi:')} | {'yes' if row.baseline else 'no'} | {row.tests} | "
                     f"{row.passing} | {row.seed_dependent} | {row.load_sensitive} | {row.candidates} | {row.attempted} | {row.tasks} | "
                     f"{valid} | {rejections or '-'} | {cause or '-'} |")
    return "\n".join(lines) + "\n"
