"""Benchmark: expert parallelism by token dispatch against gathering every expert, at EP=4.

    python3 -m tests.benchmarks.bench_expert_parallel [--ranks 4] [--experts 16] [--dim 128]
        [--expert-hidden 512] [--tokens 256] [--layers 2] [--steps 5]

An MoE `Transformer` is sharded over `--ranks` gloo processes on the CPU (dp_shard = ep = ranks),
once with `expert_dispatch="gather"` (FSDP2 all-gathers each layer's stacked expert weights, so
every rank runs every expert on its own tokens, and reduce-scatters their gradients) and once with
`"all_to_all"` (each rank keeps E/ep experts; tokens travel to them and back). Each rank runs
forward + backward on `--tokens` tokens per step.

Bytes moved are counted per rank by wrapping the process group's collectives: what this rank sends
to other ranks (an all-gather of n ranks: (n-1)/n of the output; a reduce-scatter: (n-1)/n of the
input; an all-reduce: 2(n-1)/n of the tensor, as a ring does it; an all-to-all: the blocks for other
ranks). The dense weights move the same way in both modes, so the report splits out the expert
weights' traffic from the total. Step time is the median over `--steps` steps (after one warm-up),
slowest rank. The two modes' losses agree (printed).
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from tests.trainer.dist import run_gloo

MODES = ("gather", "all_to_all")


class _Counter:
    """Bytes this rank sends, by collective, while installed."""

    def __init__(self) -> None:
        self.bytes: dict[str, float] = {}

    def add(self, kind: str, amount: float) -> None:
        self.bytes[kind] = self.bytes.get(kind, 0.0) + amount

    def install(self) -> None:
        import torch.distributed as dist

        def size(group: Any) -> int:
            return dist.get_world_size(group)

        def wrap(name: str, count: Any) -> None:
            original = getattr(dist, name, None)
            if original is None:  # not in this torch
                return

            def wrapped(*args: Any, **kwargs: Any) -> Any:
                self.add(name, count(*args, **kwargs))
                return original(*args, **kwargs)

            setattr(dist, name, wrapped)

        def nbytes(t: Any) -> int:
            return int(t.numel() * t.element_size())

        wrap("all_gather_into_tensor",
             lambda out, inp, group=None, **_: nbytes(out) * (size(group) - 1) / size(group))
        wrap("reduce_scatter_tensor",
             lambda out, inp, op=None, group=None, **_: nbytes(inp) * (size(group) - 1) / size(group))
        # FSDP2's own names for the two (torch >= 2.10).
        wrap("all_gather_single",
             lambda out, inp, group=None, **_: nbytes(out) * (size(group) - 1) / size(group))
        wrap("reduce_scatter_single",
             lambda output=None, input=None, group=None, **_: nbytes(input) * (size(group) - 1) / size(group))
        wrap("all_reduce", lambda t, op=None, group=None, **_: 2 * nbytes(t) * (size(group) - 1) / size(group))
        wrap("all_gather", lambda outs, t, group=None, **_: nbytes(t) * (size(group) - 1))
        wrap("all_to_all_single", lambda out, inp, output_split_sizes=None, input_split_sizes=None, group=None, **_:
             nbytes(inp) * (1 - (input_split_sizes[dist.get_rank(group)] / max(sum(input_split_sizes), 1)
                                 if input_split_sizes else 1 / size(group))))


def _rank(rank: int, world: int, args: argparse.Namespace, mode: str) -> dict[str, Any]:
    import torch
    import torch.distributed as dist

    from trainer.model import ModelConfig
    from trainer.parallel_dims import ParallelDims
    from trainer.parallelize import ExpertParallelExperts, parallelize

    counter = _Counter()
    counter.install()
    config = ModelConfig(vocab_size=1024, dim=args.dim, n_layers=args.layers, n_heads=4, n_kv_heads=2,
                         n_experts=args.experts, top_k=2, expert_hidden=args.expert_hidden, max_seq_len=args.tokens)
    dims = ParallelDims(dp_shard=args.ranks, ep=args.ranks, world_size=args.ranks)
    meshes = dims.build_meshes("cpu")
    from trainer.model import Transformer

    with torch.device("meta"):
        model = Transformer(config)
    parallelize(model, dims, meshes, expert_dispatch=mode)  # type: ignore[arg-type]
    model.to_empty(device=torch.device("cpu"))
    model.init_weights(0)
    generator = torch.Generator().manual_seed(rank)
    tokens = torch.randint(0, 1024, (1, args.tokens + 1), generator=generator)

    def step() -> float:
        logits = model(tokens[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), tokens[0, 1:])
        loss.backward()
        model.zero_grad(set_to_none=True)
        return float(loss.detach())

    loss = step()  # warm-up
    counter.bytes.clear()
    times = []
    for _ in range(args.steps):
        dist.barrier()
        started = time.perf_counter()
        step()
        times.append(time.perf_counter() - started)
    expert_bytes = 2 * sum(e.bytes_moved for block in model.layers
                           if isinstance(e := block.moe.experts, ExpertParallelExperts))  # type: ignore[union-attr]
    return {"times": times, "loss": loss, "bytes": {k: v / args.steps for k, v in counter.bytes.items()},
            "token_bytes": expert_bytes / (args.steps + 1)}


def _expert_weight_bytes(args: argparse.Namespace) -> float:
    """Per step and rank, what gathering the experts moves: the all-gather of every layer's stacked
    weights in forward and again in backward (FSDP2 reshards after forward), and the reduce-scatter
    of their gradients, each (n-1)/n of the full float32 tensors."""
    full = 3 * args.experts * args.expert_hidden * args.dim * 4 * args.layers
    return 3 * full * (args.ranks - 1) / args.ranks


def _run(mode: str, args: argparse.Namespace) -> dict[str, Any]:
    ranks = run_gloo(args.ranks, _rank, args, mode)
    step_s = statistics.median(max(r["times"][i] for r in ranks) for i in range(args.steps))
    total = max(sum(r["bytes"].values()) for r in ranks)
    return {"step_s": step_s, "bytes": total, "losses": [r["loss"] for r in ranks],
            "by_kind": ranks[0]["bytes"], "token_bytes": max(r["token_bytes"] for r in ranks)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--experts", type=int, default=16)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--expert-hidden", type=int, default=512)
    parser.add_argument("--tokens", type=int, default=256, help="tokens per rank per step")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args()
    print(f"EP={args.ranks} over {args.ranks} gloo ranks: {args.experts} experts of {args.dim}x{args.expert_hidden}, "
          f"{args.layers} layers, top-2, {args.tokens} tokens per rank, forward + backward, median of {args.steps} steps")
    results = {mode: _run(mode, args) for mode in MODES}
    for mode in MODES:
        r = results[mode]
        kinds = ", ".join(f"{k} {v / 2**20:.2f}" for k, v in sorted(r["by_kind"].items()))
        print(f"{mode:10s} step {r['step_s'] * 1000:8.1f} ms, sent per rank per step {r['bytes'] / 2**20:8.2f} MiB "
              f"(rank 0 by collective, MiB: {kinds})")
    gathered = _expert_weight_bytes(args)
    print(f"expert traffic per rank per step: gather {gathered / 2**20:.2f} MiB of weights and gradients; "
          f"all_to_all {results['all_to_all']['token_bytes'] / 2**20:.2f} MiB of tokens and their gradients")
    print(f"step time all_to_all / gather = {results['all_to_all']['step_s'] / results['gather']['step_s']:.3f}; "
          f"bytes all_to_all / gather = {results['all_to_all']['bytes'] / results['gather']['bytes']:.3f}")
    difference = max(abs(a - b) for a, b in zip(results["gather"]["losses"], results["all_to_all"]["losses"],
                                                strict=True))
    print(f"max |loss difference| between the modes {difference:.2e}")


if __name__ == "__main__":
    main()
