"""Benchmark: peak memory of the feedback KL under FSDP2, chunked against full logits, forward + backward.

    python3 -m tests.benchmarks.bench_feedback_kl_fsdp [--ranks 2] [--vocab 32768] [--dim 128]
        [--tokens 1024] [--sequences 2] [--chunk-size 256] [--repeats 3]

A `Transformer` (2 layers, 4 experts, `--vocab` × `--dim`) is sharded with FSDP2 over `--ranks`
gloo processes on the CPU. Each rank holds `--sequences` hinted turns of `--tokens` tokens (student
and teacher contexts, the target being all but the first 24 tokens) and computes the feedback KL
and its backward:
- full: `trainer.rl.kl.full_logits_kl_loss`, the model's [B, T, V] logits;
- chunked: `trainer.rl.kl.feedback_kl_loss`, the KL as the model's output head, `--chunk-size`
  rows of logits at a time.

Each run is a fresh set of processes. Every rank warms up on a short batch, reads its resident
memory (/proc/self/statm), runs forward + backward once, and reports its peak resident memory
(`getrusage`) minus that baseline; a run's figure is the largest over its ranks. Variants alternate;
the median of `--repeats` runs of each is printed, with the ratio chunked / full and the largest
difference between the two variants' losses.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import time
from typing import Any

from tests.trainer.dist import run_gloo

VARIANTS = ("full", "chunked")
PROMPT = 24


def _rss_mb() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _rank(rank: int, world: int, args: argparse.Namespace, variant: str) -> dict[str, Any]:
    import torch
    import torch.distributed as dist

    from trainer.model import ModelConfig
    from trainer.parallel_dims import ParallelDims
    from trainer.rl.kl import feedback_kl_loss, full_logits_kl_loss
    from trainer.runtime import build_model

    config = ModelConfig(vocab_size=args.vocab, dim=args.dim, n_layers=2, n_heads=4, n_kv_heads=2, n_experts=4,
                         top_k=2, expert_hidden=2 * args.dim, max_seq_len=args.tokens + 8)
    dims = ParallelDims(dp_replicate=1, dp_shard=args.ranks, cp=1, ep=1, world_size=args.ranks)
    model = build_model(config, seed=0, device=torch.device("cpu"), dims=dims, meshes=dims.build_meshes("cpu"))
    loss_fn = feedback_kl_loss if variant == "chunked" else full_logits_kl_loss
    extra = {"chunk_size": args.chunk_size} if variant == "chunked" else {}

    def batch(tokens: int, count: int) -> tuple[list[Any], list[Any], list[tuple[int, int]], list[tuple[int, int]]]:
        generator = torch.Generator().manual_seed(1000 * rank + tokens)
        students, teachers = [], []
        for _ in range(count):
            target = torch.randint(0, args.vocab, (tokens - PROMPT,), generator=generator)
            students.append(torch.cat([torch.randint(0, args.vocab, (PROMPT,), generator=generator), target]))
            teachers.append(torch.cat([torch.randint(0, args.vocab, (PROMPT + 8,), generator=generator), target]))
        return students, teachers, [(PROMPT, tokens)] * count, [(PROMPT + 8, tokens + 8)] * count

    loss_fn(model, *batch(PROMPT + 8, 1), **extra).backward()  # kernels and thread pools, outside the measurement
    model.zero_grad(set_to_none=True)
    inputs = batch(args.tokens, args.sequences)
    dist.barrier()
    baseline = _rss_mb()
    started = time.perf_counter()
    loss = loss_fn(model, *inputs, **extra)
    loss.backward()
    seconds = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"added_mb": peak - baseline, "baseline_mb": baseline, "seconds": seconds, "loss": float(loss.detach())}


def _run(variant: str, args: argparse.Namespace) -> dict[str, Any]:
    ranks = run_gloo(args.ranks, _rank, args, variant)
    return {"added_mb": max(r["added_mb"] for r in ranks), "seconds": max(r["seconds"] for r in ranks),
            "losses": [r["loss"] for r in ranks]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--vocab", type=int, default=32768)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--tokens", type=int, default=1024, help="tokens per sequence (the student's)")
    parser.add_argument("--sequences", type=int, default=2, help="hinted turns per rank")
    parser.add_argument("--chunk-size", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(f"FSDP2 over {args.ranks} gloo ranks: V={args.vocab} D={args.dim}, {args.sequences} x {args.tokens} tokens "
          f"per rank, chunk_size={args.chunk_size}, forward + backward, {args.repeats} runs per variant")
    runs: dict[str, list[dict[str, Any]]] = {v: [] for v in VARIANTS}
    for repeat in range(args.repeats):
        for variant in VARIANTS:
            result = _run(variant, args)
            runs[variant].append(result)
            print(f"  run {repeat + 1} {variant:8s} added {result['added_mb']:8.1f} MB (largest rank), "
                  f"{result['seconds']:.2f} s", flush=True)
    median = {v: {k: statistics.median(r[k] for r in runs[v]) for k in ("added_mb", "seconds")} for v in VARIANTS}
    for variant in VARIANTS:
        print(f"{variant:8s} median peak added {median[variant]['added_mb']:8.1f} MB, "
              f"median time {median[variant]['seconds']:.2f} s")
    print(f"peak memory chunked / full = {median['chunked']['added_mb'] / median['full']['added_mb']:.3f}")
    difference = max(abs(a - b) for a, b in zip(runs["chunked"][0]["losses"], runs["full"][0]["losses"], strict=True))
    print(f"max |chunked - full| loss {difference:.3e} (loss {runs['full'][0]['losses'][0]:.4f})")


if __name__ == "__main__":
    main()
