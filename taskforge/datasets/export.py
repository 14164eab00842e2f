"""Exports of a task folder: SWE-bench instances (JSONL) and a Hugging Face dataset folder.

SWE-bench stores every instance field as a string; FAIL_TO_PASS and PASS_TO_PASS are JSON lists
*inside* strings. :func:`swebench_instance` maps a task row onto those fields:

- ``hints_text`` is empty (a mined task has no issue thread);
- ``created_at`` is when the task's shard was written (from the manifest), ISO 8601 UTC;
- ``environment_setup_commit`` is ``base_commit``: the environment is built from the project's
  metadata, which the start state keeps, and it is the one commit the task's repository has;
- ``image_name`` (SWE-smith, SWE-Gym and mini-swe-agent read it) and ``image`` (swebench 5's
  harness reads it) name the image to run the task in: with ``--images`` the per-task image
  (:mod:`taskforge.mining.images`: the start state at ``/testbed``), which the harnesses need;
  without, the environment image, which holds no repository;
- ``eval_script``, ``log_parser`` and ``eval_type`` are what swebench 5 runs and grades with
  (:mod:`taskforge.datasets.swebench`); FAIL_TO_PASS and PASS_TO_PASS hold the ids its log parser
  reads (node ids with whitespace escaped), and a task whose ids collide that way is refused.

``--out`` naming a ``.jsonl`` file gets that file; any other ``--out`` is a folder holding
``test.jsonl`` and a dataset card whose ``configs`` header declares it as split ``test``: what
``load_dataset(OUT, split="test")`` reads, so the folder is a dataset name for SWE-bench's harness
(``--dataset_name OUT --split test``) and for mini-swe-agent (``--subset OUT --split test``).

The Hugging Face export writes ``data/train-*.parquet`` (task rows with the task schema),
``rewards/train-*.parquet`` when the folder has rewards, the source manifest as
``taskforge-manifest.json``, and a dataset card (``README.md``) whose YAML header declares the
configs, so ``datasets.load_dataset(OUT)`` reads it. Both exports are written atomically: a
failed export leaves nothing behind.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from taskforge.datasets.manifest import (
    MANIFEST,
    Manifest,
    fsync_dir,
    read_manifest,
    write_atomic,
)
from taskforge.datasets.schema import TASKS
from taskforge.datasets.stats import REWARDS_DIR, summarize
from taskforge.errors import TaskforgeError

__all__ = ["HARNESS_FIELDS", "SWEBENCH_FIELDS", "SWEBENCH_SPLIT", "export_hf", "export_swebench", "swebench_instance"]

SWEBENCH_FIELDS = (
    "repo", "instance_id", "base_commit", "patch", "test_patch", "problem_statement", "hints_text", "created_at",
    "version", "FAIL_TO_PASS", "PASS_TO_PASS", "environment_setup_commit",
)
"""SWE-bench's instance fields (all strings), in its order."""
HARNESS_FIELDS = ("image", "eval_script", "log_parser", "eval_type")
"""What swebench 5's harness reads of an instance besides SWEBENCH_FIELDS."""
SWEBENCH_SPLIT = "test"
"""The split a folder export declares (the split SWE-bench's datasets have)."""


def _created_at(manifest: Manifest) -> dict[str, str]:
    """Shard name → when it was written."""
    return {s.name: s.written_at for s in manifest.shards}


def swebench_instance(row: Mapping[str, Any], *, created_at: str, image_name: str | None = None) -> dict[str, str]:
    """One task row as a SWE-bench instance (every field a string), plus ``image_name`` and the
    fields swebench 5's harness runs it with (HARNESS_FIELDS)."""
    from taskforge.datasets.swebench import EVAL_TYPE, LOG_PARSER, eval_script, harness_ids

    ids = harness_ids(row["instance_id"], [*row["FAIL_TO_PASS"], *row["PASS_TO_PASS"]])
    image = image_name or row["image_name"]
    return {
        "repo": row["repo"],
        "instance_id": row["instance_id"],
        "base_commit": row["base_commit"],
        "patch": row["patch"],
        "test_patch": row["test_patch"],
        "problem_statement": row["problem_statement"],
        "hints_text": "",
        "created_at": created_at,
        "version": row["version"],
        "FAIL_TO_PASS": json.dumps([ids[t] for t in row["FAIL_TO_PASS"]]),
        "PASS_TO_PASS": json.dumps([ids[t] for t in row["PASS_TO_PASS"]]),
        "environment_setup_commit": row["base_commit"],
        "image_name": image,
        "image": image,
        "eval_script": eval_script(row),
        "log_parser": LOG_PARSER,
        "eval_type": EVAL_TYPE,
    }


def _rows_with_shard(directory: Path) -> tuple[Manifest, list[tuple[str, dict[str, Any]]]]:
    import pyarrow.parquet as pq

    from taskforge.datasets.reader import verify

    manifest = verify(directory)
    if manifest.kind != TASKS.name:
        raise TaskforgeError(f"{directory} holds {manifest.kind}, not tasks", reason="wrong_kind")
    return manifest, [(s.name, row) for s in manifest.shards for row in pq.read_table(directory / s.name).to_pylist()]


def export_swebench(directory: Path, out: Path, *, images: Mapping[str, str] | None = None) -> int:
    """Write the folder's tasks as SWE-bench instances: JSONL at ``out`` if it names a ``.jsonl``
    file, else a new folder ``out`` with ``test.jsonl`` and a card (see the module docstring);
    ``images`` maps instance_id → the image to name instead of the row's. Returns the number of
    instances."""
    manifest, rows = _rows_with_shard(directory)
    written = _created_at(manifest)
    lines = [
        json.dumps(swebench_instance(row, created_at=written[shard], image_name=(images or {}).get(row["instance_id"])),
                   ensure_ascii=False)
        for shard, row in rows
    ]
    data = "".join(f"{line}\n" for line in lines).encode()
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.suffix == ".jsonl":
        write_atomic(out, data)
        return len(lines)
    if out.exists():
        raise TaskforgeError(f"{out} already exists; export into a new folder (or name a .jsonl file)",
                             reason="output_exists")
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
    try:
        write_atomic(staging / f"{SWEBENCH_SPLIT}.jsonl", data)
        write_atomic(staging / "README.md", _swebench_card(len(lines)).encode())
        staging.chmod(0o755)
        os.rename(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    fsync_dir(out.parent)
    return len(lines)


def _swebench_card(count: int) -> str:
    return f"""---
configs:
- config_name: default
  data_files:
  - split: {SWEBENCH_SPLIT}
    path: {SWEBENCH_SPLIT}.jsonl
tags:
- swe-bench
- taskforge
---

# taskforge tasks as SWE-bench instances

{count} instances, exported by `taskforge export --format swebench`. Each carries SWE-bench's fields
and what swebench 5's harness runs it with (`image`, `eval_script`, `log_parser`, `eval_type`);
`image_name` is the same image, for mini-swe-agent and SWE-smith-style tools.

```bash
python -m swebench.harness.run_evaluation --dataset_name THIS_FOLDER --split {SWEBENCH_SPLIT} --predictions_path gold --run_id check
mini-extra swebench --subset THIS_FOLDER --split {SWEBENCH_SPLIT} --output preds/ ...
```
"""


def _yaml_configs(with_rewards: bool) -> str:
    configs = ["configs:", "- config_name: default", "  default: true", "  data_files:", "  - split: train",
               "    path: data/train-*.parquet"]
    if with_rewards:
        configs += ["- config_name: rewards", "  data_files:", "  - split: train", "    path: rewards/train-*.parquet"]
    return "\n".join(configs)


def _card(directory: Path, manifest: Manifest, *, images: bool, rewards: Manifest | None) -> str:
    summary = summarize(directory)
    m = manifest
    repos = "\n".join(f"| {repo} | {sum(c.values())} | " + ", ".join(f"{s} {n}" for s, n in sorted(c.items())) + " |"
                      for repo, c in summary.per_repo.items())
    columns = "\n".join(f"| `{name}` | {code} | {doc} |" for name, code, doc in TASKS.columns)
    dist = "\n".join("| " + " | ".join(d.row()) + " |" for d in summary.distributions)
    runs = "\n".join(f"- run {i}, started {r.started_at}: " + ", ".join(f"{k} {v}" for k, v in sorted(r.versions.items()))
                     for i, r in enumerate(m.runs))
    shards = "\n".join(f"| {s.name} | {s.rows} | `{s.sha256}` |" for s in m.shards)
    sources = "\n".join(f"- `{source}`: {info.get('tasks', '?')} tasks" for source, info in sorted(m.done.items()))
    image_note = ("Each task has its own image (`image_name`): the task's start state at `/workspace` (owned by the "
                  "sandbox user, uid 10001) on top of its environment image, audited for remnants of the removed "
                  "code." if images else
                  "`image_name` is the task's environment image: its dependencies, no code. Copy the start state "
                  "into `/workspace` (`taskforge checkout DIR INSTANCE_ID DEST` rebuilds it from the row).")
    reward_note = (f"The `rewards` config holds {rewards.rows} reward rows (schema v{rewards.schema_version})."
                   if rewards else "There are no reward rows.")
    return f"""---
pretty_name: taskforge tasks
tags:
- code
- swe-bench
- taskforge
{_yaml_configs(rewards is not None)}
---

# taskforge tasks

{summary.tasks} verifiable coding tasks from {len(summary.per_repo)} repositories, mined by
taskforge from real projects: a feature is removed, and the tests that
exercised it (FAIL_TO_PASS) must pass again while the others (PASS_TO_PASS) keep passing.

```python
import datasets
tasks = datasets.load_dataset("PATH/TO/THIS/FOLDER", split="train")
```

{image_note} {reward_note}

## Counts

| repository | tasks | by strategy |
|---|---|---|
{repos}

| per task | n | min | median | mean | p90 | max |
|---|---|---|---|---|---|---|
{dist}

## Schema

Task rows, schema version {m.schema_version}. Columns follow SWE-bench's names where the concept
exists; FAIL_TO_PASS and PASS_TO_PASS are lists of pytest node ids.

| column | type | description |
|---|---|---|
{columns}

## Provenance

Exported from a taskforge dataset folder created {m.created_at}, last written {m.updated_at}
(its manifest is `taskforge-manifest.json`).

Recipe:

```json
{json.dumps(m.recipe, indent=2, sort_keys=True)}
```

Runs:

{runs}

Sources:

{sources or "- (not recorded)"}

Shards of the source folder:

| shard | rows | sha256 |
|---|---|---|
{shards}
"""


def export_hf(directory: Path, out: Path, *, images: Mapping[str, str] | None = None) -> Path:
    """Write the folder as a Hugging Face dataset folder ``out`` (which must not exist yet)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from taskforge.datasets.reader import open as open_dataset

    if out.exists():
        raise TaskforgeError(f"{out} already exists; export into a new folder", reason="output_exists")
    manifest, rows = _rows_with_shard(directory)
    if images:
        rows = [(shard, {**row, "image_name": images.get(row["instance_id"], row["image_name"])}) for shard, row in rows]
    rewards_dir = directory / REWARDS_DIR
    rewards = read_manifest(rewards_dir) if (rewards_dir / MANIFEST).exists() else None
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
    try:
        (staging / "data").mkdir()
        # One file per source shard, under the names the Hub gives split files.
        for index, shard in enumerate(manifest.shards):
            table = pa.Table.from_pylist([row for name, row in rows if name == shard.name], schema=TASKS.schema())
            pq.write_table(table, staging / "data" / f"train-{index:05d}-of-{len(manifest.shards):05d}.parquet",
                           compression="zstd", compression_level=9, row_group_size=64)
        if rewards is not None:
            (staging / "rewards").mkdir()
            pq.write_table(open_dataset(rewards_dir).to_table(), staging / "rewards" / "train-00000-of-00001.parquet",
                           compression="zstd", row_group_size=1024)
        shutil.copyfile(directory / MANIFEST, staging / "taskforge-manifest.json")
        (staging / "README.md").write_text(_card(directory, manifest, images=bool(images), rewards=rewards),
                                           encoding="utf-8")
        for path in staging.rglob("*"):
            if path.is_file():
                with path.open("rb") as f:
                    os.fsync(f.fileno())
        staging.chmod(0o755)
        os.rename(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    fsync_dir(out.parent)
    return out
