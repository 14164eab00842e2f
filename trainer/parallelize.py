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

Expert parallelism dispatches tokens (`expert_dispatch="all_to_all"`, the default): each ep rank
stores and computes E/ep whole experts. The expert weights are DTensors on the expert mesh with the
placements FSDP2 would give them, (Replicate, Shard(0)), so the optimizer and checkpoints see the
same layout, but FSDP2 ignores them: nothing gathers them. `ExpertParallelExperts` sends each
routed token to the rank that owns its expert with one all-to-all over "ep", runs the local
experts, and sends the results back with a second; the backward does the same in reverse. The
routing (top-k, capacity) happens before, on each rank's own tokens (`trainer.model.MoE`), so the
result is the one-process result whatever the layout. Each expert's gradient then sums the
contributions of every token routed to it from the whole ep group; a hook all-reduces it over
"dp_replicate_e" and divides by world_size, which is the same world average FSDP2 takes of every
other gradient.

`expert_dispatch="gather"` is the earlier form, kept as the baseline of
tests/benchmarks/bench_expert_parallel.py: the experts are FSDP2-sharded on the expert mesh and
all-gathered for compute, so every rank runs all experts on its own tokens.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, cast

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor, nn

from trainer.model import (
    Attention,
    GroupedExperts,
    Transformer,
    TransformerBlock,
    apply_rotary,
    expert_outputs,
)

if TYPE_CHECKING:
    from trainer.parallel_dims import Meshes, ParallelDims

__all__ = ["ContextParallelAttention", "ExpertParallelExperts", "all_gather_sequence", "all_to_all", "parallelize",
           "shard_hf_model"]

ExpertDispatch = Literal["all_to_all", "gather"]


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


class _AllToAll(torch.autograd.Function):
    """Rows of `x` in blocks of `send` sizes go to the ranks of `group` in order; the result holds the
    blocks received, `recv` sizes, in rank order. The gradient goes back the same way reversed."""

    @staticmethod
    def forward(ctx: torch.autograd.function.FunctionCtx, x: Tensor, send: list[int], recv: list[int],
                group: dist.ProcessGroup) -> Tensor:
        ctx.send, ctx.recv, ctx.group = send, recv, group  # type: ignore[attr-defined]
        out = x.new_empty((sum(recv), *x.shape[1:]))
        dist.all_to_all_single(out, x.contiguous(), output_split_sizes=recv, input_split_sizes=send, group=group)
        return out

    @staticmethod
    def backward(ctx: torch.autograd.function.FunctionCtx, grad_out: Tensor) -> tuple[Tensor, None, None, None]:
        send, recv, group = ctx.send, ctx.recv, ctx.group  # type: ignore[attr-defined]
        grad_x = grad_out.new_empty((sum(send), *grad_out.shape[1:]))
        dist.all_to_all_single(grad_x, grad_out.contiguous(), output_split_sizes=send, input_split_sizes=recv,
                               group=group)
        return grad_x, None, None, None


def all_to_all(x: Tensor, send: list[int], recv: list[int], group: dist.ProcessGroup) -> Tensor:
    """Differentiable all-to-all of row blocks (see `_AllToAll`)."""
    moved: Tensor = _AllToAll.apply(x, send, recv, group)  # type: ignore[no-untyped-call]
    return moved


class ExpertParallelExperts(nn.Module):
    """`trainer.model.GroupedExperts` with its experts spread over the ep group: rank r owns experts
    [r*L, (r+1)*L), L = E / ep, and computes them for the tokens every ep rank routed to them.

    The parameters are the same (`w1`, `w2`, `w3`, under the same names), as DTensors sharded on
    their expert dimension over "ep"; the forward uses each one's local block. `bytes_moved`
    counts the bytes of tokens this rank sent to other ranks, forward only (the backward sends as
    many gradients)."""

    def __init__(self, experts: GroupedExperts, *, group: dist.ProcessGroup, replicas: dist.ProcessGroup | None,
                 world_size: int) -> None:
        super().__init__()
        self.w1, self.w2, self.w3 = experts.w1, experts.w2, experts.w3
        self.group = group
        self.replicas = replicas
        """The expert replicas ("dp_replicate_e"), None when there is one."""
        self.world_size = world_size
        self.bytes_moved = 0

    def _reduce(self, grad: Tensor) -> Tensor:
        """A local expert block's gradient, summed over the expert replicas and divided by
        world_size: the average FSDP2 takes of every other gradient. On each backward's own
        contribution (a hook on the local view, not on the parameter), so accumulation stays linear."""
        grad = grad.contiguous()
        if self.replicas is not None:
            dist.all_reduce(grad, group=self.replicas)
        return grad / self.world_size

    def _local(self, weight: Tensor) -> Tensor:
        from torch.distributed.tensor import DTensor

        local = weight.to_local() if isinstance(weight, DTensor) else weight
        if local.requires_grad:
            local.register_hook(self._reduce)
        return local

    def forward(self, x_ND: Tensor, tokens_per_expert: list[int]) -> Tensor:
        """Same contract as `GroupedExperts.forward`: `x_ND` sorted by expert, outputs in that order."""
        ep = dist.get_world_size(self.group)
        me = dist.get_rank(self.group)
        E = len(tokens_per_expert)
        L = E // ep
        # How many tokens each rank sends each of this rank's experts: [ep, L], row = source rank.
        counts_E = torch.tensor(tokens_per_expert, dtype=torch.long)
        received_E = torch.empty_like(counts_E)
        dist.all_to_all_single(received_E, counts_E, group=self.group)
        from_rank_L = received_E.view(ep, L)
        send = counts_E.view(ep, L).sum(1).tolist()
        recv = from_rank_L.sum(1).tolist()
        self.bytes_moved += (sum(send) - send[me]) * x_ND.shape[1] * x_ND.element_size()
        arrived = all_to_all(x_ND, send, recv, self.group)  # by source rank, then by local expert
        # Regroup by local expert (every source's tokens for expert 0 first, ...), compute, undo.
        starts = (torch.cumsum(from_rank_L.reshape(-1), 0) - from_rank_L.reshape(-1)).view(ep, L).tolist()
        counts = from_rank_L.tolist()
        index = torch.cat([torch.arange(starts[s][e], starts[s][e] + counts[s][e]) for e in range(L) for s in range(ep)]
                          or [torch.zeros(0, dtype=torch.long)]).to(x_ND.device)
        w1, w2, w3 = (self._local(w).to(x_ND.dtype) for w in (self.w1, self.w2, self.w3))
        out = expert_outputs(arrived[index], from_rank_L.sum(0).tolist(), w1, w2, w3)
        back = torch.zeros_like(out).index_copy(0, index, out)
        return all_to_all(back, recv, send, self.group)


def _expert_parallel(model: Transformer, meshes: Meshes, world_size: int) -> set[nn.Parameter]:
    """Swap every block's experts for `ExpertParallelExperts` over the expert mesh; returns the
    expert parameters, which FSDP2 must ignore."""
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    mesh = meshes.expert
    ep_group = mesh.get_group("ep")
    replicas = mesh.get_group("dp_replicate_e") if mesh.size(0) > 1 else None
    ignored: set[nn.Parameter] = set()
    for block in _blocks(model):
        experts = cast(GroupedExperts, block.moe.experts)
        for name in ("w1", "w2", "w3"):
            weight = getattr(experts, name)
            param = nn.Parameter(distribute_tensor(weight.data, mesh, [Replicate(), Shard(0)], src_data_rank=None))
            setattr(experts, name, param)
            ignored.add(param)
        block.moe.experts = ExpertParallelExperts(  # type: ignore[assignment]
            experts, group=ep_group, replicas=replicas, world_size=world_size)
    return ignored


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
    expert_dispatch: ExpertDispatch = "all_to_all",
) -> Transformer:
    """Apply context parallelism (cp > 1), expert parallelism and dual-mesh FSDP2 to `model` in
    place; returns it.

    `param_dtype` is the compute dtype of unsharded parameters (bf16 on GPU); gradients are
    reduced in float32 and the sharded parameters stay in their own dtype. `expert_dispatch` picks
    how experts meet their tokens (module docstring).
    """
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    n_experts = model.config.n_experts
    if n_experts % dims.ep:
        raise ValueError(f"ep ({dims.ep}) must divide the model's n_experts ({n_experts})")
    if expert_dispatch not in ("all_to_all", "gather"):
        raise ValueError(f"expert_dispatch must be all_to_all or gather, got {expert_dispatch!r}")
    if dims.cp > 1:
        cp_group = meshes.batch.get_group("cp")
        for block in _blocks(model):
            block.attention = ContextParallelAttention(block.attention, cp_group=cp_group)  # type: ignore[assignment]

    # Blocks take the rotary cos/sin tables as forward inputs; FSDP2 must not cast them to bf16,
    # which would round the angles of far positions. Activations take the weights' dtype anyway.
    mp_policy = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=torch.float32,
                                     cast_forward_inputs=False)
    ignored = _expert_parallel(model, meshes, dims.world_size) if expert_dispatch == "all_to_all" else set()
    for block in _blocks(model):
        if expert_dispatch == "gather":
            fully_shard(block.moe.experts, mesh=meshes.expert, mp_policy=mp_policy)
        fully_shard(block, mesh=meshes.dense, mp_policy=mp_policy, ignored_params=ignored or None)
    # The head's all-gather is the last of the forward, so it gains nothing from resharding early.
    fully_shard([model.norm, model.output], mesh=meshes.dense, mp_policy=mp_policy,
                reshard_after_forward=False)
    fully_shard(model, mesh=meshes.dense, mp_policy=mp_policy, ignored_params=ignored or None)
    return model


def shard_hf_model(model: nn.Module, dims: ParallelDims, meshes: Meshes) -> nn.Module:
    """FSDP2 over a Hugging Face causal LM, in place: each decoder layer on its own, then the root
    (embeddings, final norm and lm head, tied or not), all on the dense mesh. Parameters become
    Shard(0) DTensors, stacked experts along their expert dimension, which is what the sharded Muon
    and `trainer.optim.hf_muon`'s layouts expect. Context and expert parallelism need the trainer's
    own model: cp and ep must be 1."""
    from torch.distributed.fsdp import fully_shard

    if dims.cp != 1 or dims.ep != 1:
        raise ValueError(f"a Hugging Face policy is sharded with FSDP2 only; cp ({dims.cp}) and ep ({dims.ep}) must be 1")
    decoder = model.get_decoder()  # type: ignore[operator]
    layers = getattr(decoder, "layers", None)
    if not isinstance(layers, nn.ModuleList) or not len(layers):
        raise ValueError(f"{type(model).__name__}: no decoder layers (get_decoder().layers) to shard")
    for layer in layers:
        fully_shard(layer, mesh=meshes.dense)
    fully_shard(model, mesh=meshes.dense)
    return model
