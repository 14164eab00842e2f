"""Run a function on several real processes joined in a gloo process group on the CPU.

`run_gloo(world_size, fn, *args)` starts `world_size` processes, calls
`fn(rank, world_size, *args)` in each after `init_process_group("gloo")`, and returns the
per-rank results (anything `torch.save` can write). A failure in any rank raises in the caller
with the traceback of every rank that raised. The group meets through a file store in a temporary folder, so no TCP
port is picked and parallel test runs cannot collide.
"""

from __future__ import annotations

import multiprocessing
import tempfile
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["run_gloo"]

_PRELOAD = ["torch", "torch.distributed", "torch.distributed.fsdp", "torch.distributed.checkpoint"]


def _entry(rank: int, world_size: int, store_dir: str, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
    import torch
    import torch.distributed as dist

    # Eight ranks share two cores: one thread each keeps them from fighting over the CPU.
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"file://{store_dir}/store", rank=rank, world_size=world_size
    )
    try:
        result = fn(rank, world_size, *args)
        torch.save(result, Path(store_dir) / f"result-{rank}.pt")
    except BaseException:
        # The launcher reports whichever rank died first, often a peer of the one that failed.
        (Path(store_dir) / f"error-{rank}.txt").write_text(traceback.format_exc())
        raise
    finally:
        dist.destroy_process_group()


def run_gloo(world_size: int, fn: Callable[..., Any], *args: Any) -> list[Any]:
    """Results of `fn(rank, world_size, *args)` on each of `world_size` gloo ranks, in rank order.

    `fn` must be importable by name (a module-level function).
    """
    import torch
    from torch.multiprocessing.spawn import start_processes

    # A fork server that has imported torch once forks the ranks: eight spawned interpreters would
    # each spend seconds importing torch on a shared two-core machine.
    multiprocessing.set_forkserver_preload(_PRELOAD)
    with tempfile.TemporaryDirectory(prefix="gloo-") as store_dir:
        try:
            start_processes(  # type: ignore[no-untyped-call]
                _entry, args=(world_size, store_dir, fn, args), nprocs=world_size, join=True,
                start_method="forkserver",
            )
        except Exception as err:
            errors = [f"rank {path.stem.removeprefix('error-')}:\n{path.read_text()}"
                      for path in sorted(Path(store_dir).glob("error-*.txt"))]
            raise RuntimeError("gloo ranks failed\n" + "\n".join(errors)) from err
        return [
            torch.load(Path(store_dir) / f"result-{rank}.pt", weights_only=False)
            for rank in range(world_size)
        ]
