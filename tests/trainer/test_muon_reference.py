"""muon_reference against torch's own optimizers: torch.optim.Muon on whole matrices and on each head
or expert slice, torch.optim.AdamW on the rest; routing rules; and a real training loss going down."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from trainer.model import PRESETS, MatrixLayout, Transformer, matrix_layouts
from trainer.optim.muon_reference import (
    DEFAULT_ROUTING,
    AdamWConfig,
    MuonConfig,
    MuonWithAdamW,
    RoutingRule,
    build_muon_adamw,
    lr_scale,
    route_parameters,
)

# torch.optim.Muon and the reference run the same ops in the same order (a batch of one through
# baddbmm instead of addmm), which is bit-identical on CPU. The margin allows a few entries of the
# bf16 update to round one ulp apart on another backend: lr (0.02) x |update entry| (< 0.5) x 2^-8
# is about 4e-5 per step.
MUON_ATOL = 1e-4
# AdamW: the same float32 arithmetic as torch.optim.AdamW(foreach=False); only the order in which
# the bias corrections are folded in may differ, which moves the last float32 bit.
ADAMW_RTOL, ADAMW_ATOL = 1e-6, 1e-7



def _grads(shapes: list[tuple[int, ...]], steps: int, seed: int) -> list[list[torch.Tensor]]:
    generator = torch.Generator().manual_seed(seed)
    return [[torch.randn(shape, generator=generator) for shape in shapes] for _ in range(steps)]


@pytest.mark.parametrize(
    ("lr_scaling", "torch_adjust", "nesterov"),
    [("spectral", "original", True), ("match_rms_adamw", "match_rms_adamw", True), ("spectral", None, False)],
)
def test_whole_matrices_match_torch_muon(lr_scaling: str, torch_adjust: str | None, nesterov: bool) -> None:
    shapes = [(32, 32), (24, 56), (72, 20)]  # square, wide, tall (transposed inside)
    initial = [torch.randn(shape) for shape in shapes]
    ours = [torch.nn.Parameter(t.clone()) for t in initial]
    theirs = [torch.nn.Parameter(t.clone()) for t in initial]
    optimizer = MuonWithAdamW(
        ((f"m{i}", p) for i, p in enumerate(ours)),
        layouts={f"m{i}": MatrixLayout(kind="whole", units=1) for i in range(len(ours))},
        muon=MuonConfig(lr=0.02, weight_decay=0.1, nesterov=nesterov, lr_scaling=lr_scaling),  # type: ignore[arg-type]
        routing=[RoutingRule(pattern="", algorithm="muon")],
    )
    reference = torch.optim.Muon(theirs, lr=0.02, weight_decay=0.1, nesterov=nesterov, adjust_lr_fn=torch_adjust)
    for grads in _grads(shapes, steps=5, seed=1):
        for p, q, g in zip(ours, theirs, grads):
            p.grad, q.grad = g.clone(), g.clone()
        optimizer.step()
        reference.step()
    for p, q in zip(ours, theirs):
        torch.testing.assert_close(p, q, atol=MUON_ATOL, rtol=0)
        assert not torch.equal(p, torch.zeros_like(p))


def test_units_match_torch_muon_on_each_slice() -> None:
    """Per head (rows of wq, columns of wo) and per expert: the reference equals torch.optim.Muon run
    on each head's or expert's slice as a separate parameter, over several steps."""
    model = Transformer(PRESETS["tiny"])
    named = dict(model.named_parameters())
    layouts = matrix_layouts(model)
    names = ["layers.0.attention.wq.weight", "layers.0.attention.wo.weight", "layers.1.moe.experts.w2"]
    optimizer = MuonWithAdamW(((n, named[n]) for n in names), layouts=layouts, muon=MuonConfig(lr=0.05),
                              routing=DEFAULT_ROUTING)
    slices = {n: [torch.nn.Parameter(u.clone()) for u in layouts[n].split(named[n].detach())] for n in names}
    reference = torch.optim.Muon([p for n in names for p in slices[n]], lr=0.05, adjust_lr_fn="original")

    for grads in _grads([named[n].shape for n in names], steps=3, seed=2):
        for n, g in zip(names, grads):
            named[n].grad = g
            for p, g_unit in zip(slices[n], layouts[n].split(g)):
                p.grad = g_unit.clone()
        optimizer.step()
        reference.step()

    for n in names:
        expected = layouts[n].merge(torch.stack([p.detach() for p in slices[n]]), like=named[n])
        torch.testing.assert_close(named[n].detach(), expected, atol=MUON_ATOL, rtol=0)


def test_per_head_differs_from_whole_matrix() -> None:
    """The splitting matters: per head is not what whole-matrix Muon would do."""
    grad = torch.randn(64, 64)
    per_head, whole = (torch.nn.Parameter(torch.zeros(64, 64)) for _ in range(2))
    for param, layout in ((per_head, MatrixLayout(kind="row_blocks", units=4)),
                          (whole, MatrixLayout(kind="whole", units=1))):
        param.grad = grad.clone()
        MuonWithAdamW([("w", param)], layouts={"w": layout}, muon=MuonConfig(weight_decay=0.0),
                      routing=[RoutingRule(pattern="", algorithm="muon")]).step()
    assert (per_head - whole).abs().max() > 1e-3


def test_adamw_groups_match_torch_adamw() -> None:
    initial = [torch.randn(7, 5), torch.randn(11)]
    ours = [torch.nn.Parameter(t.clone()) for t in initial]
    theirs = [torch.nn.Parameter(t.clone()) for t in initial]
    optimizer = MuonWithAdamW([("a", ours[0]), ("b", ours[1])], layouts={},
                              adamw=AdamWConfig(lr=1e-2, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1),
                              routing=[RoutingRule(pattern="", algorithm="adamw")])
    reference = torch.optim.AdamW(theirs, lr=1e-2, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1, foreach=False)
    for grads in _grads([(7, 5), (11,)], steps=6, seed=3):
        for p, q, g in zip(ours, theirs, grads):
            p.grad, q.grad = g.clone(), g.clone()
        optimizer.step()
        reference.step()
    for p, q in zip(ours, theirs):
        torch.testing.assert_close(p, q, rtol=ADAMW_RTOL, atol=ADAMW_ATOL)


def test_default_routing() -> None:
    model = Transformer(PRESETS["tiny"])
    optimizer = build_muon_adamw(model, muon=MuonConfig(lr=0.02), adamw=AdamWConfig(lr=1e-3, weight_decay=0.1))
    where = {name: (group["algorithm"], group["lr"], group["weight_decay"])
             for group in optimizer.param_groups for name in group["param_names"]}
    assert len(where) == len(list(model.parameters()))
    assert where["tok_embeddings.weight"] == ("adamw", 1e-3, 0.1)
    assert where["output.weight"] == ("adamw", 1e-3, 0.1)
    assert where["layers.0.moe.router.weight"] == ("adamw", 1e-3, 0.1)
    assert where["layers.1.attention_norm.weight"] == ("adamw", 1e-3, 0.0)
    assert where["norm.weight"] == ("adamw", 1e-3, 0.0)
    for name in ("layers.0.attention.wq.weight", "layers.1.attention.wo.weight", "layers.0.moe.experts.w1"):
        assert where[name] == ("muon", 0.02, 0.1)


def test_first_matching_rule_wins_and_unmatched_names_fail() -> None:
    rules = [RoutingRule(pattern=r"experts\.w2$", algorithm="adamw", lr_scale=0.5),
             RoutingRule(pattern=r"experts", algorithm="muon")]
    assert route_parameters(["moe.experts.w2", "moe.experts.w1"], rules) == {"moe.experts.w2": 0,
                                                                            "moe.experts.w1": 1}
    with pytest.raises(ValueError, match="no routing rule matches parameter 'norm.weight'"):
        route_parameters(["norm.weight"], rules)
    with pytest.raises(ValueError, match="need a matrix layout"):
        MuonWithAdamW([("norm.weight", torch.nn.Parameter(torch.ones(3)))], layouts={},
                      routing=[RoutingRule(pattern="", algorithm="muon")])


def test_lr_scaling_and_config_validation() -> None:
    assert lr_scale((16, 64), "spectral") == 1.0
    assert lr_scale((64, 16), "spectral") == 2.0
    assert lr_scale((16, 64), "match_rms_adamw") == pytest.approx(1.6)
    assert lr_scale((16, 64), "none") == 1.0
    with pytest.raises(ValueError, match="ns_steps"):
        MuonConfig(ns_steps=0)
    with pytest.raises(ValueError, match="lr_scaling"):
        MuonConfig(lr_scaling="original")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="betas"):
        AdamWConfig(betas=(0.9, 1.0))
    with pytest.raises(ValueError, match="algorithm"):
        RoutingRule(pattern="", algorithm="sgd")  # type: ignore[arg-type]


def test_training_loss_goes_down() -> None:
    torch.manual_seed(0)
    model = Transformer(PRESETS["tiny"])
    optimizer = build_muon_adamw(model, muon=MuonConfig(lr=0.02), adamw=AdamWConfig(lr=3e-3))
    tokens = torch.randint(0, 384, (4, 32))
    losses = []
    for _ in range(8):
        logits = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, 384), tokens[:, 1:].reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.8 * losses[0], losses


def test_resuming_from_a_state_dict_equals_not_stopping() -> None:
    """Checkpoints go through torch's distributed state-dict helpers (names, not ids); a resumed
    optimizer continues exactly."""
    import copy

    from torch.distributed.checkpoint.state_dict import (
        get_optimizer_state_dict,
        set_optimizer_state_dict,
    )

    def loss(model: Transformer, seed: int) -> torch.Tensor:
        tokens = torch.randint(0, 384, (2, 9), generator=torch.Generator().manual_seed(seed))
        return F.cross_entropy(model(tokens[:, :-1]).reshape(-1, 384), tokens[:, 1:].reshape(-1))

    model = Transformer(PRESETS["tiny"])
    optimizer = build_muon_adamw(model)
    loss(model, 0).backward()
    optimizer.step()
    optimizer.zero_grad()
    # A deep copy: a state dict shares its tensors with the live optimizer.
    saved = copy.deepcopy(get_optimizer_state_dict(model, optimizer))
    resumed = Transformer(PRESETS["tiny"])
    resumed.load_state_dict(model.state_dict())
    resumed_optimizer = build_muon_adamw(resumed)
    set_optimizer_state_dict(resumed, resumed_optimizer, saved)
    for m, opt in ((model, optimizer), (resumed, resumed_optimizer)):
        loss(m, 1).backward()
        opt.step()
    for (name, p), q in zip(model.named_parameters(), resumed.parameters()):
        assert torch.equal(p, q), name
