"""The model: config checks, causality, MoE routing against a per-token loop, deterministic init,
and the matrix layouts the optimizer relies on."""

from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F

from trainer.model import (
    PRESETS,
    MatrixLayout,
    ModelConfig,
    Transformer,
    config_from_preset,
    count_parameters,
    matrix_layouts,
)


def test_config_validation_names_the_field() -> None:
    base = dict(vocab_size=16, dim=32, n_layers=1, n_heads=4, n_kv_heads=2, n_experts=4, top_k=2,
                expert_hidden=16, max_seq_len=8)
    with pytest.raises(ValueError, match="n_heads"):
        ModelConfig(**{**base, "n_heads": 5})
    with pytest.raises(ValueError, match="n_kv_heads"):
        ModelConfig(**{**base, "n_kv_heads": 3})
    with pytest.raises(ValueError, match="top_k"):
        ModelConfig(**{**base, "top_k": 5})
    with pytest.raises(ValueError, match="vocab_size"):
        ModelConfig(**{**base, "vocab_size": 0})
    assert ModelConfig(**base).head_dim == 8


def test_presets() -> None:
    with pytest.raises(ValueError, match="1b, small, tiny"):
        config_from_preset("huge")
    assert config_from_preset("tiny", n_layers=3).n_layers == 3
    total, active = count_parameters(PRESETS["1b"])
    assert 0.9e9 < total < 1.2e9 and active < total
    model = Transformer(PRESETS["tiny"])
    assert sum(p.numel() for p in model.parameters()) == count_parameters(PRESETS["tiny"])[0]


def test_forward_is_causal_and_trains() -> None:
    torch.manual_seed(0)
    model = Transformer(PRESETS["tiny"])
    tokens = torch.randint(0, 384, (2, 12))
    logits = model(tokens)
    assert logits.shape == (2, 12, 384)
    changed = tokens.clone()
    changed[:, 8:] = (changed[:, 8:] + 1) % 384
    # Positions before 8 never see the changed tokens. Not bitwise: the changed tokens regroup the
    # experts' batches, and float32 matmuls of other sizes round differently (~1e-7 relative).
    torch.testing.assert_close(model(changed)[:, :8], logits[:, :8], atol=1e-6, rtol=1e-5)
    assert not torch.allclose(model(changed)[:, 8:], logits[:, 8:])

    loss = F.cross_entropy(logits[:, :-1].reshape(-1, 384), tokens[:, 1:].reshape(-1))
    (loss + 0.01 * model.aux_loss()).backward()
    for name, param in model.named_parameters():
        assert param.grad is not None and param.grad.abs().sum() > 0, name


def test_bf16_autocast_forward_and_backward() -> None:
    """The GPU recipe trains under bf16 autocast: mixed dtypes must meet correctly (the CPU has the
    same autocast rules for matmuls)."""
    model = Transformer(PRESETS["tiny"])
    tokens = torch.randint(0, 384, (2, 16))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(tokens)
    assert logits.dtype == torch.bfloat16
    F.cross_entropy(logits.float().reshape(-1, 384), tokens.reshape(-1)).backward()
    assert model.layers[0].moe.experts.w1.grad.dtype == torch.float32
    # bf16 matmuls keep ~3 significant digits; the logits are O(1).
    torch.testing.assert_close(logits.float(), model(tokens), atol=0.1, rtol=0.05)


def test_moe_matches_a_per_token_loop() -> None:
    torch.manual_seed(0)
    model = Transformer(PRESETS["tiny"])
    moe = model.layers[0].moe
    x_BTD = torch.randn(2, 5, 64)
    out = moe(x_BTD)
    expected = torch.zeros_like(x_BTD)
    for b in range(2):
        for t in range(5):
            x = x_BTD[b, t]
            logits = moe.router.weight @ x
            top, experts = logits.topk(2)
            for gate, e in zip(top.softmax(0), experts.tolist()):
                w1, w2, w3 = (w[e] for w in (moe.experts.w1, moe.experts.w2, moe.experts.w3))
                expected[b, t] += gate * (w2 @ (F.silu(w1 @ x) * (w3 @ x)))
    # float32 sums in a different order (batched matmuls and index_add vs per token): ~1e-7 relative.
    torch.testing.assert_close(out, expected, atol=1e-6, rtol=1e-5)


def test_init_is_deterministic_and_materializes_from_meta() -> None:
    a = Transformer(PRESETS["tiny"])
    a.init_weights(seed=3)
    with torch.device("meta"):
        b = Transformer(PRESETS["tiny"])
    b.to_empty(device="cpu")
    b.init_weights(seed=3)
    for (name, pa), pb in zip(a.state_dict().items(), b.state_dict().values()):
        assert torch.equal(pa, pb), name
    torch.testing.assert_close(a.rope_cos, b.rope_cos, atol=0, rtol=0)
    a.init_weights(seed=4)
    assert not torch.equal(a.output.weight, b.output.weight)


def test_layouts_cover_heads_and_experts() -> None:
    model = Transformer(PRESETS["tiny"])
    layouts = matrix_layouts(model)
    assert layouts["layers.0.attention.wq.weight"] == MatrixLayout(kind="row_blocks", units=4)
    assert layouts["layers.1.attention.wk.weight"] == MatrixLayout(kind="row_blocks", units=2)
    assert layouts["layers.0.attention.wo.weight"] == MatrixLayout(kind="col_blocks", units=4)
    assert layouts["layers.0.moe.experts.w2"] == MatrixLayout(kind="stacked", units=8)
    assert layouts["output.weight"] == MatrixLayout(kind="whole", units=1)
    assert "norm.weight" not in layouts

    wo = model.layers[0].attention.wo.weight
    heads = layouts["layers.0.attention.wo.weight"].split(wo)
    assert torch.equal(heads[2], wo[:, 32:48])  # head 2 = its 16 input columns
    wq = model.layers[0].attention.wq.weight
    assert torch.equal(layouts["layers.0.attention.wq.weight"].split(wq)[1], wq[16:32])


@pytest.mark.parametrize(
    ("layout", "shape"),
    [
        (MatrixLayout(kind="whole", units=1), (6, 10)),
        (MatrixLayout(kind="row_blocks", units=3), (12, 5)),
        (MatrixLayout(kind="col_blocks", units=4), (6, 8)),
        (MatrixLayout(kind="stacked", units=5), (5, 3, 4)),
    ],
)
def test_split_merge_and_shard_pieces(layout: MatrixLayout, shape: tuple[int, ...]) -> None:
    full = torch.randn(shape)
    batch = layout.split(full)
    assert torch.equal(layout.merge(batch, like=full), full)
    a, b = layout.unit_shape(full.shape)
    assert batch.shape == (layout.units, a, b)

    # Any split of dim 0 (here uneven, with an empty shard) gives pieces that tile every unit.
    rebuilt = torch.full_like(batch, float("nan"))
    bounds = [0, 1, 1, shape[0] - 1, shape[0]]
    for start, stop in itertools.pairwise(bounds):
        for unit, row, piece in layout.shard_pieces(full[start:stop], start, full.shape):
            assert piece.shape[1] == b
            rebuilt[unit, row:row + piece.shape[0]] = piece
    assert torch.equal(rebuilt, batch)


def test_layout_rejects_bad_shapes() -> None:
    with pytest.raises(ValueError, match="units"):
        MatrixLayout(kind="whole", units=2)
    with pytest.raises(ValueError, match="rows"):
        MatrixLayout(kind="row_blocks", units=3).unit_shape((10, 4))
