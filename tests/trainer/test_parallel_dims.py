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


def test_ep_must_divide_dp_shard_times_cp() -> None:
    with pytest.raises(ValueError) as err:
        ParallelDims(dp_replicate=2, dp_shard=2, cp=2, ep=8, world_size=8)
    message = str(err.value)
    for part in ("ep (8)", "dp_shard (2)", "cp (2)", "= 4"):
        assert part in message
    # The recipe layout: experts borrow the cp ranks, so cp=2 and ep=8 fit on 8 ranks.
    dims = ParallelDims(dp_shard=4, cp=2, ep=8, world_size=8)
    assert (dims.dp, dims.dp_shard_cp, dims.dp_replicate_e) == (4, 8, 1)


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
