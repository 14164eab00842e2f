"""Expert parallelism by token dispatch (issue 21, item 4): each rank owns E/ep experts and
computes them for the tokens every rank of its ep group routed to them, two all-to-alls per MoE
layer and direction. With an expert capacity, each rank drops the pairs over capacity of its own
forward, exactly as one process does on the same tokens.

tests/trainer/test_dual_mesh.py checks whole training steps against one process (4 and 8 ranks, CP=2
with EP=8 among them), dropless. Here every rank runs its own tokens, with and without capacity, and
its logits, dropped pairs and the world-average gradient are compared with one process running each
rank's tokens in turn.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from tests.trainer.dist import run_gloo
from trainer.model import MoE, config_from_preset
from trainer.parallel_dims import ParallelDims
from trainer.runtime import build_model

SEED = 5
SEQ = 24


def _tokens(rank: int) -> torch.Tensor:
    return torch.randint(0, 384, (2, SEQ), generator=torch.Generator().manual_seed(100 + rank))


def _probe(rank: int) -> torch.Tensor:
    """Fixed weights on the logits: the loss of rank `rank` is (logits * probe).sum()."""
    return torch.randn(2, SEQ, 384, generator=torch.Generator().manual_seed(900 + rank))


def _moes(model: torch.nn.Module) -> list[MoE]:
    return [block.moe for block in model.layers]  # type: ignore[union-attr]


def _on_ranks(rank: int, world: int, dims: ParallelDims, capacity_factor: float) -> dict[str, Any]:
    from trainer.parallelize import ExpertParallelExperts

    config = config_from_preset("tiny", capacity_factor=capacity_factor)
    model = build_model(config, seed=SEED, device=torch.device("cpu"), dims=dims, meshes=dims.build_meshes("cpu"))
    logits = model(_tokens(rank))
    (logits * _probe(rank)).sum().backward()
    experts = [moe.experts for moe in _moes(model)]
    assert all(isinstance(e, ExpertParallelExperts) for e in experts)
    grads = {name: p.grad.full_tensor() for name, p in model.named_parameters() if p.grad is not None}
    return {"logits": logits.detach(), "dropped": [moe.dropped for moe in _moes(model)],
            "bytes": sum(e.bytes_moved for e in experts),  # type: ignore[misc]
            "local_experts": experts[0].w1.to_local().shape[0],  # type: ignore[union-attr]
            "grads": grads if rank == 0 else None}


def _one_process(world: int, capacity_factor: float) -> dict[str, Any]:
    config = config_from_preset("tiny", capacity_factor=capacity_factor)
    model = build_model(config, seed=SEED, device=torch.device("cpu"))
    logits, dropped = [], []
    for rank in range(world):
        out = model(_tokens(rank))
        (out * _probe(rank)).sum().div(world).backward()  # FSDP2's average over the ranks
        logits.append(out.detach())
        dropped.append([moe.dropped for moe in _moes(model)])
    grads = {name: p.grad for name, p in model.named_parameters() if p.grad is not None}
    return {"logits": logits, "dropped": dropped, "grads": grads}


@pytest.mark.parametrize("capacity_factor", [0.0, 0.5])
@pytest.mark.parametrize(
    ("world", "dims"),
    [(4, ParallelDims(dp_shard=4, ep=4, world_size=4)),
     (8, ParallelDims(dp_replicate=2, dp_shard=4, ep=4, world_size=8))],  # experts replicated twice
    ids=["ep4", "r2-ep4"],
)
def test_dispatched_experts_equal_one_process_with_and_without_capacity(world: int, dims: ParallelDims,
                                                                        capacity_factor: float) -> None:
    ranks = run_gloo(world, _on_ranks, dims, capacity_factor)
    single = _one_process(world, capacity_factor)
    n_experts = config_from_preset("tiny").n_experts
    for rank, result in enumerate(ranks):
        assert result["local_experts"] == n_experts // dims.ep
        assert result["bytes"] > 0  # tokens did go to other ranks
        assert result["dropped"] == single["dropped"][rank]
        torch.testing.assert_close(result["logits"], single["logits"][rank], atol=1e-5, rtol=1e-5)
    if capacity_factor:
        assert all(d > 0 for result in ranks for d in result["dropped"])  # the capacity bit
    else:
        assert all(d == 0 for result in ranks for d in result["dropped"])
    grads = ranks[0]["grads"]
    assert grads.keys() == single["grads"].keys()
    for name, expected in single["grads"].items():
        torch.testing.assert_close(grads[name], expected, atol=1e-6, rtol=1e-4, msg=name)


def test_capacity_drops_the_latest_pairs_of_an_expert_over_it() -> None:
    """One process: the kept pairs are, per expert, the earliest tokens up to capacity, and the output
    is the per-token sum over the kept experts alone."""
    torch.manual_seed(0)
    config = config_from_preset("tiny", capacity_factor=0.5)
    moe = MoE(config)
    for p in moe.parameters():
        torch.nn.init.normal_(p, std=0.1)
    x = torch.randn(1, 40, config.dim)
    out = moe(x)[0]
    pairs = 40 * config.top_k
    capacity = math.ceil(0.5 * pairs / config.n_experts)
    assert moe.capacity(pairs) == capacity
    logits = moe.router(x[0]).float()
    top, experts = logits.topk(config.top_k, dim=-1)
    gates = top.softmax(-1)
    taken = [0] * config.n_experts
    expected = torch.zeros_like(x[0], dtype=torch.float32)
    dropped = 0
    for e in range(config.n_experts):  # pairs in token order, as the stable sort leaves them
        for t in range(40):
            for j in range(config.top_k):
                if experts[t, j] != e:
                    continue
                if taken[e] >= capacity:
                    dropped += 1
                    continue
                taken[e] += 1
                w1, w2, w3 = moe.experts.w1[e], moe.experts.w2[e], moe.experts.w3[e]
                y = (torch.nn.functional.silu(x[0, t] @ w1.T) * (x[0, t] @ w3.T)) @ w2.T
                expected[t] += gates[t, j] * y
    assert dropped == moe.dropped > 0
    torch.testing.assert_close(out, expected.to(out.dtype), atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="capacity_factor"):
        config_from_preset("tiny", capacity_factor=-1.0)


def _idle_owner(rank: int, world: int) -> dict[str, Any]:
    """Every rank routes its tokens to rank 0's experts only: rank 1's experts get none."""
    from trainer.model import GroupedExperts, expert_outputs
    from trainer.parallelize import ExpertParallelExperts

    config = config_from_preset("tiny", n_experts=4)
    full = GroupedExperts(config)
    torch.manual_seed(0)
    for p in full.parameters():
        torch.nn.init.normal_(p, std=0.1)
    local = GroupedExperts(config_from_preset("tiny", n_experts=2))
    for name in ("w1", "w2", "w3"):
        getattr(local, name).data.copy_(getattr(full, name).data[2 * rank:2 * rank + 2])
    import torch.distributed as dist

    experts = ExpertParallelExperts(local, group=dist.group.WORLD, replicas=None, world_size=world)
    generator = torch.Generator().manual_seed(rank)
    x = torch.randn(7, config.dim, generator=generator, requires_grad=True)
    counts = [3, 4, 0, 0]
    probe = torch.randn(7, config.dim, generator=generator)
    out = experts(x, counts)
    (out * probe).sum().backward()
    expected = expert_outputs(x.detach(), counts, full.w1, full.w2, full.w3)
    return {"out": out.detach(), "expected": expected.detach(), "x_grad": x.grad, "x": x.detach(), "probe": probe,
            "w1_grad": local.w1.grad.clone()}


def test_a_rank_whose_experts_get_no_tokens_still_runs_the_backward() -> None:
    """Its backward must run the same all-to-alls as its peers' (a rank that skipped the one that
    brought it nothing would leave them waiting: the hang this guards against)."""
    from trainer.model import GroupedExperts, expert_outputs

    ranks = run_gloo(2, _idle_owner)
    config = config_from_preset("tiny", n_experts=4)
    full = GroupedExperts(config)
    torch.manual_seed(0)
    for p in full.parameters():
        torch.nn.init.normal_(p, std=0.1)
    for r in ranks:
        torch.testing.assert_close(r["out"], r["expected"], atol=1e-6, rtol=1e-5)
        x = r["x"].clone().requires_grad_()
        (expert_outputs(x, [3, 4, 0, 0], full.w1, full.w2, full.w3) * r["probe"]).sum().backward()
        torch.testing.assert_close(r["x_grad"], x.grad, atol=1e-6, rtol=1e-5)
    full.zero_grad()
    for r in ranks:  # the one-process gradient of the world-average loss
        (expert_outputs(r["x"], [3, 4, 0, 0], full.w1, full.w2, full.w3) * r["probe"]).sum().div(2).backward()
    torch.testing.assert_close(ranks[0]["w1_grad"], full.w1.grad[:2], atol=1e-6, rtol=1e-5)
    assert torch.count_nonzero(ranks[1]["w1_grad"]) == 0  # no tokens, a zero gradient (not none)
