"""`taskforge-train`: run a training recipe.

    taskforge-train --recipe recipes/train/tiny-cpu.toml [--set train.steps=50 ...]

A recipe whose world size is 1 runs in this process. A larger single-node recipe becomes a
torchrun launch (`python -m torch.distributed.run --standalone --nproc-per-node N -m trainer.cli
...`, with torchrun's agent running in this process), whose workers land back here and train.
Multi-node recipes are launched with torchrun on every node by the cluster's scheduler (see
recipes/train/README.md).

Everything else is in the recipe; `--set` overrides one recipe key (TOML value syntax). `run`
dispatches the recipe's mode to its loop: `trainer.pretrain.loop.pretrain` or
`trainer.rl.loop.rl_train`.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from trainer.recipe import Recipe

__all__ = ["main", "run", "torchrun_arguments"]


def torchrun_arguments(nproc_per_node: int, argv: Sequence[str]) -> list[str]:
    """torchrun's arguments for running `python -m trainer.cli argv` on `nproc_per_node` local
    workers: `python -m torch.distributed.run` followed by these is the same launch by hand."""
    return ["--standalone", f"--nproc-per-node={nproc_per_node}", "-m", "trainer.cli", *argv]


def _under_torchrun() -> bool:
    return "TORCHELASTIC_RUN_ID" in os.environ


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="taskforge-train", description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipe", type=Path, required=True, help="TOML recipe (see recipes/train/)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a recipe key, e.g. --set train.steps=50 (repeatable)")
    args = parser.parse_args(argv)
    arguments = list(sys.argv[1:] if argv is None else argv)

    from trainer.pretrain.data import check_sources
    from trainer.recipe import load_recipe

    try:
        recipe = load_recipe(args.recipe, args.overrides)
        if recipe.data is not None:
            check_sources(recipe.data)
    except (ValueError, OSError) as err:
        parser.exit(2, f"taskforge-train: {args.recipe}: {err}\n")

    if recipe.parallel.world_size > 1 and not _under_torchrun():
        if recipe.launch.nnodes > 1:
            parser.exit(2, f"taskforge-train: {args.recipe} spans {recipe.launch.nnodes} nodes; start"
                           " `torchrun ... -m trainer.cli` on each node (recipes/train/README.md)\n")
        # torchrun's agent runs in this process (torch is imported already); it starts the workers.
        from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
        from torch.distributed.run import main as torchrun

        try:
            torchrun(torchrun_arguments(recipe.launch.nproc_per_node, arguments))
        except ChildFailedError as err:
            print(f"taskforge-train: {err}", file=sys.stderr)
            return 1
        return 0

    run(recipe)
    if _under_torchrun():
        _exit_quickly()
    return 0


def run(recipe: Recipe) -> None:
    """Train the recipe's mode in this process, inside torchrun's process group when world_size > 1."""
    from trainer.runtime import process_group

    with process_group(recipe):
        if recipe.mode == "pretrain":
            from trainer.pretrain.loop import pretrain

            pretrain(recipe)
        elif recipe.mode == "rl":
            from trainer.rl.loop import rl_train

            rl_train(recipe)
        else:
            raise ValueError(f"mode {recipe.mode!r} has no trainer")


def _exit_quickly() -> None:
    """Leave every live object out of the interpreter's last garbage collection. With torch loaded
    that collection takes seconds per process, and a launch waits for all of its workers. Only for
    torchrun workers, which exit next; never for an in-process caller."""
    import gc

    gc.freeze()


if __name__ == "__main__":
    raise SystemExit(main())
