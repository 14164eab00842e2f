"""The model: a decoder-only transformer with RMSNorm, RoPE, grouped-query attention and a top-k
mixture-of-experts FFN in every layer, plus `matrix_layouts`, which tells the optimizer how each
weight splits into independent matrices (per attention head, per expert, or whole).

This module says what the model *is*; how it is sharded lives in `trainer/parallelize.py`.

Shape legend for tensor-name suffixes:
    B batch, T sequence position, D model dim, V vocabulary,
    H query heads, K key/value heads, S head dim,
    N tokens in the batch (B*T), E experts, F expert hidden dim, k experts per token (top_k).
"""

from __future__ import annotations

import math
import re
import zlib
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Literal, cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = [
    "PRESETS",
    "Attention",
    "GroupedExperts",
    "MatrixLayout",
    "MoE",
    "ModelConfig",
    "RMSNorm",
    "Transformer",
    "TransformerBlock",
    "apply_rotary",
    "config_from_preset",
    "count_parameters",
    "expert_outputs",
    "matrix_layouts",
    "rotary_tables",
]


@dataclass(kw_only=True, slots=True)
class ModelConfig:
    """Architecture of a `Transformer`."""

    vocab_size: int
    """Number of token ids; the embedding and the lm head have this many rows."""
    dim: int
    """Width of the residual stream."""
    n_layers: int
    """Number of transformer blocks."""
    n_heads: int
    """Query heads; `dim` must divide evenly among them."""
    n_kv_heads: int
    """Key/value heads (grouped-query attention); must divide `n_heads`."""
    n_experts: int
    """Experts in every MoE layer."""
    top_k: int
    """Experts each token is routed to."""
    expert_hidden: int
    """Hidden width of each SwiGLU expert."""
    max_seq_len: int
    """Longest sequence the rotary tables cover."""
    rope_theta: float = 10000.0
    """Base of the rotary frequencies."""
    norm_eps: float = 1e-5
    """Epsilon inside RMSNorm."""
    capacity_factor: float = 0.0
    """Expert capacity: each expert takes at most ceil(capacity_factor * pairs / n_experts) of the
    (token, expert) pairs of one forward on one rank, the earliest tokens first; the pairs over it
    are dropped (that expert adds nothing to the token, whose other experts and residual remain).
    0 is dropless."""

    def __post_init__(self) -> None:
        for name in ("vocab_size", "dim", "n_layers", "n_heads", "n_kv_heads", "n_experts", "top_k",
                     "expert_hidden", "max_seq_len"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.dim % self.n_heads:
            raise ValueError(f"dim ({self.dim}) must be divisible by n_heads ({self.n_heads})")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"n_heads ({self.n_heads}) must be divisible by n_kv_heads ({self.n_kv_heads})")
        if self.head_dim % 2:
            # RoPE rotates pairs of channels.
            raise ValueError(f"dim // n_heads must be even for RoPE, got head_dim {self.head_dim}")
        if self.capacity_factor < 0:
            raise ValueError(f"capacity_factor must be >= 0 (0: dropless), got {self.capacity_factor}")
        if self.top_k > self.n_experts:
            raise ValueError(f"top_k ({self.top_k}) must be <= n_experts ({self.n_experts})")
        if self.rope_theta <= 0:
            raise ValueError(f"rope_theta must be > 0, got {self.rope_theta}")
        if self.norm_eps <= 0:
            raise ValueError(f"norm_eps must be > 0, got {self.norm_eps}")

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads


PRESETS: dict[str, ModelConfig] = {
    # CPU tests: small enough for multi-process gloo tests to take seconds.
    "tiny": ModelConfig(vocab_size=384, dim=64, n_layers=2, n_heads=4, n_kv_heads=2, n_experts=8,
                        top_k=2, expert_hidden=96, max_seq_len=128),
    # A quick real run (~141M parameters, ~53M active per token; embeddings are 34M of them).
    "small": ModelConfig(vocab_size=32768, dim=512, n_layers=8, n_heads=8, n_kv_heads=4, n_experts=16,
                         top_k=2, expert_hidden=512, max_seq_len=2048),
    # ~1.08B parameters in total (~0.28B active per token): trains on one H200 with room for activations.
    "1b": ModelConfig(vocab_size=32768, dim=1536, n_layers=12, n_heads=12, n_kv_heads=4, n_experts=16,
                      top_k=2, expert_hidden=1024, max_seq_len=4096, rope_theta=500000.0),
}


def config_from_preset(name: str, **overrides: object) -> ModelConfig:
    """The preset `name` with some fields replaced; an unknown name lists the valid ones."""
    if name not in PRESETS:
        raise ValueError(f"unknown model preset {name!r}; valid presets: {', '.join(sorted(PRESETS))}")
    return replace(PRESETS[name], **overrides)  # type: ignore[arg-type]


class RMSNorm(nn.Module):
    def __init__(self, dim: int, *, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: Tensor) -> Tensor:
        # Normalize in float32 so bf16 activations do not lose the mean of squares.
        x32 = x.float()
        normed = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return normed.type_as(x) * self.weight


def rotary_tables(head_dim: int, max_seq_len: int, theta: float) -> tuple[Tensor, Tensor]:
    """cos and sin tables [max_seq_len, head_dim // 2] for rotating channel pairs (i, i + S/2)."""
    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    angles_TS = torch.outer(torch.arange(max_seq_len, dtype=torch.float64), inv_freq)
    return angles_TS.cos().float(), angles_TS.sin().float()


def apply_rotary(x_BHTS: Tensor, cos_TS: Tensor, sin_TS: Tensor) -> Tensor:
    half = x_BHTS.shape[-1] // 2
    x1, x2 = x_BHTS[..., :half].float(), x_BHTS[..., half:].float()
    rotated = torch.cat((x1 * cos_TS - x2 * sin_TS, x1 * sin_TS + x2 * cos_TS), dim=-1)
    return rotated.type_as(x_BHTS)


class Attention(nn.Module):
    """Causal grouped-query attention. Rows of `wq`/`wk`/`wv` and columns of `wo` are grouped per head
    (head h owns rows [h*S, (h+1)*S)), which is what `matrix_layouts` tells the optimizer."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.n_heads = config.n_heads
        self.n_kv_heads = config.n_kv_heads
        self.head_dim = config.head_dim
        self.wq = nn.Linear(config.dim, config.n_heads * config.head_dim, bias=False)
        self.wk = nn.Linear(config.dim, config.n_kv_heads * config.head_dim, bias=False)
        self.wv = nn.Linear(config.dim, config.n_kv_heads * config.head_dim, bias=False)
        self.wo = nn.Linear(config.n_heads * config.head_dim, config.dim, bias=False)

    def forward(self, x_BTD: Tensor, cos_TS: Tensor, sin_TS: Tensor) -> Tensor:
        B, T, _ = x_BTD.shape
        q_BHTS = self.wq(x_BTD).view(B, T, self.n_heads, self.head_dim).transpose(1, 2)
        k_BKTS = self.wk(x_BTD).view(B, T, self.n_kv_heads, self.head_dim).transpose(1, 2)
        v_BKTS = self.wv(x_BTD).view(B, T, self.n_kv_heads, self.head_dim).transpose(1, 2)
        q_BHTS = apply_rotary(q_BHTS, cos_TS[:T], sin_TS[:T])
        k_BKTS = apply_rotary(k_BKTS, cos_TS[:T], sin_TS[:T])
        out_BHTS = F.scaled_dot_product_attention(q_BHTS, k_BKTS, v_BKTS, is_causal=True,
                                                  enable_gqa=self.n_kv_heads != self.n_heads)
        return self.wo(out_BHTS.transpose(1, 2).reshape(B, T, self.n_heads * self.head_dim))


class GroupedExperts(nn.Module):
    """E SwiGLU experts whose weights are stacked, so that FSDP shards them along the expert axis and
    the optimizer orthogonalizes each expert's matrix on its own."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        E, F_, D = config.n_experts, config.expert_hidden, config.dim
        self.w1 = nn.Parameter(torch.empty(E, F_, D))
        self.w2 = nn.Parameter(torch.empty(E, D, F_))
        self.w3 = nn.Parameter(torch.empty(E, F_, D))

    def forward(self, x_ND: Tensor, tokens_per_expert: list[int]) -> Tensor:
        """`x_ND` holds the routed tokens sorted by expert: the first tokens_per_expert[0] rows go to
        expert 0, and so on."""
        return expert_outputs(x_ND, tokens_per_expert, self.w1, self.w2, self.w3)


def expert_outputs(x_ND: Tensor, tokens_per_expert: list[int], w1_EFD: Tensor, w2_EDF: Tensor,
                   w3_EFD: Tensor) -> Tensor:
    """SwiGLU expert e of the stacked weights on its block of `x_ND` (sorted by expert), for every e."""
    outputs = []
    for e, x_nD in enumerate(torch.split(x_ND, tokens_per_expert)):
        if x_nD.shape[0] == 0:
            continue
        hidden_nF = F.silu(x_nD @ w1_EFD[e].T) * (x_nD @ w3_EFD[e].T)
        outputs.append(hidden_nF @ w2_EDF[e].T)
    if not outputs:
        # No tokens: a zero-size result that still depends on the input and the weights, so that every
        # rank's backward runs the same nodes (under expert parallelism, the all-to-all that brought
        # the empty input: a rank that skipped it would leave its peers waiting).
        return x_ND * 0 + 0 * (w1_EFD.sum() + w2_EDF.sum() + w3_EFD.sum())
    return torch.cat(outputs)


class MoE(nn.Module):
    """Top-k routing: a softmax over each token's k best router logits weighs the k experts' outputs.

    With `capacity_factor` > 0 an expert takes at most its capacity of the forward's (token, expert)
    pairs, the earliest tokens first; `dropped` counts the pairs over it. The routing happens here,
    on the rank's own tokens, so it is the same whether `experts` is computed in place or its
    tokens are dispatched to the ranks that own the experts (`trainer.parallelize`).
    """

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.n_experts = config.n_experts
        self.top_k = config.top_k
        self.capacity_factor = config.capacity_factor
        self.router = nn.Linear(config.dim, config.n_experts, bias=False)
        self.experts = GroupedExperts(config)
        self.aux_loss: Tensor | None = None
        """Switch-style load-balancing loss of the latest forward (1.0 when the load is uniform)."""
        self.dropped = 0
        """(token, expert) pairs over capacity in the latest forward (0 when dropless)."""

    def capacity(self, pairs: int) -> int | None:
        """Most pairs one expert takes in a forward of `pairs` (token, expert) pairs; None: dropless."""
        if self.capacity_factor <= 0:
            return None
        return math.ceil(self.capacity_factor * pairs / self.n_experts)

    def forward(self, x_BTD: Tensor) -> Tensor:
        B, T, D = x_BTD.shape
        x_ND = x_BTD.reshape(B * T, D)
        logits_NE = self.router(x_ND).float()
        top_logits_Nk, top_experts_Nk = logits_NE.topk(self.top_k, dim=-1)
        gates_Nk = top_logits_Nk.softmax(dim=-1)

        # Sort the (token, expert) pairs by expert so each expert sees one contiguous block.
        flat_experts = top_experts_Nk.reshape(-1)
        order = torch.argsort(flat_experts, stable=True)
        tokens_per_expert_E = torch.bincount(flat_experts, minlength=self.n_experts)
        kept_per_expert_E = tokens_per_expert_E
        capacity = self.capacity(flat_experts.numel())
        if capacity is not None:
            # A pair's place in its expert's block, in token order (the sort is stable).
            starts_E = torch.cumsum(tokens_per_expert_E, 0) - tokens_per_expert_E
            place = torch.arange(order.numel(), device=order.device) - starts_E[flat_experts[order]]
            order = order[place < capacity]
            kept_per_expert_E = tokens_per_expert_E.clamp(max=capacity)
        self.dropped = flat_experts.numel() - order.numel()
        token_of_pair = order // self.top_k
        routed = self.experts(x_ND[token_of_pair], kept_per_expert_E.tolist())
        # Weigh and sum the k expert outputs of each token in float32, then return the experts' dtype
        # (bf16 under autocast, like any linear layer's output).
        weighted = routed.float() * gates_Nk.reshape(-1)[order, None]
        out_ND = torch.zeros_like(x_ND, dtype=torch.float32).index_add_(0, token_of_pair, weighted)

        fraction_routed_E = tokens_per_expert_E.float() / flat_experts.numel()
        mean_prob_E = logits_NE.softmax(dim=-1).mean(dim=0)
        self.aux_loss = self.n_experts * (fraction_routed_E * mean_prob_E).sum()
        return out_ND.to(routed.dtype).view(B, T, D)


class TransformerBlock(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.attention_norm = RMSNorm(config.dim, eps=config.norm_eps)
        self.attention = Attention(config)
        self.ffn_norm = RMSNorm(config.dim, eps=config.norm_eps)
        self.moe = MoE(config)

    def forward(self, x_BTD: Tensor, cos_TS: Tensor, sin_TS: Tensor) -> Tensor:
        h_BTD = x_BTD + self.attention(self.attention_norm(x_BTD), cos_TS, sin_TS)
        return h_BTD + self.moe(self.ffn_norm(h_BTD))


class Transformer(nn.Module):
    rope_cos: Tensor
    rope_sin: Tensor

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.tok_embeddings = nn.Embedding(config.vocab_size, config.dim)
        self.layers = nn.ModuleList(TransformerBlock(config) for _ in range(config.n_layers))
        self.norm = RMSNorm(config.dim, eps=config.norm_eps)
        self.output = nn.Linear(config.dim, config.vocab_size, bias=False)
        # Not persistent: they are derived from the config, and `init_weights` rebuilds them after a
        # model built on the meta device is materialized.
        cos_TS, sin_TS = rotary_tables(config.head_dim, config.max_seq_len, config.rope_theta)
        self.register_buffer("rope_cos", cos_TS, persistent=False)
        self.register_buffer("rope_sin", sin_TS, persistent=False)
        if self.rope_cos.device.type != "meta":
            # Built on the meta device, the model is materialized (`to_empty`) and initialized later.
            self.init_weights(seed=0)

    def forward(self, tokens_BT: Tensor, head: Callable[[Tensor, Tensor], Tensor] | None = None) -> Tensor:
        """Logits [B, T, V]; with ``head``, ``head(normed hidden [B, T, D], output weight [V, D])``
        instead, so that a loss over the vocabulary can be computed a chunk at a time. The head runs
        inside this forward, where FSDP2 has gathered the output weight (and its gradient takes
        FSDP2's reduce-scatter like any other)."""
        if tokens_BT.shape[1] > self.config.max_seq_len:
            raise ValueError(f"sequence length {tokens_BT.shape[1]} exceeds max_seq_len {self.config.max_seq_len}")
        h_BTD = self.tok_embeddings(tokens_BT)
        for layer in self.layers:
            h_BTD = layer(h_BTD, self.rope_cos, self.rope_sin)
        if head is not None:
            return head(self.norm(h_BTD), self.output.weight)
        return self.output(self.norm(h_BTD))

    def aux_loss(self) -> Tensor:
        """Mean over layers of the load-balancing loss of the latest forward."""
        losses = [cast(TransformerBlock, layer).moe.aux_loss for layer in self.layers]
        if any(loss is None for loss in losses):
            raise RuntimeError("aux_loss() needs a forward pass first")
        return torch.stack(losses).mean()  # type: ignore[arg-type]

    @torch.no_grad()
    def init_weights(self, seed: int) -> None:
        """Deterministic initialization that does not depend on device, sharding or parameter order:
        each parameter draws from its own CPU generator seeded by (seed, its name). Works on plain
        parameters and on FSDP2-sharded (DTensor) ones, including after `to_empty` from meta."""
        from torch.distributed.tensor import DTensor, distribute_tensor

        # Residual-branch outputs get a smaller std so the residual stream does not grow with depth.
        out_std = 0.02 / math.sqrt(2 * self.config.n_layers)
        for name, param in self.named_parameters():
            if re.search(r"norm\.weight$", name):
                full = torch.ones(param.shape, device="cpu")
            else:
                std = out_std if re.search(r"(wo\.weight|experts\.w2)$", name) else 0.02
                generator = torch.Generator().manual_seed(seed * 1_000_003 + zlib.crc32(name.encode()))
                full = torch.randn(param.shape, generator=generator, device="cpu") * std
            if isinstance(param, DTensor):
                # Every rank computed the same full tensor, so each keeps its own shard without
                # communication (src_data_rank=None).
                full = distribute_tensor(full.to(param.device_mesh.device_type), param.device_mesh,
                                         param.placements, src_data_rank=None)
                param.to_local().copy_(full.to_local())
            else:
                param.copy_(full)
        cos_TS, sin_TS = rotary_tables(self.config.head_dim, self.config.max_seq_len, self.config.rope_theta)
        self.rope_cos.copy_(cos_TS)
        self.rope_sin.copy_(sin_TS)


def count_parameters(config: ModelConfig) -> tuple[int, int]:
    """(total, active per token) parameter counts, computed from the config alone."""
    D, S = config.dim, config.head_dim
    attention = D * S * (2 * config.n_heads + 2 * config.n_kv_heads)
    expert = 3 * D * config.expert_hidden
    per_layer_fixed = attention + D * config.n_experts + 2 * D
    embeddings = 2 * config.vocab_size * D + D
    total = embeddings + config.n_layers * (per_layer_fixed + config.n_experts * expert)
    active = embeddings + config.n_layers * (per_layer_fixed + config.top_k * expert)
    return total, active


@dataclass(frozen=True, kw_only=True, slots=True)
class MatrixLayout:
    """How one parameter splits into independent matrices ("units") for the optimizer.

    kind:
      "whole"      a 2-D matrix that is one unit;
      "row_blocks" a 2-D [units*a, b] matrix whose unit u is rows [u*a, (u+1)*a) (wq/wk/wv: per head);
      "col_blocks" a 2-D [a, units*b] matrix whose unit u is columns [u*b, (u+1)*b) (wo: per head);
      "stacked"    a 3-D [units, a, b] stack whose unit u is index u (experts).
    `split` and `merge` are exact inverses.
    """

    kind: Literal["whole", "row_blocks", "col_blocks", "stacked"]
    """Which axis separates the units (see the class docstring)."""
    units: int
    """Number of independent matrices in the parameter."""

    def __post_init__(self) -> None:
        if self.kind not in ("whole", "row_blocks", "col_blocks", "stacked"):
            raise ValueError(f"kind must be whole, row_blocks, col_blocks or stacked, got {self.kind!r}")
        if self.units < 1:
            raise ValueError(f"units must be >= 1, got {self.units}")
        if self.kind == "whole" and self.units != 1:
            raise ValueError(f"units must be 1 for a whole matrix, got {self.units}")

    def unit_shape(self, shape: tuple[int, ...] | torch.Size) -> tuple[int, int]:
        """Shape (a, b) of each unit of a parameter of full shape `shape`."""
        expected_ndim = 3 if self.kind == "stacked" else 2
        if len(shape) != expected_ndim:
            raise ValueError(f"a {self.kind} layout needs a {expected_ndim}-D parameter, got shape {tuple(shape)}")
        if self.kind == "stacked":
            if shape[0] != self.units:
                raise ValueError(f"stack of {shape[0]} matrices does not match units={self.units}")
            return shape[1], shape[2]
        rows, cols = shape
        if self.kind == "row_blocks":
            if rows % self.units:
                raise ValueError(f"{rows} rows do not split into {self.units} units")
            return rows // self.units, cols
        if self.kind == "col_blocks":
            if cols % self.units:
                raise ValueError(f"{cols} columns do not split into {self.units} units")
            return rows, cols // self.units
        return rows, cols

    def split(self, tensor: Tensor) -> Tensor:
        """The units of a full parameter as one batch [units, a, b] (a view where the layout allows)."""
        a, b = self.unit_shape(tensor.shape)
        if self.kind == "stacked":
            return tensor
        if self.kind == "row_blocks":
            return tensor.reshape(self.units, a, b)
        if self.kind == "col_blocks":
            return tensor.reshape(a, self.units, b).transpose(0, 1)
        return tensor.unsqueeze(0)

    def merge(self, batch: Tensor, like: Tensor) -> Tensor:
        """Inverse of `split`: a tensor shaped like `like` from a batch [units, a, b]."""
        a, b = self.unit_shape(like.shape)
        if tuple(batch.shape) != (self.units, a, b):
            raise ValueError(f"batch shape {tuple(batch.shape)} != {(self.units, a, b)}")
        if self.kind == "col_blocks":
            return batch.transpose(0, 1).reshape(like.shape)
        return batch.reshape(like.shape)

    def shard_rows(self, start: int, stop: int, full_shape: tuple[int, ...] | torch.Size) -> list[tuple[int, int, int]]:
        """What a Shard(0) shard holding rows [start, stop) of the full parameter's dim 0 holds of each
        unit. Whatever the layout, that is a contiguous range of the unit's rows at full unit width, so
        the answer is a list of (unit, first unit row, end unit row), units ascending."""
        a, _ = self.unit_shape(full_shape)
        if stop <= start:
            return []
        if self.kind == "stacked":
            return [(u, 0, a) for u in range(start, stop)]
        if self.kind == "whole":
            return [(0, start, stop)]
        if self.kind == "col_blocks":
            return [(u, start, stop) for u in range(self.units)]
        return [(u, max(start, u * a) - u * a, min(stop, (u + 1) * a) - u * a)
                for u in range(start // a, -(-stop // a))]

    def shard_pieces(self, local: Tensor, start: int, full_shape: tuple[int, ...] | torch.Size) -> list[tuple[int, int, Tensor]]:
        """`shard_rows` with views into `local` (rows [start, start+len) of dim 0): a list of
        (unit, first unit row, view [rows, b])."""
        _, b = self.unit_shape(full_shape)
        pieces = []
        for u, lo, hi in self.shard_rows(start, start + local.shape[0], full_shape):
            if self.kind == "stacked":
                view = local[u - start]
            elif self.kind == "col_blocks":
                view = local[:, u * b:(u + 1) * b]
            elif self.kind == "whole":
                view = local
            else:
                a = full_shape[0] // self.units
                view = local[u * a + lo - start:u * a + hi - start]
            pieces.append((u, lo, view))
        return pieces


_HEAD_ROWS = re.compile(r"(^|\.)attention\.(wq|wk|wv)\.weight$")
_HEAD_COLS = re.compile(r"(^|\.)attention\.wo\.weight$")
_EXPERTS = re.compile(r"(^|\.)experts\.w[123]$")


def matrix_layouts(model: nn.Module) -> dict[str, MatrixLayout]:
    """Parameter name -> layout for every 2-D and 3-D parameter: per head for attention projections,
    per expert for stacked expert weights, whole otherwise. Names match `model.named_parameters()`
    with or without FSDP2 (which keeps names) or wrappers that add a path component."""
    config: ModelConfig = model.config  # type: ignore[assignment]
    layouts: dict[str, MatrixLayout] = {}
    for name, param in model.named_parameters():
        if _HEAD_ROWS.search(name):
            heads = config.n_heads if name.endswith("wq.weight") else config.n_kv_heads
            layouts[name] = MatrixLayout(kind="row_blocks", units=heads)
        elif _HEAD_COLS.search(name):
            layouts[name] = MatrixLayout(kind="col_blocks", units=config.n_heads)
        elif _EXPERTS.search(name):
            layouts[name] = MatrixLayout(kind="stacked", units=param.shape[0])
        elif param.ndim == 2:
            layouts[name] = MatrixLayout(kind="whole", units=1)
        else:
            continue
        layouts[name].unit_shape(param.shape)  # fail here, with the shape, if it does not fit
    return layouts
