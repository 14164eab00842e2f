"""ParallelDims: validation without processes, then the real meshes on 4 and 8 gloo ranks."""

from __future__ import annotations

import pytest

from tests.trainer.dist import run_gloo
from trainer.parallel_dims import ParallelDims


def test_product_error_names_every_factor() -> None:
    with pytest.raises(ValueError) as err:
        ParallelDims(dp_replicate=2, dp_shard=2, cp=2, ep=4, world_size=16)
    message = str(err.value)
    for part in ("dp_replicate (2)", "dp_shard (2)", "cp (2)", "tp (1)", "= 8", "world_size is 16"):
        assert part in message


@pytest.mark.parametrize(
    ("dp_replicate", "dp_shard", "cp", "ep", "world_size", "dp_replicate_e"),
    [
        # Experts inside one dense shard group: a part of it, or all of it.
        (2, 2, 2, 2, 8, 4),
        (1, 4, 2, 8, 8, 1),  # the recipe layout: cp=2 and ep=8 on the same 8 ranks
        # Experts across whole dense shard groups, i.e. across dense replicas.
        (2, 2, 2, 8, 8, 1),
        (4, 2, 1, 8, 8, 1),
        (4, 2, 1, 4, 8, 2),
        (2, 4, 2, 16, 16, 1),  # two nodes: dense shard groups of 8 per node, experts over both
    ],
)
def test_valid_ep(dp_replicate: int, dp_shard: int, cp: int, ep: int, world_size: int,
                  dp_replicate_e: int) -> None:
    dims = ParallelDims(dp_replicate=dp_replicate, dp_shard=dp_shard, cp=cp, ep=ep, world_size=world_size)
    assert dims.dp_replicate_e == dp_replicate_e


@pytest.mark.parametrize(
    ("dp_replicate", "dp_shard", "cp", "ep", "world_size"),
    [
        (1, 2, 2, 3, 4),  # neither a divisor nor a multiple of dp_shard * cp, nor a divisor of the world
        (3, 2, 1, 4, 6),  # a multiple of dp_shard * cp that does not divide world_size
        (3, 4, 1, 6, 12),  # divides world_size, but each ep group would take 1.5 dense shard groups
        (2, 4, 1, 16, 8),  # wider than the world
    ],
)
def test_invalid_ep_error_names_every_factor(dp_replicate: int, dp_shard: int, cp: int, ep: int,
                                             world_size: int) -> None:
    with pytest.raises(ValueError) as err:
        ParallelDims(dp_replicate=dp_replicate, dp_shard=dp_shard, cp=cp, ep=ep, world_size=world_size)
    message = str(err.value)
    for part in (f"ep ({ep}) must divide dp_shard ({dp_shard}) * cp ({cp}) = {dp_shard * cp}",
                 f"or be a multiple of it that divides world_size ({world_size})",
                 f"dp_replicate ({dp_replicate})"):
        assert part in message


@pytest.mark.parametrize("field", ["dp_replicate", "dp_shard", "cp", "ep", "world_size"])
def test_non_positive_degree_names_the_field(field: str) -> None:
    values = {"dp_replicate": 1, "dp_shard": 1, "cp": 1, "ep": 1, "world_size": 1}
    values[field] = 0
    with pytest.raises(ValueError, match=f"^{field} must be a positive integer"):
        ParallelDims(**values)


def test_tp_is_validated_and_only_one_is_implemented() -> None:
    with pytest.raises(ValueError, match="tp=2 is not implemented"):
        ParallelDims(dp_shard=2, tp=2, world_size=4)


def test_keyword_only() -> None:
    with pytest.raises(TypeError):
        ParallelDims(1, 1, 1, 1, 1, 1)  # type: ignore[call-arg]


def test_layouts_without_processes() -> None:
    dims = ParallelDims(dp_replicate=2, dp_shard=2, cp=2, ep=2, world_size=8)
    assert dims.dense_layout().tolist() == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert dims.expert_layout().tolist() == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert dims.batch_layout().tolist() == [[0, 1], [2, 3], [4, 5], [6, 7]]
    # Every expert shard group lies inside one dense shard group.
    dense_rows = [set(row) for row in dims.dense_layout().tolist()]
    for row in dims.expert_layout().tolist():
        assert any(set(row) <= dense for dense in dense_rows)


@pytest.mark.parametrize(
    ("dims", "dense", "expert"),
    [
        (ParallelDims(dp_replicate=2, dp_shard=2, cp=2, ep=8, world_size=8),
         [[0, 1, 2, 3], [4, 5, 6, 7]], [[0, 1, 2, 3, 4, 5, 6, 7]]),
        (ParallelDims(dp_replicate=4, dp_shard=2, cp=1, ep=4, world_size=8),
         [[0, 1], [2, 3], [4, 5], [6, 7]], [[0, 1, 2, 3], [4, 5, 6, 7]]),
    ],
    ids=["r2-s2-cp2-ep8", "r4-s2-ep4"],
)
def test_wide_expert_layout_is_whole_dense_shard_groups(dims: ParallelDims, dense: list[list[int]],
                                                        expert: list[list[int]]) -> None:
    assert dims.dense_layout().tolist() == dense
    assert dims.expert_layout().tolist() == expert
    # Each expert shard group is the union of ep / (dp_shard * cp) whole dense shard groups.
    dense_rows = [set(row) for row in dense]
    for row in expert:
        assert set(row) == set().union(*(d for d in dense_rows if d <= set(row)))


def _mesh_groups(rank: int, world_size: int, dims: ParallelDims) -> dict[str, object]:
    import torch.distributed as dist

    meshes = dims.build_meshes("cpu")
    groups: dict[str, object] = {}
    for mesh in (meshes.dense, meshes.expert, meshes.batch):
        for name in mesh.mesh_dim_names or ():
            groups[name] = dist.get_process_group_ranks(mesh.get_group(name))
    groups["dp_rank"] = meshes.dp_rank
    groups["cp_rank"] = meshes.cp_rank
    return groups


def _expected(dims: ParallelDims, rank: int) -> dict[str, object]:
    def row_and_column(layout: list[list[int]]) -> tuple[list[int], list[int]]:
        for row in layout:
            if rank in row:
                return row, [r[row.index(rank)] for r in layout]
        raise AssertionError(rank)

    dense_row, dense_col = row_and_column(dims.dense_layout().tolist())
    expert_row, expert_col = row_and_column(dims.expert_layout().tolist())
    batch_row, batch_col = row_and_column(dims.batch_layout().tolist())
    return {
        "dp_replicate": dense_col, "dp_shard_cp": dense_row,
        "dp_replicate_e": expert_col, "ep": expert_row,
        "dp": batch_col, "cp": batch_row,
        "dp_rank": rank // dims.cp, "cp_rank": rank % dims.cp,
    }


def test_meshes_on_4_gloo_ranks() -> None:
    dims = ParallelDims(dp_replicate=1, dp_shard=2, cp=2, ep=2, world_size=4)
    groups = run_gloo(4, _mesh_groups, dims)
    assert groups[0]["dp_shard_cp"] == [0, 1, 2, 3]
    assert groups[0]["dp_replicate"] == [0]
    assert groups[1]["ep"] == [0, 1] and groups[3]["ep"] == [2, 3]
    assert groups[1]["dp_replicate_e"] == [1, 3]
    assert groups[2]["cp"] == [2, 3] and groups[2]["dp"] == [0, 2]
    for rank, got in enumerate(groups):
        assert got == _expected(dims, rank)


def test_meshes_on_8_gloo_ranks() -> None:
    dims = ParallelDims(dp_replicate=2, dp_shard=2, cp=2, ep=4, world_size=8)
    groups = run_gloo(8, _mesh_groups, dims)
    assert groups[5]["dp_shard_cp"] == [4, 5, 6, 7]
    assert groups[5]["dp_replicate"] == [1, 5]
    assert groups[5]["ep"] == [4, 5, 6, 7]
    assert groups[5]["dp_replicate_e"] == [1, 5]
    assert groups[5]["cp"] == [4, 5] and groups[5]["dp"] == [1, 3, 5, 7]
    for rank, got in enumerate(groups):
        assert got == _expected(dims, rank)


@pytest.mark.parametrize(
    ("dims", "rank_5"),
    [
        # Dense shard groups of 4 ("a node") and 2 replicas; experts sharded over all 8 ranks.
        (ParallelDims(dp_replicate=2, dp_shard=2, cp=2, ep=8, world_size=8),
         {"dp_shard_cp": [4, 5, 6, 7], "dp_replicate": [1, 5], "ep": list(range(8)),
          "dp_replicate_e": [5], "cp": [4, 5], "dp": [1, 3, 5, 7]}),
        # Dense shard groups of 2 and 4 replicas, no cp; experts sharded over all 8 ranks.
        (ParallelDims(dp_replicate=4, dp_shard=2, cp=1, ep=8, world_size=8),
         {"dp_shard_cp": [4, 5], "dp_replicate": [1, 3, 5, 7], "ep": list(range(8)),
          "dp_replicate_e": [5], "cp": [5], "dp": list(range(8))}),
        # The same dense layout; experts over two shard groups at a time, replicated twice.
        (ParallelDims(dp_replicate=4, dp_shard=2, cp=1, ep=4, world_size=8),
         {"dp_shard_cp": [4, 5], "dp_replicate": [1, 3, 5, 7], "ep": [4, 5, 6, 7],
          "dp_replicate_e": [1, 5], "cp": [5], "dp": list(range(8))}),
    ],
    ids=["r2-s2-cp2-ep8", "r4-s2-ep8", "r4-s2-ep4"],
)
def test_wide_expert_meshes_on_8_gloo_ranks(dims: ParallelDims, rank_5: dict[str, list[int]]) -> None:
    groups = run_gloo(8, _mesh_groups, dims)
    for name, ranks in rank_5.items():
        assert groups[5][name] == ranks, name
    for rank, got in enumerate(groups):
        assert got == _expected(dims, rank)
