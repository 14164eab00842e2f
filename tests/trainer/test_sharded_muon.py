"""Sharded Muon on real FSDP2 models over real gloo processes equals muon_reference on one process.

The model's dimensions are chosen so shards cut through the middle of heads (wq: 3 heads of 16 rows
on 2 ranks of 24 rows; wk: one head split 8/8), split experts unevenly (5 experts as 3/2 on 2 ranks,
2/2/1/0 on 4, one rank empty), and the lm head (routed to Muon here, as one whole 50 x 48 matrix)
splits 25/25.

Each rank also trains an unsharded copy with `muon_reference`. The FSDP model runs its real forward
and backward, but its gradients are then overwritten with the copy's: FSDP's reduce-scatter rounds
differently (~1e-8), and Newton-Schulz and AdamW normalize away the scale of near-zero gradients (an
expert that saw one token with a tiny gate), so such noise would grow to 1e-3 in a step and hide what
this test is about: the optimizer.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F

from tests.trainer.dist import run_gloo
from trainer.model import MatrixLayout, ModelConfig, Transformer
from trainer.optim.muon_reference import (
    DEFAULT_ROUTING,
    AdamWConfig,
    MuonConfig,
    RoutingRule,
    build_muon_adamw,
)
from trainer.optim.sharded_muon import (
    ShardedMuonWithAdamW,
    _Matrix,
    _plan_buckets,
    build_sharded_muon_adamw,
)

CONFIG = dict(vocab_size=50, dim=48, n_layers=2, n_heads=3, n_kv_heads=1, n_experts=5, top_k=2,
              expert_hidden=40, max_seq_len=16)
ROUTING = (RoutingRule(pattern=r"^output\.", algorithm="muon"), *DEFAULT_ROUTING)
SEED, STEPS = 11, 4

# Tolerances on the parameters after STEPS steps.
# bf16 Newton-Schulz: the sharded side runs the same ops on the same numbers, batched, which is
# bit-identical on CPU. The margin allows a few bf16 entries of an update to round one ulp apart on
# another backend (lr 0.02 x entry < 0.5 x 2^-8 ~ 4e-5 per step, over 4 steps).
BF16_ATOL = 2e-4
# float32 Newton-Schulz: batched float32 GEMMs block their sums differently from one-matrix ones, so
# entries differ by a few ulps (3e-8 measured on CPU); one ulp of an update entry is ~3e-8.
F32_ATOL = 1e-6
# Losses of the FSDP forward and the unsharded one on equal parameters: float32 sums in another
# order (~1e-7 relative on a loss of ~4).
LOSS_ATOL = 1e-5



def _tokens(step: int) -> torch.Tensor:
    return torch.randint(0, CONFIG["vocab_size"], (2, 13), generator=torch.Generator().manual_seed(step))


def _loss(model: torch.nn.Module, tokens: torch.Tensor) -> torch.Tensor:
    logits = model(tokens[:, :-1])
    return F.cross_entropy(logits.reshape(-1, CONFIG["vocab_size"]), tokens[:, 1:].reshape(-1))


def _train_both(rank: int, world_size: int, mesh_kind: str, ns_dtype: str, bucket_bytes: int) -> dict[str, Any]:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import Shard, distribute_tensor

    muon, adamw = MuonConfig(lr=0.02, ns_dtype=ns_dtype), AdamWConfig(lr=3e-3)  # type: ignore[arg-type]
    reference = Transformer(ModelConfig(**CONFIG))
    reference.init_weights(seed=SEED)
    reference_optimizer = build_muon_adamw(reference, muon=muon, adamw=adamw, routing=ROUTING)

    model = Transformer(ModelConfig(**CONFIG))
    if mesh_kind == "fsdp":
        dense = experts = init_device_mesh("cpu", (world_size,), mesh_dim_names=("shard",))
    else:
        # Dense layers: HSDP over (replicate 2, shard 2). Experts: sharded over all four ranks.
        dense = init_device_mesh("cpu", (2, world_size // 2), mesh_dim_names=("replicate", "shard"))
        experts = init_device_mesh("cpu", (world_size,), mesh_dim_names=("expert_shard",))
    for layer in model.layers:
        fully_shard(layer.moe.experts, mesh=experts)
        fully_shard(layer, mesh=dense)
    fully_shard(model, mesh=dense)
    model.init_weights(seed=SEED)  # on the DTensor shards

    # Column sharding (Shard(1), as tensor parallelism would do) cuts every row: not supported.
    column_sharded = distribute_tensor(torch.zeros(4, 6), experts, [Shard(1)]).requires_grad_()
    with pytest.raises(ValueError, match=r"needs Shard\(0\)"):
        ShardedMuonWithAdamW([("w", column_sharded)], layouts={"w": MatrixLayout(kind="whole", units=1)},
                             routing=[RoutingRule(pattern="", algorithm="muon")])
    optimizer = build_sharded_muon_adamw(model, muon=muon, adamw=adamw, routing=ROUTING,
                                         bucket_bytes=bucket_bytes, buckets_in_flight=2)
    initial = {name: p.full_tensor() for name, p in model.named_parameters()}

    losses: list[tuple[float, float]] = []
    for step in range(STEPS):
        tokens = _tokens(step)
        reference_loss = _loss(reference, tokens)
        reference_loss.backward()
        loss = _loss(model, tokens)
        loss.backward()
        losses.append((loss.item(), reference_loss.item()))
        for (name, p), q in zip(model.named_parameters(), reference.parameters()):
            p.grad.to_local().copy_(distribute_tensor(q.grad, p.device_mesh, p.placements, src_data_rank=None).to_local())
        optimizer.step()
        reference_optimizer.step()
        optimizer.zero_grad()
        reference_optimizer.zero_grad()
    return {
        "initial": initial,
        "final": {name: p.full_tensor() for name, p in model.named_parameters()},
        "reference_final": {name: p.detach() for name, p in reference.named_parameters()},
        "losses": losses,
        "placements": {name: str(p.placements) for name, p in model.named_parameters()},
    }


def _check(results: list[dict[str, Any]], atol: float) -> None:
    start = Transformer(ModelConfig(**CONFIG))
    start.init_weights(seed=SEED)
    for rank, result in enumerate(results):
        for name, expected in start.named_parameters():
            assert torch.equal(result["initial"][name], expected), f"rank {rank}: init of {name}"
        for loss, reference_loss in result["losses"]:
            assert loss == pytest.approx(reference_loss, abs=LOSS_ATOL), f"rank {rank}"
        for name, expected in result["reference_final"].items():
            torch.testing.assert_close(result["final"][name], expected, atol=atol, rtol=0,
                                       msg=lambda m, n=name, r=rank: f"rank {r} {n}: {m}")
            assert not torch.equal(expected, result["initial"][name]), f"{name} did not move"
    # Every rank's unsharded copy did the same, so the comparisons above share one reference.
    for result in results[1:]:
        for name, expected in results[0]["reference_final"].items():
            assert torch.equal(result["reference_final"][name], expected)


def test_two_ranks_fsdp_bf16_and_float32() -> None:
    # bf16 with buckets of several units; float32 with one unit per bucket, so many are in flight.
    for ns_dtype, atol, bucket_bytes in (("bfloat16", BF16_ATOL, 16 * 2**10), ("float32", F32_ATOL, 1)):
        results = run_gloo(2, _train_both, "fsdp", ns_dtype, bucket_bytes)
        assert results[0]["placements"]["layers.0.moe.experts.w1"] == "(Shard(dim=0),)"
        _check(results, atol)


def test_four_ranks_hsdp_dense_and_separate_expert_mesh() -> None:
    results = run_gloo(4, _train_both, "hsdp", "bfloat16", 64 * 2**10)
    placements = results[0]["placements"]
    assert placements["layers.0.attention.wq.weight"] == "(Replicate(), Shard(dim=0))"
    assert placements["layers.0.moe.experts.w2"] == "(Shard(dim=0),)"
    _check(results, BF16_ATOL)


def test_unsharded_parameters_take_the_local_path() -> None:
    """Plain tensors (one process, no FSDP) give the reference's numbers."""
    models = [Transformer(ModelConfig(**CONFIG)) for _ in range(2)]
    optimizers = [build_muon_adamw(models[0], routing=ROUTING),
                  build_sharded_muon_adamw(models[1], routing=ROUTING, bucket_bytes=4096)]
    for _ in range(3):
        for model, optimizer in zip(models, optimizers):
            _loss(model, _tokens(0)).backward()
            optimizer.step()
            optimizer.zero_grad()
    for (name, p), q in zip(models[0].named_parameters(), models[1].parameters()):
        torch.testing.assert_close(q, p, atol=BF16_ATOL, rtol=0, msg=name)


def _plans_for_every_rank(full_shape: tuple[int, ...], layout: MatrixLayout, size: int, bucket_bytes: int) -> list:
    """The bucket plans that each of `size` ranks would make for two such matrices, computed without
    processes (planning needs only shapes and ranks)."""
    rows, chunk = full_shape[0], -(-full_shape[0] // size)
    bounds = tuple((min(r * chunk, rows), min((r + 1) * chunk, rows)) for r in range(size))
    plans = []
    for rank in range(size):
        matrix = _Matrix(name="w", param=torch.zeros(0), layout=layout, full_shape=torch.Size(full_shape),
                         group=None, group_rank=rank, bounds=bounds)
        plans.append(_plan_buckets([matrix, matrix], bucket_bytes=bucket_bytes, element_size=2, steps=5))
    return plans


@pytest.mark.parametrize(
    ("full_shape", "layout"),
    [((5, 40, 48), MatrixLayout(kind="stacked", units=5)),
     ((48, 48), MatrixLayout(kind="row_blocks", units=3)),
     ((48, 48), MatrixLayout(kind="col_blocks", units=3)),
     ((50, 48), MatrixLayout(kind="whole", units=1))],
)
def test_exchange_plans_agree_across_ranks_and_balance_owners(full_shape: tuple[int, ...], layout: MatrixLayout) -> None:
    size = 4
    plans = _plans_for_every_rank(full_shape, layout, size, bucket_bytes=6 * 48 * 48 * 2)
    for buckets in zip(*plans):
        assert all(bucket.owners == buckets[0].owners for bucket in buckets)
        for sender in range(size):
            for receiver in range(size):
                # What the sender packs for the receiver is what the receiver expects from it.
                assert buckets[sender].outgoing_splits[receiver] == buckets[receiver].incoming_splits[sender]
        a, b = buckets[0].unit_shape
        # Every element of every unit arrives at its owner exactly once.
        assert sum(sum(bucket.incoming_splits) for bucket in buckets) == len(buckets[0].units) * a * b
    owners = [owner for bucket in plans[0] for owner in bucket.owners]
    counts = [owners.count(rank) for rank in range(size)]
    assert max(counts) - min(counts) <= 1, counts


@pytest.mark.parametrize(
    ("full_shape", "layout"),
    [((8, 40, 48), MatrixLayout(kind="stacked", units=8)),  # two whole experts per rank
     ((64, 48), MatrixLayout(kind="row_blocks", units=4))],  # one whole head per rank
)
def test_units_that_lie_on_one_rank_stay_there(full_shape: tuple[int, ...], layout: MatrixLayout) -> None:
    size = 4
    for rank, buckets in enumerate(_plans_for_every_rank(full_shape, layout, size, bucket_bytes=2**20)):
        for bucket in buckets:
            assert [split for r, split in enumerate(bucket.outgoing_splits) if r != rank] == [0] * (size - 1)
            assert [split for r, split in enumerate(bucket.incoming_splits) if r != rank] == [0] * (size - 1)


def test_rejects_bad_settings() -> None:
    with pytest.raises(ValueError, match="bucket_bytes"):
        ShardedMuonWithAdamW([], layouts={}, bucket_bytes=0)
    with pytest.raises(ValueError, match="buckets_in_flight"):
        ShardedMuonWithAdamW([], layouts={}, buckets_in_flight=0)
