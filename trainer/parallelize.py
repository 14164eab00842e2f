"""How the model is distributed: dual-mesh HSDP with FSDP2, and context parallelism for attention.

`parallelize(model, dims, meshes)` changes a `trainer.model.Transformer` in place:

1. With cp > 1, every block's `attention` is replaced by a `ContextParallelAttention` that holds
   the very same `wq`/`wk`/`wv`/`wo` modules (parameter names do not change). Each cp rank then
   runs the model on its own time slice of the sequences (rank c holds positions
   [c*T/cp, (c+1)*T/cp)).
2. The stacked expert weights of every layer (`layers.i.moe.experts`) are sharded with FSDP2 on the
   expert mesh ("dp_replicate_e", "ep"): Shard(0) of `[E, ...]`, so each ep rank stores E/ep whole
   experts, and the experts are replicated over "dp_replicate_e". The ep group may be part of one
   dense shard group or several whole ones (experts sharded wider than the dense weights, across
   the dense replicas; see `trainer.parallel_dims`).
3. Every block, then `norm` + `output` together, then the root (which keeps `tok_embeddings`) are
   sharded on the dense mesh ("dp_replicate", "dp_shard_cp"): sharded inside a replica,
   replicated across replicas. The root is wrapped last, as FSDP2 requires.

Both meshes span all ranks, so FSDP2 averages every gradient over the same world_size ranks, each
exactly once: a dense gradient is reduce-scattered over "dp_shard_cp" and all-reduced over
"dp_replicate"; an expert gradient is reduced only by its own module's FSDP2 state, reduce-scattered
over "ep" and all-reduced over "dp_replicate_e". When "ep" spans the dense replicas, its
reduce-scatter already covers them and "dp_replicate_e" is smaller (1 when ep = world_size); the
dense "dp_replicate" all-reduce never touches expert gradients. Every rank's gradient comes from
its own tokens (the batch mesh decides which), so the world average scaled by the training step's
loss factor is the gradient of the global mean loss (see `trainer.pretrain.loop.train_step`).

Context parallelism here is the simple exact form: each rank all-gathers the keys and values of
its cp group and attends its own queries to all of them under a causal mask written in global
positions, with RoPE applied at global positions. It keeps the whole K/V of a sequence on every
cp rank (memory O(T) per rank, not O(T/cp)) and has no ring overlap or load balancing.

Expert parallelism here is expert *weight* sharding: each ep rank stores E/ep experts, and FSDP2
all-gathers them for compute, so every rank runs all experts on its own tokens. There is no
all-to-all token dispatch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor, nn

from trainer.model import Attention, Transformer, TransformerBlock, apply_rotary

if TYPE_CHECKING:
    from trainer.parallel_dims import Meshes, ParallelDims

__all__ = ["ContextParallelAttention", "all_gather_sequence", "parallelize"]


class _AllGatherSequence(torch.autograd.Function):
    """Concatenate every cp rank's slice along `dim`; the gradient of a slice is the sum, over the
    ranks, of the gradients that flowed into their copies of it."""

    @staticmethod
    def forward(ctx: torch.autograd.function.FunctionCtx, x: Tensor, group: dist.ProcessGroup, dim: int) -> Tensor:
        ctx.group, ctx.dim = group, dim  # type: ignore[attr-defined]
        parts = [torch.empty_like(x) for _ in range(dist.get_world_size(group))]
        dist.all_gather(parts, x.contiguous(), group=group)
        return torch.cat(parts, dim=dim)

    @staticmethod
    def backward(ctx: torch.autograd.function.FunctionCtx, grad_full: Tensor) -> tuple[Tensor, None, None]:
        group, dim = ctx.group, ctx.dim  # type: ignore[attr-defined]
        # gloo has no reduce-scatter; all-reduce and keep this rank's slice.
        grad_full = grad_full.contiguous()
        dist.all_reduce(grad_full, group=group)
        size = grad_full.shape[dim] // dist.get_world_size(group)
        return grad_full.narrow(dim, dist.get_rank(group) * size, size), None, None


def all_gather_sequence(x: Tensor, group: dist.ProcessGroup, dim: int) -> Tensor:
    """The full sequence from each cp rank's slice of it, differentiably."""
    gathered: Tensor = _AllGatherSequence.apply(x, group, dim)  # type: ignore[no-untyped-call]
    return gathered


class ContextParallelAttention(nn.Module):
    """`trainer.model.Attention` for a time slice of each sequence: same projections, RoPE at global
    positions, keys and values gathered from the cp group, causal mask in global positions.

    It computes exactly what `Attention` computes on the whole sequence, restricted to this rank's
    queries (tests/trainer/test_dual_mesh.py compares the two).
    """

    def __init__(self, attention: Attention, *, cp_group: dist.ProcessGroup) -> None:
        super().__init__()
        self.n_heads = attention.n_heads
        self.n_kv_heads = attention.n_kv_heads
        self.head_dim = attention.head_dim
        # The same modules, under the same names: checkpoints and optimizer layouts are unchanged.
        self.wq = attention.wq
        self.wk = attention.wk
        self.wv = attention.wv
        self.wo = attention.wo
        self.cp_group = cp_group

    def forward(self, x_BTD: Tensor, cos_TS: Tensor, sin_TS: Tensor) -> Tensor:
        B, T, _ = x_BTD.shape  # T: this rank's slice
        cp_size, cp_rank = dist.get_world_size(self.cp_group), dist.get_rank(self.cp_group)
        start = cp_rank * T
        q_BHTS = self.wq(x_BTD).view(B, T, self.n_heads, self.head_dim).transpose(1, 2)
        k_BKTS = self.wk(x_BTD).view(B, T, self.n_kv_heads, self.head_dim).transpose(1, 2)
        v_BKTS = self.wv(x_BTD).view(B, T, self.n_kv_heads, self.head_dim).transpose(1, 2)
        q_BHTS = apply_rotary(q_BHTS, cos_TS[start:start + T], sin_TS[start:start + T])
        k_BKTS = apply_rotary(k_BKTS, cos_TS[start:start + T], sin_TS[start:start + T])
        k_BKUS = all_gather_sequence(k_BKTS, self.cp_group, dim=2)  # U: the whole sequence, cp*T
        v_BKUS = all_gather_sequence(v_BKTS, self.cp_group, dim=2)
        # Each key/value head serves n_heads / n_kv_heads query heads (what enable_gqa does); repeated
        # explicitly, since GPU kernels that take a mask do not all take grouped heads.
        k_BHUS = k_BKUS.repeat_interleave(self.n_heads // self.n_kv_heads, dim=1)
        v_BHUS = v_BKUS.repeat_interleave(self.n_heads // self.n_kv_heads, dim=1)
        query_pos_T = torch.arange(start, start + T, device=x_BTD.device)
        key_pos_U = torch.arange(cp_size * T, device=x_BTD.device)
        causal_TU = key_pos_U[None, :] <= query_pos_T[:, None]
        out_BHTS = F.scaled_dot_product_attention(q_BHTS, k_BHUS, v_BHUS, attn_mask=causal_TU)
        out_BTD: Tensor = self.wo(out_BHTS.transpose(1, 2).reshape(B, T, self.n_heads * self.head_dim))
        return out_BTD


def _blocks(model: Transformer) -> list[TransformerBlock]:
    return [cast(TransformerBlock, block) for block in model.layers]


def parallelize(
    model: Transformer,
    dims: ParallelDims,
    meshes: Meshes,
    *,
    param_dtype: torch.dtype | None = None,
) -> Transformer:
    """Apply context parallelism (cp > 1) and dual-mesh FSDP2 to `model` in place; returns it.

    `param_dtype` is the compute dtype of unsharded parameters (bf16 on GPU); gradients are
    reduced in float32 and the sharded parameters stay in their own dtype.
    """
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    n_experts = model.config.n_experts
    if n_experts % dims.ep:
        raise ValueError(f"ep ({dims.ep}) must divide the model's n_experts ({n_experts})")
    if dims.cp > 1:
        cp_group = meshes.batch.get_group("cp")
        for block in _blocks(model):
            block.attention = ContextParallelAttention(block.attention, cp_group=cp_group)  # type: ignore[assignment]

    # Blocks take the rotary cos/sin tables as forward inputs; FSDP2 must not cast them to bf16,
    # which would round the angles of far positions. Activations take the weights' dtype anyway.
    mp_policy = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=torch.float32,
                                     cast_forward_inputs=False)
    for block in _blocks(model):
        fully_shard(block.moe.experts, mesh=meshes.expert, mp_policy=mp_policy)
        fully_shard(block, mesh=meshes.dense, mp_policy=mp_policy)
    # The head's all-gather is the last of the forward, so it gains nothing from resharding early.
    fully_shard([model.norm, model.output], mesh=meshes.dense, mp_policy=mp_policy,
                reshard_after_forward=False)
    fully_shard(model, mesh=meshes.dense, mp_policy=mp_policy)
    return model
