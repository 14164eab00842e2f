"""The Hugging Face policy across processes (issue 21, item 5): FSDP2 over a `transformers` model,
the sharded Muon over its per-head and per-expert layouts (Llama; Mixtral with its experts stacked
and gate/up fused), and one RL step on 2 gloo ranks equal to the same step in one process.

The step is `trainer.rl.loop.update`: the policy gradient and the feedback KL (chunked, run as the
model's head inside its FSDP2 forward) on each rank's share of the trajectories, hints on rank 0
only, then one optimizer step. Every gradient and every parameter after the step, gathered from the
shards, equals the one-process values; the sampling replica on each rank holds the new weights.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Literal

import pytest

pytest.importorskip("transformers")

import torch

from tests.trainer.dist import run_gloo
from tests.trainer.test_rl_objective import _share
from trainer.optim.muon_reference import AdamWConfig, MuonConfig
from trainer.parallel_dims import ParallelDims
from trainer.recipe import OptimizerConfig
from trainer.rl.config import RLConfig
from trainer.rl.feedback import DETECTORS, make_detector
from trainer.rl.loop import feedback, update
from trainer.runtime import Runtime
from trainer.testing import byte_bpe_tokenizer, tiny_causal_lm

SEED = 0
GRAD_ATOL = 1e-7
GRAD_RTOL = 1e-4
PARAM_ATOL = 1e-5  # one step moves weights by ~1e-3 (AdamW) to ~1e-2 (Muon)


def _full(tensor: torch.Tensor) -> torch.Tensor:
    return (tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor).detach().clone()


def _step(rank: int, world: int, family: Literal["llama", "mixtral"], tmp: str) -> dict[str, Any]:
    from trainer.optim.hf_muon import build_hf_optimizer
    from trainer.optim.sharded_muon import ShardedMuonWithAdamW
    from trainer.parallelize import shard_hf_model
    from trainer.rl.hf_policy import HFPolicy

    tokenizer = byte_bpe_tokenizer()
    model = tiny_causal_lm(tokenizer, family=family, seed=SEED)
    options: dict[str, Any] = {"max_new_tokens": 8, "temperature": 1.0, "device": torch.device("cpu")}
    if world > 1:
        dims = ParallelDims(dp_shard=world, world_size=world)
        options["rollout_model"] = copy.deepcopy(model)
        shard_hf_model(model, dims, dims.build_meshes("cpu"))
    policy = HFPolicy(model, tokenizer, **options)
    optimizer = build_hf_optimizer(OptimizerConfig(name="muon", muon=MuonConfig(lr=0.02, ns_dtype="float32"),
                                                   adamw=AdamWConfig(lr=1e-3, weight_decay=0.1)),
                                   model, distributed=world > 1)
    assert isinstance(optimizer, ShardedMuonWithAdamW) == (world > 1)
    trajectories = _share(rank, world)
    hints, _ = feedback(trajectories, [make_detector(name) for name in DETECTORS])
    runtime = Runtime(rank=rank, world_size=world, device=torch.device("cpu"), out=Path(tmp))
    pg, kl = update(policy, optimizer, trajectories, hints, config=RLConfig(tasks="unused"), runtime=runtime)
    params = {name: _full(p) for name, p in model.named_parameters()}
    replica = {name: p.detach().clone() for name, p in policy.rollout_model.named_parameters()}
    return {"pg": pg, "kl": kl, "hints": len(hints), "kl_path": policy.kl_path,
            "grads": {name: _full(p.grad) for name, p in model.named_parameters() if p.grad is not None},
            "params": params, "replica_matches": all(torch.equal(replica[n], params[n]) for n in params),
            "sharded": sum(hasattr(p, "full_tensor") for p in model.parameters())}


@pytest.mark.parametrize("family", ["llama", "mixtral"])
def test_an_rl_step_on_two_ranks_equals_one_process(family: Literal["llama", "mixtral"], tmp_path: Path) -> None:
    single = _step(0, 1, family, str(tmp_path / "one"))
    ranks = run_gloo(2, _step, family, str(tmp_path / "two"))
    assert single["hints"] >= 1 and [r["hints"] for r in ranks] == [single["hints"], 0]  # hints on rank 0 only
    assert single["kl_path"] == "chunked" and all(r["kl_path"] == "chunked" for r in ranks)
    assert all(r["sharded"] == len(single["params"]) for r in ranks)  # every parameter a DTensor shard
    assert single["grads"].keys() == ranks[0]["grads"].keys() == single["params"].keys()
    for name, expected in single["grads"].items():
        torch.testing.assert_close(ranks[0]["grads"][name], expected, atol=GRAD_ATOL, rtol=GRAD_RTOL,
                                   msg=lambda m, n=name: f"gradient {n}: {m}")
    initial = tiny_causal_lm(byte_bpe_tokenizer(), family=family, seed=SEED)
    for name, before in initial.named_parameters():
        expected = single["params"][name]
        assert not torch.equal(expected, before.detach()), name  # the step moved it
        for rank in ranks:
            torch.testing.assert_close(rank["params"][name], expected, atol=PARAM_ATOL, rtol=0,
                                       msg=lambda m, n=name: f"parameter {n}: {m}")
    assert all(r["replica_matches"] for r in ranks)
    assert sum(r["pg"] for r in ranks) / 2 == pytest.approx(single["pg"], rel=1e-5, abs=1e-6)
    assert sum(r["kl"] for r in ranks) / 2 == pytest.approx(single["kl"], rel=1e-4, abs=1e-7)
