"""GPU check for Muon and the model on one H200 (run by hand on a GPU machine; finishes in minutes).

    python -m tests.benchmarks.gpu_muon [--out gpu-muon.json] [--peak-tflops 790]
    python -m tests.benchmarks.gpu_muon --dry-run      # tiny sizes on the CPU: checks the script runs

1. Newton-Schulz throughput: the batched bf16 iteration of `trainer.optim.muon_reference.newton_schulz`
   on stacks of expert and head matrices of the presets, in TFLOP/s and as a fraction of a dense
   bf16 peak (--peak-tflops, 790 by default).
2. One training step of the largest preset that fits on the device (bf16 autocast, float32
   parameters, AdamW + per-head/per-expert Muon through `ShardedMuonWithAdamW`, which on one device
   takes its local path): forward+backward time, optimizer time, tokens/s and peak memory; and the
   reference optimizer's step (one unit at a time) on the same gradients for comparison.
3. The feedback KL's peak device memory, chunked against full logits (T=4096, V=32768).
4. One RL update with a small Hugging Face Llama (random weights, a tokenizer built here).

Without CUDA (and without --dry-run) it says so and exits 0.
"""

from __future__ import annotations

import argparse
import functools
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from trainer.model import PRESETS, ModelConfig, Transformer, count_parameters
from trainer.optim.muon_reference import (
    KELLER_COEFFICIENTS,
    AdamWConfig,
    MuonConfig,
    build_muon_adamw,
    newton_schulz,
)
from trainer.optim.sharded_muon import build_sharded_muon_adamw, newton_schulz_flops


def _timed(fn: Callable[[], object], *, device: torch.device, warmup: int, repeats: int) -> float:
    """Median seconds of `fn` after `warmup` calls, synchronizing the device around each call."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        started = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - started)
    return sorted(times)[len(times) // 2]


def bench_newton_schulz(device: torch.device, *, dry_run: bool, peak_tflops: float) -> list[dict[str, Any]]:
    if dry_run:
        shapes = [("tiny experts w1", 8, 96, 64), ("tiny heads wq", 4, 16, 64)]
    else:
        shapes = [
            ("1b experts w1/w3", 16, 1024, 1536),
            ("1b experts w2", 16, 1536, 1024),
            ("1b heads wq", 12, 128, 1536),
            ("1b layer: 3 expert stacks", 48, 1024, 1536),
            ("large experts", 64, 2048, 4096),
        ]
    rows = []
    print(f"{'Newton-Schulz (bf16, 5 steps)':<30}{'batch':>7}{'shape':>13}{'ms':>9}{'TFLOP/s':>10}{'of peak':>9}")
    for label, n, a, b in shapes:
        run = functools.partial(newton_schulz, torch.randn(n, a, b, device=device), coefficients=KELLER_COEFFICIENTS,
                                steps=5, eps=1e-7, dtype=torch.bfloat16)
        seconds = _timed(run, device=device, warmup=3, repeats=3 if dry_run else 20)
        tflops = n * newton_schulz_flops((a, b), 5) / seconds / 1e12
        rows.append({"label": label, "batch": n, "shape": [a, b], "seconds": seconds, "tflops": tflops,
                     "fraction_of_peak": tflops / peak_tflops})
        print(f"{label:<30}{n:>7}{f'{a}x{b}':>13}{seconds * 1e3:>9.2f}{tflops:>10.1f}{tflops / peak_tflops:>9.1%}")
    return rows


def _train_step_flops(config: ModelConfig, batch: int, seq: int) -> float:
    """Forward+backward flops: 6 x active parameters per token (embedding lookups excluded) plus
    causal attention (6 x 2 x B x T^2 x D x layers / 2 for the mask)."""
    _, active = count_parameters(config)
    active -= config.vocab_size * config.dim  # the embedding is a lookup, not a matmul
    return 6 * active * batch * seq + 6 * config.n_layers * batch * seq * seq * config.dim


def bench_training_step(device: torch.device, *, dry_run: bool) -> dict[str, Any]:
    candidates = [("tiny", 2, 32)] if dry_run else [("1b", 8, 2048), ("small", 8, 2048)]
    for preset, batch, seq in candidates:
        try:
            return _training_step(preset, batch, seq, device, dry_run=dry_run)
        except torch.OutOfMemoryError as err:
            print(f"{preset} at batch {batch} x {seq} does not fit: {err}".splitlines()[0])
            torch.cuda.empty_cache()
    raise RuntimeError("no preset fits on this device")


def _training_step(preset: str, batch: int, seq: int, device: torch.device, *, dry_run: bool) -> dict[str, Any]:
    config = PRESETS[preset]
    with torch.device("meta"):
        model = Transformer(config)
    model.to_empty(device=device)
    started = time.perf_counter()
    model.init_weights(seed=0)
    init_s = time.perf_counter() - started
    muon, adamw = MuonConfig(lr=0.02), AdamWConfig(lr=3e-4)
    optimizer = build_sharded_muon_adamw(model, muon=muon, adamw=adamw)
    generator = torch.Generator(device=device).manual_seed(0)
    tokens = torch.randint(0, config.vocab_size, (batch, seq + 1), device=device, generator=generator)

    def forward_backward() -> float:
        with torch.autocast(device.type, dtype=torch.bfloat16):
            logits = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.float().reshape(-1, config.vocab_size), tokens[:, 1:].reshape(-1))
        (loss + 0.01 * model.aux_loss()).backward()
        return loss.item()

    losses = []

    def train_step() -> None:
        optimizer.zero_grad(set_to_none=True)
        losses.append(forward_backward())
        optimizer.step()

    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    repeats = 2 if dry_run else 5
    step_s = _timed(train_step, device=device, warmup=2, repeats=repeats)
    forward_backward_s = _timed(forward_backward, device=device, warmup=0, repeats=repeats)
    optimizer_s = _timed(optimizer.step, device=device, warmup=0, repeats=repeats)
    reference = build_muon_adamw(model, muon=muon, adamw=adamw)
    reference_s = _timed(reference.step, device=device, warmup=1, repeats=2)

    total, active = count_parameters(config)
    tokens_per_step = batch * seq
    result = {
        "preset": preset, "batch": batch, "seq": seq, "params_total": total, "params_active": active,
        "init_s": init_s, "step_s": step_s, "forward_backward_s": forward_backward_s,
        "optimizer_s": optimizer_s, "reference_optimizer_s": reference_s,
        "tokens_per_s": tokens_per_step / step_s,
        "model_tflops_per_s": _train_step_flops(config, batch, seq) / forward_backward_s / 1e12,
        "losses": losses,
        "peak_memory_gib": torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None,
    }
    print(f"training step, preset {preset} ({total / 1e9:.2f}B params, {active / 1e9:.2f}B active), "
          f"batch {batch} x {seq}:")
    print(f"  step {step_s * 1e3:.0f} ms = forward+backward {forward_backward_s * 1e3:.0f} ms "
          f"({result['model_tflops_per_s']:.0f} TFLOP/s) + optimizer {optimizer_s * 1e3:.0f} ms "
          f"(reference, one unit at a time: {reference_s * 1e3:.0f} ms)")
    print(f"  {result['tokens_per_s']:.0f} tokens/s, peak memory {result['peak_memory_gib'] or 0:.1f} GiB, "
          f"init {init_s:.1f} s, losses {[round(x, 3) for x in losses[:3]]}...")
    if not losses[-1] < losses[0]:
        print("  warning: the loss did not go down over the timed steps")
    return result


def _peak_bytes(device: torch.device) -> int:
    return torch.cuda.max_memory_allocated(device) if device.type == "cuda" else 0


def bench_chunked_kl(device: torch.device, *, dry_run: bool) -> dict[str, Any]:
    """3. The feedback KL's peak memory on the device, chunked against full logits, forward +
    backward: [T, V] logits in float32 at T=4096, V=32768, D=1024 (tiny sizes in a dry run)."""
    from trainer.rl.kl import chunked_token_kl, naive_token_kl

    T, V, D = (64, 512, 32) if dry_run else (4096, 32768, 1024)
    generator = torch.Generator().manual_seed(0)
    student = torch.randn(T, D, generator=generator).to(device).requires_grad_()
    teacher = (student.detach() + 0.5 * torch.randn(T, D, generator=generator).to(device))
    weight = (torch.randn(V, D, generator=generator) * 2 / D ** 0.5).to(device).requires_grad_()
    result: dict[str, Any] = {"tokens": T, "vocab": V, "dim": D}
    for name in ("naive", "chunked"):
        student.grad = weight.grad = None
        if device.type == "cuda":
            torch.cuda.synchronize(device)
            torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device) if device.type == "cuda" else 0
        started = time.perf_counter()
        if name == "naive":
            with torch.no_grad():
                teacher_logits = teacher @ weight.T
            kl = naive_token_kl(student @ weight.T, teacher_logits, "reverse")
        else:
            kl = chunked_token_kl(student, teacher, weight, "reverse", chunk_size=512)
        kl.mean().backward()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        result[name] = {"peak_added_mib": (_peak_bytes(device) - base) / 2**20, "seconds": time.perf_counter() - started}
    if result["naive"]["peak_added_mib"]:
        result["ratio"] = result["chunked"]["peak_added_mib"] / result["naive"]["peak_added_mib"]
    print(f"chunked KL T={T} V={V}: naive {result['naive']['peak_added_mib']:.0f} MiB, "
          f"chunked {result['chunked']['peak_added_mib']:.0f} MiB, ratio {result.get('ratio', float('nan')):.3f}")
    return result


def bench_hf_rl_step(device: torch.device, *, dry_run: bool) -> dict[str, Any]:
    """4. One RL update (`trainer.rl.loop.update`: policy gradient + feedback KL, Muon per head) with
    a small Hugging Face Llama built here (random weights, a byte-level BPE tokenizer trained on a
    few chat turns: nothing is downloaded), on eight scripted trajectories."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from tests.trainer.test_rl_objective import _share
    from trainer.optim.hf_muon import build_hf_optimizer
    from trainer.recipe import OptimizerConfig
    from trainer.rl.config import RLConfig
    from trainer.rl.feedback import DETECTORS, make_detector
    from trainer.rl.hf_policy import HFPolicy
    from trainer.rl.loop import feedback, update
    from trainer.runtime import Runtime
    from trainer.testing import byte_bpe_tokenizer

    tokenizer = byte_bpe_tokenizer()
    hidden, layers = (64, 2) if dry_run else (1024, 8)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=4 * hidden,
                         num_hidden_layers=layers, num_attention_heads=8, num_key_value_heads=4,
                         max_position_embeddings=2048, bos_token_id=tokenizer.bos_token_id,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    policy = HFPolicy(model, tokenizer, max_new_tokens=16, temperature=1.0, device=device)
    optimizer = build_hf_optimizer(OptimizerConfig(name="muon", muon=MuonConfig(lr=0.02)), model)
    trajectories = _share(0, 1)
    hints, _ = feedback(trajectories, [make_detector(name) for name in DETECTORS])
    runtime = Runtime(rank=0, world_size=1, device=device, out=Path("."))
    times = []
    for _ in range(1 if dry_run else 3):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        started = time.perf_counter()
        pg, kl = update(policy, optimizer, trajectories, hints, config=RLConfig(tasks="unused"), runtime=runtime)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - started)
    parameters = sum(p.numel() for p in model.parameters())
    result = {"parameters": parameters, "trajectories": len(trajectories), "hinted_turns": len(hints),
              "step_s": min(times), "pg_loss": pg, "kl": kl, "kl_path": policy.kl_path,
              "peak_memory_gib": _peak_bytes(device) / 2**30}
    print(f"HF RL step: Llama {parameters / 1e6:.1f}M parameters, {len(trajectories)} trajectories, "
          f"{len(hints)} hinted turns: {result['step_s']:.2f} s (best of {len(times)}), kl path {policy.kl_path}")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dry-run", action="store_true", help="tiny sizes on the CPU")
    parser.add_argument("--peak-tflops", type=float, default=790.0, help="dense bf16 peak of the device")
    parser.add_argument("--out", type=Path, default=Path("gpu-muon.json"))
    args = parser.parse_args()

    if args.dry_run:
        device = torch.device("cpu")
    elif torch.cuda.is_available():
        device = torch.device("cuda", 0)
    else:
        print("gpu_muon: no CUDA device here; nothing to measure (use --dry-run to check the script on the CPU)")
        return
    started = time.perf_counter()
    report: dict[str, Any] = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu (dry run)",
        "torch": torch.__version__, "peak_tflops": args.peak_tflops,
    }
    print(f"device: {report['device']}, torch {torch.__version__}")
    report["newton_schulz"] = bench_newton_schulz(device, dry_run=args.dry_run, peak_tflops=args.peak_tflops)
    report["training_step"] = bench_training_step(device, dry_run=args.dry_run)
    report["chunked_kl"] = bench_chunked_kl(device, dry_run=args.dry_run)
    report["hf_rl_step"] = bench_hf_rl_step(device, dry_run=args.dry_run)
    report["wall_s"] = time.perf_counter() - started
    args.out.write_text(json.dumps(report, indent=2))
    print(f"done in {report['wall_s']:.0f} s; wrote {args.out}")


if __name__ == "__main__":
    main()
