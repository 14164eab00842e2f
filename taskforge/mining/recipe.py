"""Mining recipes: a TOML file loaded into typed configs.

    out = "tasks"                               # a folder, or a pyarrow filesystem URI (s3://...)
    sources = ["pypi:iniconfig==2.3.1"]         # and/or
    sources_file = "../shared/corpus/projects.tsv"   # relative to the recipe file

    [mine]        MineConfig       (taskforge.mining.config)          tasks and attempts per repository, seed, ...
    [candidates]  CandidateConfig  (taskforge.mining.candidates)  strategies, test-count bounds
    [sandbox]     SandboxLimits    (taskforge.sandbox)     overrides of sandboxes/security.toml
    [ray]         RayConfig        (this module)           cluster address, retries, concurrency
    [llm]         LLMConfig        (taskforge.llm.client)         endpoint and budgets of [mine] agent/writer = "llm"

A sources file is either a text file with one source per line (``#`` comments) or a TSV with
``name`` and ``version`` columns (the corpus list), read as ``pypi:NAME==VERSION``. Unknown keys
and values of the wrong type are errors that name the key (``taskforge.config.typed_config``, the
loader training recipes use too).
"""

from __future__ import annotations

import csv
import dataclasses
import tomllib
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from taskforge.config import checked_value, typed_config
from taskforge.llm.client import LLMConfig
from taskforge.mining.candidates import CandidateConfig
from taskforge.mining.config import MineConfig
from taskforge.sandbox import SandboxLimits

__all__ = ["MiningRecipe", "RayConfig", "load_recipe", "read_sources", "recipe_from_dict"]


@dataclass(kw_only=True, slots=True)
class RayConfig:
    """Where and how repositories run."""

    address: str = "local"
    """"local" starts an embedded Ray on this machine; "auto" or "ray://host:port" joins a running
    cluster; "inline" runs repositories one after another in this process, without Ray."""
    max_retries: int = 2
    """Times a repository is run again after its worker process died."""
    max_concurrent: int = 0
    """Repositories in flight at once; 0: as many as the cluster's CPUs allow."""
    num_cpus: float = 0.0
    """CPUs one repository declares; 0: the sandbox's ``cpus`` (a repository runs one sandbox at a time)."""
    local_cpus: int = 0
    """CPUs the embedded local Ray may use; 0: all of this machine's."""

    def __post_init__(self) -> None:
        if not (self.address in ("local", "auto", "inline") or self.address.startswith(("ray://", "http://"))
                or ":" in self.address):
            raise ValueError(f"ray.address must be local, auto, inline, ray://HOST:PORT or HOST:PORT; got {self.address!r}")
        for name in ("max_retries", "max_concurrent", "local_cpus"):
            if getattr(self, name) < 0:
                raise ValueError(f"ray.{name} must be at least 0, got {getattr(self, name)}")
        if self.num_cpus < 0:
            raise ValueError(f"ray.num_cpus must be at least 0, got {self.num_cpus}")


@dataclass(kw_only=True, slots=True)
class MiningRecipe:
    """One mining run, fully typed; ``to_dict()`` is what the dataset's manifest records."""

    out: str
    """Dataset folder, or a pyarrow filesystem URI."""
    sources: list[str] = field(default_factory=list)
    """Every source, in order (``sources`` then the lines of ``sources_file``)."""
    mine: MineConfig = field(default_factory=MineConfig)
    sandbox: SandboxLimits = field(default_factory=SandboxLimits.load)
    ray: RayConfig = field(default_factory=RayConfig)
    name: str = ""

    def __post_init__(self) -> None:
        if not self.sources:
            raise ValueError("the recipe names no sources (sources = [...] or sources_file = ...)")
        self.sources = list(dict.fromkeys(self.sources))

    def to_dict(self) -> dict[str, Any]:
        mine = dataclasses.asdict(self.mine)
        return {"name": self.name, "out": self.out, "sources": list(self.sources), "mine": mine,
                "llm": mine.pop("llm"), "sandbox": dataclasses.asdict(self.sandbox), "ray": dataclasses.asdict(self.ray)}

    @property
    def repo_cpus(self) -> float:
        return self.ray.num_cpus or self.sandbox.cpus


def read_sources(path: Path) -> list[str]:
    """Sources listed in a file: one per line, or a TSV with name and version columns."""
    text = path.read_text(encoding="utf-8")
    first = text.splitlines()[0] if text.strip() else ""
    if "\t" in first and "name" in first.split("\t"):
        rows = csv.DictReader(text.splitlines(), delimiter="\t")
        return [f"pypi:{row['name']}=={row['version']}" if row.get("version") else f"pypi:{row['name']}" for row in rows]
    return [line.split("#", 1)[0].strip() for line in text.splitlines() if line.split("#", 1)[0].strip()]


_TOP = {"name", "out", "sources", "sources_file", "mine", "candidates", "sandbox", "ray", "llm"}


def recipe_from_dict(data: Mapping[str, Any], *, base_dir: Path = Path()) -> MiningRecipe:
    """A recipe from its TOML table; ``sources_file`` is relative to ``base_dir``."""
    unknown = set(data) - _TOP
    if unknown:
        raise ValueError(f"unknown key(s) {sorted(unknown)} in the recipe; valid: {sorted(_TOP)}")
    if "out" not in data:
        raise ValueError("the recipe has no `out` (a dataset folder or URI)")
    sources = [str(s) for s in data.get("sources", [])]
    if "sources_file" in data:
        sources += read_sources(base_dir / str(data["sources_file"]))
    candidates = typed_config(CandidateConfig, data.get("candidates", {}), "candidates")
    mine_table = dict(data.get("mine", {}))
    if "llm" in mine_table:
        raise ValueError("write the LLM settings as a top-level [llm] table, not under [mine]")
    llm = typed_config(LLMConfig, data.get("llm", {}), "llm")
    mine = typed_config(MineConfig, mine_table, "mine", candidates=candidates, llm=llm)
    sandbox_table = checked_value("[sandbox]", data.get("sandbox", {}), dict[str, Any])
    known = {f.name for f in dataclasses.fields(SandboxLimits)}
    if set(sandbox_table) - known:
        raise ValueError(f"unknown key sandbox.{sorted(set(sandbox_table) - known)[0]}; valid keys: {', '.join(sorted(known))}")
    hints = typing.get_type_hints(SandboxLimits)
    sandbox = SandboxLimits.load(None, **{k: checked_value(f"sandbox.{k}", v, hints[k]) for k, v in sandbox_table.items()})
    ray = typed_config(RayConfig, data.get("ray", {}), "ray")
    return MiningRecipe(name=str(data.get("name", "")), out=str(data["out"]), sources=sources, mine=mine,
                        sandbox=sandbox, ray=ray)


def load_recipe(path: Path) -> MiningRecipe:
    """Read a recipe file (see the module docstring)."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as err:
        raise ValueError(f"{path}: not valid TOML: {err}") from err
    recipe = recipe_from_dict(data, base_dir=path.parent)
    if not recipe.name:
        recipe.name = path.stem
    return recipe
