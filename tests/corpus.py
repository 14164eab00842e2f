"""The shared corpus of real projects (../shared/corpus/projects.tsv), for tests and benchmarks."""

from __future__ import annotations

import csv
from dataclasses import dataclass
from functools import cache
from pathlib import Path

CORPUS_TSV = Path(__file__).resolve().parents[2] / "shared" / "corpus" / "projects.tsv"


@dataclass(frozen=True, kw_only=True, slots=True)
class CorpusProject:
    name: str
    version: str
    test_count: int
    pass_count: int
    wall_s: float

    @property
    def source(self) -> str:
        return f"pypi:{self.name}=={self.version}"


@cache
def corpus() -> dict[str, CorpusProject]:
    with CORPUS_TSV.open() as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    return {
        row["name"]: CorpusProject(
            name=row["name"],
            version=row["version"],
            test_count=int(row["test_count"]),
            pass_count=int(row["pass_count"]),
            wall_s=float(row["wall_s"]),
        )
        for row in rows
    }
