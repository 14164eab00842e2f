"""Muon with AdamW on one device: the plain reference that `trainer.optim.sharded_muon` must agree with.

Muon (Keller Jordan, 2024) keeps a momentum buffer per matrix and steps along an approximate
orthogonalization of it, computed by a quintic Newton-Schulz iteration. Here the "matrices" are the
units of `trainer.model.matrix_layouts`: every attention head of Q, K, V and O and every expert of a
stacked MoE weight is orthogonalized on its own; any other 2-D weight as a whole. Ordered name rules
(first match wins) send each parameter to Muon or to AdamW; embeddings, norms, biases, the router and
the lm head go to AdamW.

The arithmetic follows `torch.optim.Muon` step for step (EMA momentum with lerp, Nesterov as
grad.lerp(buf, momentum), Frobenius normalization and the iteration in bf16, weight decay with the
unscaled lr), so on plain 2-D matrices the two give the same numbers.

Shape legend: N units in a batch, a x b the shape of one unit.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import Tensor

from trainer.model import MatrixLayout, matrix_layouts

__all__ = [
    "ADAMW_ONLY_ROUTING",
    "DEFAULT_ROUTING",
    "KELLER_COEFFICIENTS",
    "NS_DTYPES",
    "AdamWConfig",
    "LrScaling",
    "MuonConfig",
    "MuonWithAdamW",
    "RoutingRule",
    "adamw_update",
    "build_muon_adamw",
    "lr_scale",
    "newton_schulz",
    "route_parameters",
]

KELLER_COEFFICIENTS: tuple[float, float, float] = (3.4445, -4.7750, 2.0315)
"""Quintic coefficients that maximize the slope at zero (Keller Jordan's Muon, also torch's default)."""

LrScaling = Literal["spectral", "match_rms_adamw", "none"]
NS_DTYPES: dict[str, torch.dtype] = {"bfloat16": torch.bfloat16, "float32": torch.float32}
"""MuonConfig.ns_dtype names -> dtypes."""


@dataclass(kw_only=True, slots=True)
class MuonConfig:
    """Hyper-parameters of the Muon groups."""

    lr: float = 0.02
    """Learning rate before the per-shape scaling."""
    weight_decay: float = 0.1
    """Decoupled: parameters shrink by lr * weight_decay each step (the unscaled lr, as in torch)."""
    momentum: float = 0.95
    """EMA factor of the momentum buffer."""
    nesterov: bool = True
    """Orthogonalize grad.lerp(buf, momentum) instead of the buffer itself."""
    ns_coefficients: tuple[float, float, float] = KELLER_COEFFICIENTS
    """(a, b, c) of the quintic X <- aX + (bA + cA^2)X with A = XX^T."""
    ns_steps: int = 5
    """Newton-Schulz iterations."""
    eps: float = 1e-7
    """Floor of the Frobenius norm that the input is divided by."""
    ns_dtype: Literal["bfloat16", "float32"] = "bfloat16"
    """Precision of the iteration: bf16 is the standard; float32 makes tests comparisons tight."""
    lr_scaling: LrScaling = "spectral"
    """Per-unit update scale from its shape a x b: "spectral" sqrt(max(1, a/b)) (Keller Jordan's,
    torch's "original"), "match_rms_adamw" 0.2 sqrt(max(a, b)) (Moonshot's, reuses AdamW lr and
    weight decay), "none" 1."""

    def __post_init__(self) -> None:
        if self.lr < 0:
            raise ValueError(f"lr must be >= 0, got {self.lr}")
        if self.weight_decay < 0:
            raise ValueError(f"weight_decay must be >= 0, got {self.weight_decay}")
        if not 0 <= self.momentum < 1:
            raise ValueError(f"momentum must be in [0, 1), got {self.momentum}")
        if len(self.ns_coefficients) != 3:
            raise ValueError(f"ns_coefficients must be three numbers, got {self.ns_coefficients}")
        if not 1 <= self.ns_steps < 100:
            raise ValueError(f"ns_steps must be in [1, 100), got {self.ns_steps}")
        if self.eps <= 0:
            raise ValueError(f"eps must be > 0, got {self.eps}")
        if self.ns_dtype not in NS_DTYPES:
            raise ValueError(f"ns_dtype must be one of {sorted(NS_DTYPES)}, got {self.ns_dtype!r}")
        if self.lr_scaling not in ("spectral", "match_rms_adamw", "none"):
            raise ValueError(f"lr_scaling must be spectral, match_rms_adamw or none, got {self.lr_scaling!r}")


@dataclass(kw_only=True, slots=True)
class AdamWConfig:
    """Hyper-parameters of the AdamW groups."""

    lr: float = 3e-4
    """Learning rate."""
    betas: tuple[float, float] = (0.9, 0.95)
    """EMA factors of the first and second moments."""
    eps: float = 1e-8
    """Added to the bias-corrected root of the second moment."""
    weight_decay: float = 0.1
    """Decoupled weight decay (parameters shrink by lr * weight_decay each step)."""

    def __post_init__(self) -> None:
        if self.lr < 0:
            raise ValueError(f"lr must be >= 0, got {self.lr}")
        if len(self.betas) != 2 or not all(0 <= beta < 1 for beta in self.betas):
            raise ValueError(f"betas must be two numbers in [0, 1), got {self.betas}")
        if self.eps <= 0:
            raise ValueError(f"eps must be > 0, got {self.eps}")
        if self.weight_decay < 0:
            raise ValueError(f"weight_decay must be >= 0, got {self.weight_decay}")


@dataclass(frozen=True, kw_only=True, slots=True)
class RoutingRule:
    """Parameters whose name matches `pattern` (re.search) go to `algorithm`; the first rule wins.
    Each rule that matches something becomes its own param group."""

    pattern: str
    """Regular expression searched in the parameter name."""
    algorithm: Literal["muon", "adamw"]
    """Optimizer for the matching parameters."""
    lr_scale: float = 1.0
    """Multiplies the algorithm's lr for this group."""
    weight_decay: float | None = None
    """Overrides the algorithm's weight decay for this group; None keeps it."""

    def __post_init__(self) -> None:
        if self.algorithm not in ("muon", "adamw"):
            raise ValueError(f"algorithm must be muon or adamw, got {self.algorithm!r}")
        re.compile(self.pattern)
        if self.lr_scale < 0:
            raise ValueError(f"lr_scale must be >= 0, got {self.lr_scale}")
        if self.weight_decay is not None and self.weight_decay < 0:
            raise ValueError(f"weight_decay must be >= 0, got {self.weight_decay}")


DEFAULT_ROUTING: tuple[RoutingRule, ...] = (
    RoutingRule(pattern=r"(^|\.)tok_embeddings\.", algorithm="adamw"),
    RoutingRule(pattern=r"(^|\.)output\.", algorithm="adamw"),
    RoutingRule(pattern=r"(^|\.)router\.", algorithm="adamw"),
    # Gains and biases are not matrices, and decaying them towards zero only fights the model.
    RoutingRule(pattern=r"(norm\.weight|\.bias)$", algorithm="adamw", weight_decay=0.0),
    RoutingRule(pattern=r"(^|\.)attention\.w[qkvo]\.weight$", algorithm="muon"),
    RoutingRule(pattern=r"(^|\.)experts\.w[123]$", algorithm="muon"),
    RoutingRule(pattern=r"", algorithm="adamw"),
)

ADAMW_ONLY_ROUTING: tuple[RoutingRule, ...] = (
    RoutingRule(pattern=r"(norm\.weight|\.bias)$", algorithm="adamw", weight_decay=0.0),
    RoutingRule(pattern=r"", algorithm="adamw"),
)
"""Routing of optimizer name "adamw" (any model): every parameter to AdamW, gains and biases without decay."""


def route_parameters(names: Iterable[str], rules: Sequence[RoutingRule]) -> dict[str, int]:
    """Name -> index of the first rule whose pattern matches; a name no rule matches is an error."""
    compiled = [re.compile(rule.pattern) for rule in rules]
    routes: dict[str, int] = {}
    for name in names:
        index = next((i for i, pattern in enumerate(compiled) if pattern.search(name)), None)
        if index is None:
            raise ValueError(f"no routing rule matches parameter {name!r}; end the rules with a catch-all")
        routes[name] = index
    return routes


def newton_schulz(
    G_Nab: Tensor, *, coefficients: tuple[float, float, float], steps: int, eps: float, dtype: torch.dtype
) -> Tensor:
    """Approximately orthogonalize each matrix of a batch [N, a, b] (returned in `dtype`).

    Matches torch.optim.Muon's iteration op for op (addmm becomes baddbmm), so a batch of one
    gives the same bits as torch on one matrix."""
    a, b, c = coefficients
    X = G_Nab.to(dtype)
    tall = G_Nab.shape[-2] > G_Nab.shape[-1]
    if tall:
        # Iterate on the wide orientation: the Gram matrix XX^T is then the smaller one.
        X = X.mT
    # Divide by the Frobenius norm, which bounds the spectral norm, so singular values start <= 1.
    X = X / X.norm(dim=(-2, -1), keepdim=True).clamp(min=eps)
    for _ in range(steps):
        A = X @ X.mT
        B = torch.baddbmm(A, A, A, beta=b, alpha=c)
        X = torch.baddbmm(X, B, X, beta=a)
    return X.mT if tall else X


def lr_scale(unit_shape: tuple[int, int], scaling: LrScaling) -> float:
    """Multiplier of the lr for one orthogonalized a x b unit (see MuonConfig.lr_scaling)."""
    rows, cols = unit_shape
    if scaling == "spectral":
        return math.sqrt(max(1.0, rows / cols))
    if scaling == "match_rms_adamw":
        return 0.2 * math.sqrt(max(rows, cols))
    return 1.0


def adamw_update(param: Tensor, grad: Tensor, state: dict[str, Tensor], group: Mapping[str, Any]) -> None:
    """One AdamW step in place, the same arithmetic as torch.optim.AdamW(foreach=False)."""
    lr, weight_decay, eps = group["lr"], group["weight_decay"], group["eps"]
    beta1, beta2 = group["betas"]
    state["step"] += 1
    step = state["step"].item()
    param.mul_(1 - lr * weight_decay)
    state["exp_avg"].lerp_(grad, 1 - beta1)
    state["exp_avg_sq"].mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
    denom = (state["exp_avg_sq"].sqrt() / math.sqrt(1 - beta2**step)).add_(eps)
    param.addcdiv_(state["exp_avg"], denom, value=-lr / (1 - beta1**step))


def _param_groups(
    named_parameters: Iterable[tuple[str, Tensor]],
    *,
    layouts: Mapping[str, MatrixLayout],
    muon: MuonConfig,
    adamw: AdamWConfig,
    routing: Sequence[RoutingRule],
) -> list[dict[str, Any]]:
    named = [(name, param) for name, param in named_parameters if param.requires_grad]
    routes = route_parameters((name for name, _ in named), routing)
    groups: list[dict[str, Any]] = []
    for index, rule in enumerate(routing):
        members = [(name, param) for name, param in named if routes[name] == index]
        if not members:
            continue
        if rule.algorithm == "muon":
            missing = [name for name, _ in members if name not in layouts]
            if missing:
                raise ValueError(f"Muon parameters need a matrix layout; none for {missing}")
            group = {"algorithm": "muon", "rule": rule.pattern, "lr": muon.lr * rule.lr_scale,
                     "weight_decay": muon.weight_decay if rule.weight_decay is None else rule.weight_decay,
                     "momentum": muon.momentum, "nesterov": muon.nesterov,
                     "ns_coefficients": tuple(muon.ns_coefficients), "ns_steps": muon.ns_steps, "eps": muon.eps,
                     "ns_dtype": muon.ns_dtype, "lr_scaling": muon.lr_scaling}
        else:
            group = {"algorithm": "adamw", "rule": rule.pattern, "lr": adamw.lr * rule.lr_scale,
                     "weight_decay": adamw.weight_decay if rule.weight_decay is None else rule.weight_decay,
                     "betas": tuple(adamw.betas), "eps": adamw.eps}
        groups.append({"params": members, **group})
    return groups


class MuonWithAdamW(torch.optim.Optimizer):
    """One optimizer for the whole model: Muon per unit for the parameters the routing sends to
    Muon, AdamW for the rest. Each routing rule that matches becomes a param group with its own lr
    and weight decay (schedulers adjust group["lr"] as usual); groups carry "algorithm" and
    "param_names"."""

    def __init__(
        self,
        named_parameters: Iterable[tuple[str, Tensor]],
        *,
        layouts: Mapping[str, MatrixLayout],
        muon: MuonConfig | None = None,
        adamw: AdamWConfig | None = None,
        routing: Sequence[RoutingRule] = DEFAULT_ROUTING,
    ) -> None:
        self.layouts: dict[str, MatrixLayout] = dict(layouts)
        groups = _param_groups(named_parameters, layouts=self.layouts, muon=muon or MuonConfig(),
                               adamw=adamw or AdamWConfig(), routing=routing)
        super().__init__(groups, defaults={})

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            if group["algorithm"] == "muon":
                self._muon_group_step(group)
            else:
                self._adamw_group_step(group)
        return loss

    def _adamw_group_step(self, group: dict[str, Any]) -> None:
        for param in group["params"]:
            if param.grad is None:
                continue
            adamw_update(param, param.grad, self._adamw_state(param), group)

    def _adamw_state(self, param: Tensor) -> dict[str, Tensor]:
        state = self.state[param]
        if not state:
            state["step"] = torch.tensor(0.0)
            state["exp_avg"] = torch.zeros_like(param)
            state["exp_avg_sq"] = torch.zeros_like(param)
        return state

    def _momentum_buffer(self, param: Tensor) -> Tensor:
        state = self.state[param]
        if not state:
            state["momentum_buffer"] = torch.zeros_like(param)
        return state["momentum_buffer"]

    def _muon_group_step(self, group: dict[str, Any]) -> None:
        lr, weight_decay, momentum = group["lr"], group["weight_decay"], group["momentum"]
        for name, param in zip(group["param_names"], group["params"]):
            if param.grad is None:
                continue
            grad = param.grad
            buf = self._momentum_buffer(param)
            buf.lerp_(grad, 1 - momentum)
            update = grad.lerp(buf, momentum) if group["nesterov"] else buf

            layout = self.layouts[name]
            ortho_Nab = torch.stack([
                newton_schulz(unit_ab[None], coefficients=group["ns_coefficients"], steps=group["ns_steps"],
                              eps=group["eps"], dtype=NS_DTYPES[group["ns_dtype"]])[0]
                for unit_ab in layout.split(update)
            ])
            scale = lr_scale(layout.unit_shape(param.shape), group["lr_scaling"])
            param.mul_(1 - lr * weight_decay)
            param.add_(layout.merge(ortho_Nab, like=param), alpha=-lr * scale)


def build_muon_adamw(
    model: torch.nn.Module,
    *,
    muon: MuonConfig | None = None,
    adamw: AdamWConfig | None = None,
    routing: Sequence[RoutingRule] = DEFAULT_ROUTING,
) -> MuonWithAdamW:
    """The reference optimizer for a `trainer.model.Transformer` (per head, per expert)."""
    return MuonWithAdamW(model.named_parameters(), layouts=matrix_layouts(model), muon=muon,
                         adamw=adamw, routing=routing)
