"""One training step of the tiny model under dual-mesh HSDP (+ context parallelism) on real gloo
ranks equals the same step in one plain process on the same global batch, parameter by parameter:
sharded Muon + AdamW against the reference optimizer, as the recipes train.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from tests.trainer.dist import run_gloo
from trainer.model import config_from_preset
from trainer.optim.muon_reference import AdamWConfig, MuonConfig
from trainer.parallel_dims import ParallelDims
from trainer.pretrain.data import local_slice
from trainer.pretrain.loop import train_step
from trainer.recipe import OptimizerConfig
from trainer.runtime import build_model, build_optimizer

SEQ_LEN = 32
GLOBAL_BATCH = 8
SEED = 3

# Float32 throughout, Newton-Schulz included (ns_dtype float32). The sharded step sums gradients
# in a different order (reduce-scatter and all-reduce across ranks, attention split over cp
# ranks), so parameters agree to rounding, not bits: measured 5.03e-7 at most. The first step
# moves every weight by ~1e-3 (AdamW: lr * sign(grad)) to ~1e-2 (Muon), so 1e-5 absolute is 1% of
# the smallest move and still catches any wrong shard, owner or update.
PARAM_ATOL = 1e-5
LOSS_RTOL = 1e-6
# Gradients (up to ~3e-2 here) agree to ~3e-7 relative, 1e-8 absolute at worst; these bounds are
# two orders of magnitude above that and far below the error of a wrong scale or a missing term.
GRAD_ATOL = 1e-7
GRAD_RTOL = 1e-4



def _optimizer_config(name: str) -> OptimizerConfig:
    return OptimizerConfig(name=name, muon=MuonConfig(lr=0.02, ns_dtype="float32"),
                           adamw=AdamWConfig(lr=1e-3, weight_decay=0.1))


def _global_batch() -> torch.Tensor:
    generator = torch.Generator().manual_seed(SEED)
    return torch.randint(0, 259, (GLOBAL_BATCH, SEQ_LEN + 1), generator=generator)


def _distributed_step(rank: int, world_size: int, dims: ParallelDims, optimizer_name: str) -> dict[str, Any]:
    from torch.distributed.tensor import DTensor, Replicate, Shard

    config = config_from_preset("tiny")
    meshes = dims.build_meshes("cpu")
    model = build_model(config, seed=SEED, device=torch.device("cpu"), dims=dims, meshes=meshes)
    optimizer = build_optimizer(_optimizer_config(optimizer_name), model, distributed=True)
    inputs_BT, targets_BT = local_slice(_global_batch(), dp_rank=meshes.dp_rank, dp=dims.dp,
                                        cp_rank=meshes.cp_rank, cp=dims.cp)
    result = train_step(model, optimizer, inputs_BT, targets_BT, global_tokens=GLOBAL_BATCH * SEQ_LEN,
                        aux_loss_coef=0.0)

    block: Any = model.layers[0]
    experts_w1: DTensor = block.moe.experts.w1
    wq: DTensor = block.attention.wq.weight
    layout = {
        "experts_mesh": experts_w1.device_mesh.mesh_dim_names,
        "experts_placements": experts_w1.placements,
        "experts_local_shape": tuple(experts_w1.to_local().shape),
        "dense_mesh": wq.device_mesh.mesh_dim_names,
        "dense_placements": wq.placements,
        "attention": type(block.attention).__name__,
    }
    assert layout["experts_placements"] == (Replicate(), Shard(0))
    assert layout["dense_placements"] == (Replicate(), Shard(0))
    sharded: dict[str, Any] = dict(model.named_parameters())
    params = {name: param.full_tensor() for name, param in sharded.items()}
    grads = {name: param.grad.full_tensor() for name, param in sharded.items()}
    return {"loss": result.loss, "layout": layout, "params": params if rank == 0 else None,
            "grads": grads if rank == 0 else None}


def _single_process_step(optimizer_name: str) -> tuple[float, dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    config = config_from_preset("tiny")
    model = build_model(config, seed=SEED, device=torch.device("cpu"))
    optimizer = build_optimizer(_optimizer_config(optimizer_name), model, distributed=False)
    batch_BT = _global_batch()
    result = train_step(model, optimizer, batch_BT[:, :-1], batch_BT[:, 1:],
                        global_tokens=GLOBAL_BATCH * SEQ_LEN, aux_loss_coef=0.0)
    params = {name: param.detach().clone() for name, param in model.named_parameters()}
    grads = {name: param.grad.clone() for name, param in model.named_parameters() if param.grad is not None}
    return result.loss, params, grads


def _check_against_single_process(results: list[dict[str, Any]], dims: ParallelDims, optimizer_name: str) -> None:
    reference_loss, reference, reference_grads = _single_process_step(optimizer_name)
    for result in results:
        assert result["loss"] == pytest.approx(reference_loss, rel=LOSS_RTOL)
    layout = results[0]["layout"]
    assert layout["experts_mesh"] == ("dp_replicate_e", "ep")
    assert layout["dense_mesh"] == ("dp_replicate", "dp_shard_cp")
    n_experts = config_from_preset("tiny").n_experts
    assert layout["experts_local_shape"][0] == n_experts // dims.ep
    assert layout["attention"] == ("ContextParallelAttention" if dims.cp > 1 else "Attention")

    params, grads = results[0]["params"], results[0]["grads"]
    assert isinstance(params, dict) and params.keys() == reference.keys()
    assert isinstance(grads, dict) and grads.keys() == reference.keys()
    initial = build_model(config_from_preset("tiny"), seed=SEED, device=torch.device("cpu"))
    for name, initial_param in initial.named_parameters():
        # Adam and Muon are blind to the scale of a gradient, so gradients are compared on their own.
        torch.testing.assert_close(grads[name], reference_grads[name], atol=GRAD_ATOL, rtol=GRAD_RTOL, msg=name)
        # Every parameter moved, and moved to where the single process moved it.
        assert not torch.equal(reference[name], initial_param.detach()), name
        torch.testing.assert_close(params[name], reference[name], atol=PARAM_ATOL, rtol=0, msg=name)


def test_step_on_4_ranks_matches_single_process() -> None:
    # Dense shard group of all 4 ranks; experts split over pairs and replicated twice.
    dims = ParallelDims(dp_replicate=1, dp_shard=2, cp=2, ep=2, world_size=4)
    results = run_gloo(4, _distributed_step, dims, "muon")
    _check_against_single_process(results, dims, "muon")


@pytest.mark.parametrize(
    "dims",
    [
        # HSDP replicas on both meshes.
        ParallelDims(dp_replicate=2, dp_shard=2, cp=2, ep=4, world_size=8),
        # The layout of recipes/train/h200x8-cp2-ep8.toml: cp=2 and ep=8 on the same 8 ranks.
        ParallelDims(dp_replicate=1, dp_shard=4, cp=2, ep=8, world_size=8),
        # Experts wider than the dense shard groups: dense weights sharded over 4 ranks ("a node")
        # and replicated twice, experts sharded over all 8 ranks, across both dense replicas.
        ParallelDims(dp_replicate=2, dp_shard=2, cp=2, ep=8, world_size=8),
        # Dense shard groups of 2, 4 replicas; experts over two shard groups and replicated twice.
        ParallelDims(dp_replicate=4, dp_shard=2, cp=1, ep=4, world_size=8),
    ],
    ids=["r2-s2-cp2-ep4", "s4-cp2-ep8", "r2-s2-cp2-ep8", "r4-s2-ep4"],
)
def test_step_on_8_ranks_matches_single_process(dims: ParallelDims) -> None:
    results = run_gloo(8, _distributed_step, dims, "muon")
    _check_against_single_process(results, dims, "muon")
