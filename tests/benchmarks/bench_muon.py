"""Benchmark: sharded Muon against the redundant way of running Muon on an FSDP2 model.

    python -m tests.benchmarks.bench_muon [--steps 10] [--bucket-kib 1024] [--no-moe] [--out bench-muon.json]

Four gloo ranks on the CPU, one thread each. Two models, each wrapped with `fully_shard`:
- "matrices": 16 bias-free linear layers with 256 x 512 weights (every weight one whole Muon unit);
- "moe" (unless --no-moe): a small MoE transformer whose attention (per head) and stacked experts
  (per expert) go to Muon.
For each, two optimizers step the same FSDP2 parameters with the same gradients:
- sharded: `trainer.optim.sharded_muon.ShardedMuonWithAdamW` (each unit orthogonalized once, by its owner),
  with buckets of --bucket-kib (1 MiB: four 256 x 512 bf16 matrices, so four buckets pipeline);
- redundant: every rank all-gathers each full gradient and parameter (`full_tensor()`), steps an
  unsharded optimizer over full copies (`torch.optim.Muon` for "matrices", `muon_reference` for
  "moe", since torch's Muon takes only 2-D matrices), and copies its own rows back. This is what
  running an unsharded Muon under FSDP costs: every rank orthogonalizes every matrix.
A step's time is the slowest rank's. It prints the median over --steps timed steps (after two
warm-up steps) and the ratio sharded / redundant, checks the two end at the same parameters, and
writes the numbers to --out as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from tests.trainer.dist import run_gloo

WORLD_SIZE = 4
MOE_CONFIG = dict(vocab_size=512, dim=256, n_layers=2, n_heads=4, n_kv_heads=2, n_experts=8, top_k=2,
                  expert_hidden=512, max_seq_len=64)


class _Matrices(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(512, 256, bias=False) for _ in range(16))


class _RedundantFullTensor:
    """Steps an unsharded optimizer on full copies of FSDP2 parameters: gather, step, keep own rows."""

    def __init__(self, named_parameters: list[tuple[str, torch.Tensor]],
                 make_optimizer: Callable[[list[tuple[str, nn.Parameter]]], torch.optim.Optimizer]) -> None:
        self.sharded = named_parameters
        self.full = [(name, nn.Parameter(p.full_tensor())) for name, p in named_parameters]
        self.optimizer = make_optimizer(self.full)

    @torch.no_grad()
    def step(self) -> None:
        from torch.distributed.tensor import distribute_tensor

        for (_, p), (_, full) in zip(self.sharded, self.full):
            full.copy_(p.full_tensor())
            full.grad = p.grad.full_tensor()
        self.optimizer.step()
        for (_, p), (_, full) in zip(self.sharded, self.full):
            p.to_local().copy_(distribute_tensor(full, p.device_mesh, p.placements, src_data_rank=None).to_local())


def _timed(step: Callable[[], None], steps: int) -> list[float]:
    import torch.distributed as dist

    times = []
    for i in range(steps + 2):
        dist.barrier()
        started = time.perf_counter()
        step()
        elapsed = torch.tensor(time.perf_counter() - started)
        dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
        if i >= 2:  # warm-up: first-call allocations and plans
            times.append(elapsed.item())
    return times


def _bench_rank(rank: int, world_size: int, model_kind: str, steps: int, bucket_bytes: int) -> dict[str, Any]:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from trainer.optim.muon_reference import MuonConfig, MuonWithAdamW, RoutingRule
    from trainer.optim.sharded_muon import ShardedMuonWithAdamW

    from trainer.model import MatrixLayout, ModelConfig, Transformer, matrix_layouts

    torch.manual_seed(0)
    mesh = init_device_mesh("cpu", (world_size,))
    muon = MuonConfig(lr=0.02)
    if model_kind == "matrices":
        model: nn.Module = _Matrices()
        layouts = {name: MatrixLayout(kind="whole", units=1) for name, _ in model.named_parameters()}
        routing = [RoutingRule(pattern="", algorithm="muon")]
        for layer in model.layers:
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)

        def redundant_optimizer(full: list[tuple[str, nn.Parameter]]) -> torch.optim.Optimizer:
            return torch.optim.Muon([p for _, p in full], lr=muon.lr, weight_decay=muon.weight_decay,
                                    adjust_lr_fn="original")
    else:
        model = Transformer(ModelConfig(**MOE_CONFIG))
        layouts = matrix_layouts(model)
        # Only the Muon part is compared; AdamW parameters are left out of both optimizers.
        routing = [RoutingRule(pattern=r"(attention\.w[qkvo]\.weight|experts\.w[123])$", algorithm="muon")]
        for layer in model.layers:
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)

        def redundant_optimizer(full: list[tuple[str, nn.Parameter]]) -> torch.optim.Optimizer:
            return MuonWithAdamW(full, layouts=layouts, muon=muon, routing=routing)

    named = [(name, p) for name, p in model.named_parameters() if name in layouts
             and (model_kind == "matrices" or "attention" in name or "experts" in name)]
    generator = torch.Generator().manual_seed(1)
    from torch.distributed.tensor import distribute_tensor
    for _, p in named:
        full_grad = torch.randn(p.shape, generator=generator)
        p.grad = distribute_tensor(full_grad, p.device_mesh, p.placements, src_data_rank=None)
    start = {name: p.to_local().clone() for name, p in named}

    sharded = ShardedMuonWithAdamW(named, layouts=layouts, muon=muon, routing=routing, bucket_bytes=bucket_bytes)
    sharded_times = _timed(sharded.step, steps)
    sharded_final = {name: p.full_tensor() for name, p in named}

    with torch.no_grad():
        for name, p in named:
            p.to_local().copy_(start[name])
    redundant = _RedundantFullTensor(named, redundant_optimizer)
    redundant_times = _timed(redundant.step, steps)
    max_diff = max((sharded_final[name] - p.full_tensor()).abs().max().item() for name, p in named)
    return {"sharded_s": sharded_times, "redundant_s": redundant_times, "max_param_diff": max_diff,
            "muon_params": len(named)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--bucket-kib", type=int, default=1024)
    parser.add_argument("--no-moe", action="store_true")
    parser.add_argument("--out", type=Path, default=Path("bench-muon.json"))
    args = parser.parse_args()

    report: dict[str, Any] = {"world_size": WORLD_SIZE, "threads_per_rank": 1, "steps": args.steps,
                              "bucket_kib": args.bucket_kib, "cpu_count": os.cpu_count(),
                              "torch": torch.__version__, "models": {}}
    print(f"{WORLD_SIZE} gloo ranks, 1 thread each, {os.cpu_count()} cores, median of {args.steps} optimizer steps "
          f"(slowest rank), buckets of {args.bucket_kib} KiB")
    print(f"{'model':<10}{'params':>8}{'sharded ms':>12}{'redundant ms':>14}{'ratio':>8}{'max |diff|':>12}")
    for kind in ["matrices"] + ([] if args.no_moe else ["moe"]):
        result = run_gloo(WORLD_SIZE, _bench_rank, kind, args.steps, args.bucket_kib * 1024)[0]
        sharded, redundant = statistics.median(result["sharded_s"]), statistics.median(result["redundant_s"])
        ratio = sharded / redundant
        print(f"{kind:<10}{result['muon_params']:>8}{sharded * 1e3:>12.1f}{redundant * 1e3:>14.1f}"
              f"{ratio:>8.3f}{result['max_param_diff']:>12.2e}")
        report["models"][kind] = {**result, "sharded_median_s": sharded, "redundant_median_s": redundant,
                                  "ratio": ratio}
    args.out.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
