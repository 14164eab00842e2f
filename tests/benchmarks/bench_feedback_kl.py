"""Benchmark: peak memory of the chunked per-token KL against the naive one, forward + backward.

    python3 -m tests.benchmarks.bench_feedback_kl [--tokens 4096] [--vocab 32768] [--dim 256]
        [--chunk-size 512] [--kind reverse] [--repeats 3]

Both variants compute the per-token KL of a student from a teacher over the vocabulary, with the
logits hidden @ weight.T in float32, then the backward of its mean into the student's hidden states
and the weight:
- naive: `trainer.rl.kl.naive_token_kl` on full [T, V] logits (the teacher's under no_grad);
- chunked: `trainer.rl.kl.chunked_token_kl`, `--chunk-size` rows of logits at a time.

Each run is a fresh Python process, so that neither allocator caches nor an earlier peak carry
over. It warms the variant up on tiny inputs, allocates the inputs, reads its resident memory
(/proc/self/statm) as the baseline, runs forward + backward once, and reports the peak resident
memory (`getrusage(RUSAGE_SELF).ru_maxrss`) minus that baseline: the memory the computation added.
(tracemalloc does not see torch's allocations.) Runs alternate between the variants; the median of
`--repeats` runs of each is printed, with the ratio chunked / naive (the goal is <= 1/8), the wall
time, and the largest absolute difference between the two variants' KL values and gradients.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

VARIANTS = ("naive", "chunked")


def _current_rss_mb() -> float:
    with open("/proc/self/statm") as statm:
        resident_pages = int(statm.read().split()[1])
    return resident_pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def _worker(args: argparse.Namespace) -> None:
    import torch
    from trainer.rl.kl import chunked_token_kl, naive_token_kl

    def run(student_TD: torch.Tensor, teacher_TD: torch.Tensor, weight_VD: torch.Tensor) -> torch.Tensor:
        if args.worker == "naive":
            with torch.no_grad():
                teacher_logits_TV = teacher_TD @ weight_VD.T
            kl_T = naive_token_kl(student_TD @ weight_VD.T, teacher_logits_TV, args.kind)
        else:
            kl_T = chunked_token_kl(student_TD, teacher_TD, weight_VD, args.kind, chunk_size=args.chunk_size)
        kl_T.mean().backward()
        return kl_T.detach()

    def inputs(T: int, V: int, D: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        generator = torch.Generator().manual_seed(0)
        student_TD = torch.randn(T, D, generator=generator)
        teacher_TD = student_TD + 0.5 * torch.randn(T, D, generator=generator)
        weight_VD = torch.randn(V, D, generator=generator) * 2 / D ** 0.5
        return student_TD.requires_grad_(), teacher_TD, weight_VD.requires_grad_()

    run(*inputs(16, 64, 8))  # first-call kernels and thread pools, outside the measurement
    student_TD, teacher_TD, weight_VD = inputs(args.tokens, args.vocab, args.dim)
    baseline_mb = _current_rss_mb()
    started = time.perf_counter()
    kl_T = run(student_TD, teacher_TD, weight_VD)
    seconds = time.perf_counter() - started
    peak_mb = _peak_rss_mb()
    assert student_TD.grad is not None and weight_VD.grad is not None
    torch.save({"kl": kl_T, "grad_hidden": student_TD.grad, "grad_weight": weight_VD.grad}, args.out)
    print(json.dumps({"baseline_mb": baseline_mb, "peak_mb": peak_mb, "added_mb": peak_mb - baseline_mb,
                      "seconds": seconds}))


def _run_variant(variant: str, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    command = [sys.executable, "-m", "tests.benchmarks.bench_feedback_kl", "--worker", variant, "--out", str(out),
               "--tokens", str(args.tokens), "--vocab", str(args.vocab), "--dim", str(args.dim),
               "--chunk-size", str(args.chunk_size), "--kind", args.kind]
    done = subprocess.run(command, check=True, capture_output=True, text=True)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=4096, help="T, tokens whose KL is computed")
    parser.add_argument("--vocab", type=int, default=32768, help="V, vocabulary size")
    parser.add_argument("--dim", type=int, default=256, help="D, hidden size")
    parser.add_argument("--chunk-size", type=int, default=512, help="rows of logits per chunk (chunked)")
    parser.add_argument("--kind", choices=("reverse", "forward", "jsd"), default="reverse")
    parser.add_argument("--repeats", type=int, default=3, help="fresh processes per variant")
    parser.add_argument("--worker", choices=VARIANTS, help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        _worker(args)
        return

    import torch

    print(f"T={args.tokens} V={args.vocab} D={args.dim} float32, kind={args.kind}, chunk_size={args.chunk_size}, "
          f"forward + backward, {args.repeats} fresh processes per variant, torch threads "
          f"{torch.get_num_threads()}")
    runs: dict[str, list[dict[str, Any]]] = {variant: [] for variant in VARIANTS}
    with tempfile.TemporaryDirectory() as scratch:
        outputs = {variant: Path(scratch) / f"{variant}.pt" for variant in VARIANTS}
        for repeat in range(args.repeats):
            for variant in VARIANTS:
                result = _run_variant(variant, args, outputs[variant])
                runs[variant].append(result)
                print(f"  run {repeat + 1} {variant:8s} added {result['added_mb']:8.1f} MB "
                      f"(baseline {result['baseline_mb']:.0f} MB, peak {result['peak_mb']:.0f} MB), "
                      f"{result['seconds']:.2f} s", flush=True)
        naive, chunked = (torch.load(outputs[variant]) for variant in VARIANTS)

    median = {variant: {key: statistics.median(r[key] for r in runs[variant]) for key in ("added_mb", "seconds")}
              for variant in VARIANTS}
    for variant in VARIANTS:
        print(f"{variant:8s} median peak added {median[variant]['added_mb']:8.1f} MB, "
              f"median time {median[variant]['seconds']:.2f} s")
    ratio = median["chunked"]["added_mb"] / median["naive"]["added_mb"]
    print(f"peak memory chunked / naive = {ratio:.3f} (goal <= 0.125: {'met' if ratio <= 0.125 else 'NOT met'})")
    for key in ("kl", "grad_hidden", "grad_weight"):
        difference = (chunked[key] - naive[key]).abs().max().item()
        print(f"max |chunked - naive| {key:11s} {difference:.3e} (max |naive| {naive[key].abs().max().item():.3e})")


if __name__ == "__main__":
    main()
