"""Muon for FSDP2-sharded parameters: each unit (head, expert or whole matrix) is orthogonalized once,
by one owner rank of its shard group, instead of on every rank.

`fully_shard` leaves every parameter as a DTensor split along dim 0 (Shard(0)) over the shard dim of
its mesh (1-D FSDP, or the second dim of a (replicate, shard) HSDP mesh; experts may live on another
mesh than the dense layers). A shard's rows may cut through heads and experts, and shards may be
uneven or empty. For one step of a Muon param group:

1. Momentum, in each rank's local shard layout (elementwise, so sharding does not matter).
2. Units of the same shape on the same process group are grouped into buckets. Each unit has an
   owner rank (greedy by Newton-Schulz flops; among equally loaded ranks, the one that already holds
   most of the unit, so whole experts mostly stay put), decided identically on every rank from
   shapes alone, so no metadata is exchanged. One `all_to_all_single` per bucket (gloo and NCCL
   both take unequal split sizes) sends every rank's rows of each unit to its owner, who assembles
   whole matrices in the Newton-Schulz dtype, runs a batched Newton-Schulz, and a second all-to-all
   (the same splits, transposed) returns each rank its rows of the result.
3. Several buckets are in flight at once (async work handles), so the all-to-alls of the next
   buckets run while the current one is orthogonalized.
4. Decoupled weight decay and the scaled update, on the local shard.

Replicas of an HSDP mesh repeat the same work on the same data, so they stay identical without
communicating. The result equals `trainer.optim.muon_reference` on the unsharded parameters: the same
elementwise ops on the same numbers, and the same Newton-Schulz per unit (batched rather than one at
a time). AdamW groups are elementwise and run on the local shards.

Shape legend: N units in a batch, a x b the shape of one unit.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor
from torch.distributed.tensor import DTensor

from trainer.model import MatrixLayout, matrix_layouts
from trainer.optim.muon_reference import (
    DEFAULT_ROUTING,
    NS_DTYPES,
    AdamWConfig,
    MuonConfig,
    MuonWithAdamW,
    RoutingRule,
    adamw_update,
    lr_scale,
    newton_schulz,
)

__all__ = ["ShardedMuonWithAdamW", "build_sharded_muon_adamw", "newton_schulz_flops"]


def newton_schulz_flops(unit_shape: tuple[int, int], steps: int) -> int:
    """Flops (a multiply-add counts two) of Newton-Schulz on one a x b unit, m = min(a, b) and
    n = max(a, b): per step XX^T (2m^2 n), A^2 (2m^3) and BX (2m^2 n)."""
    m, n = sorted(unit_shape)
    return steps * (4 * m * m * n + 2 * m**3)


def _local(tensor: Tensor) -> Tensor:
    return tensor.to_local() if isinstance(tensor, DTensor) else tensor


@dataclass(frozen=True, kw_only=True, slots=True)
class _Matrix:
    """One Muon parameter as this rank holds it."""

    name: str
    param: Tensor
    layout: MatrixLayout
    full_shape: torch.Size
    group: dist.ProcessGroup | None
    """The process group that the parameter's dim 0 is sharded over; None when it is not sharded."""
    group_rank: int
    bounds: tuple[tuple[int, int], ...]
    """Rows [start, stop) of dim 0 that each rank of `group` holds."""

    @property
    def start(self) -> int:
        return self.bounds[self.group_rank][0]


def _describe(name: str, param: Tensor, layout: MatrixLayout) -> _Matrix:
    full_shape = param.shape  # a DTensor reports its global shape
    layout.unit_shape(full_shape)
    if isinstance(param, DTensor):
        placements = param.placements
        shard_dims = [i for i, p in enumerate(placements) if p.is_shard()]
        if len(shard_dims) != 1 or not placements[shard_dims[0]].is_shard(0) or not all(
            p.is_replicate() for i, p in enumerate(placements) if i != shard_dims[0]
        ):
            raise ValueError(f"{name}: sharded Muon needs Shard(0) on one mesh dim and Replicate on the "
                             f"others (FSDP2 or HSDP), got {placements}")
        mesh_dim = shard_dims[0]
        group = param.device_mesh.get_group(mesh_dim)
        size, rank = param.device_mesh.size(mesh_dim), param.device_mesh.get_local_rank(mesh_dim)
    else:
        group, size, rank = None, 1, 0
    # FSDP2 and DTensor split dim 0 like torch.chunk: ceil(n / size) rows per rank, the last ranks
    # get fewer or none.
    rows = full_shape[0]
    chunk = -(-rows // size)
    bounds = tuple((min(r * chunk, rows), min((r + 1) * chunk, rows)) for r in range(size))
    held = _local(param).shape[0]
    if held != bounds[rank][1] - bounds[rank][0]:
        raise ValueError(f"{name}: rank {rank} of {size} holds {held} rows of {rows}, expected the "
                         f"torch.chunk split {bounds}")
    return _Matrix(name=name, param=param, layout=layout, full_shape=full_shape,
                   group=group if size > 1 else None, group_rank=rank, bounds=bounds)


@dataclass(kw_only=True, slots=True)
class _Bucket:
    """Units of one shape on one process group, orthogonalized together, with this rank's plan."""

    group: dist.ProcessGroup | None
    unit_shape: tuple[int, int]
    units: list[tuple[int, int]]
    """(matrix index, unit) in bucket order."""
    owners: list[int] = field(default_factory=list)
    """Group rank that orthogonalizes each unit."""
    outgoing: list[tuple[int, int]] = field(default_factory=list)
    """My pieces (matrix index, unit), ordered by owner then bucket order: what the gather sends
    and, in the same order, what the return brings back."""
    outgoing_splits: list[int] = field(default_factory=list)
    """Elements per owner rank in `outgoing`."""
    incoming: list[tuple[int, int, int]] = field(default_factory=list)
    """(slot among my owned units, first row, end row) of each piece I receive, ordered by source
    rank then slot: the layout of the gather's output and of the return's input."""
    incoming_splits: list[int] = field(default_factory=list)
    """Elements per source rank in `incoming`."""
    owned: int = 0
    """How many units of the bucket this rank orthogonalizes."""


def _plan_buckets(matrices: list[_Matrix], *, bucket_bytes: int, element_size: int, steps: int) -> list[_Bucket]:
    by_key: dict[tuple[int, tuple[int, int]], list[tuple[int, int]]] = {}
    groups: dict[int, dist.ProcessGroup | None] = {}
    for index, matrix in enumerate(matrices):
        key = (id(matrix.group), matrix.layout.unit_shape(matrix.full_shape))
        groups[key[0]] = matrix.group
        by_key.setdefault(key, []).extend((index, u) for u in range(matrix.layout.units))

    buckets: list[_Bucket] = []
    for (group_id, (a, b)), units in by_key.items():
        size = len(matrices[units[0][0]].bounds)
        per_bucket = max(1, bucket_bytes // (a * b * element_size))
        if per_bucket >= size:
            per_bucket -= per_bucket % size  # whole rounds, so every rank has work in every bucket
        buckets.extend(_Bucket(group=groups[group_id], unit_shape=(a, b), units=units[i:i + per_bucket])
                       for i in range(0, len(units), per_bucket))

    # Owners: longest-processing-time-first greedy per process group, so Newton-Schulz work is
    # balanced; among the least-loaded ranks, the one holding most of the unit's rows wins, so a unit
    # that already lies on one rank (an expert, a head that a shard does not cut) rarely moves.
    # Every rank computes the same owners from shapes alone.
    loads: dict[int, list[int]] = {}
    for bucket in sorted(buckets, key=lambda bk: -newton_schulz_flops(bk.unit_shape, steps)):
        size = len(matrices[bucket.units[0][0]].bounds)
        load = loads.setdefault(id(bucket.group), [0] * size)
        cost = newton_schulz_flops(bucket.unit_shape, steps)
        held = [_rows_held_by_rank(matrices[m], u) for m, u in bucket.units]
        bucket.owners = [0] * len(bucket.units)
        for i in _round_robin_over_holders(held):
            least = min(load)
            owner = max((r for r in range(size) if load[r] == least), key=lambda r: (held[i][r], -r))
            bucket.owners[i] = owner
            load[owner] += cost

    for bucket in buckets:
        _plan_exchange(bucket, matrices)
    return buckets


def _unit_rows(matrix: _Matrix, rank: int, unit: int) -> tuple[int, int] | None:
    """The rows [lo, hi) of `unit` that `rank` holds (one contiguous range, see
    MatrixLayout.shard_rows), or None."""
    start, stop = matrix.bounds[rank]
    for u, lo, hi in matrix.layout.shard_rows(start, stop, matrix.full_shape):
        if u == unit:
            return lo, hi
    return None


def _rows_held_by_rank(matrix: _Matrix, unit: int) -> list[int]:
    """How many rows of `unit` each rank of the matrix's group holds."""
    held = []
    for rank in range(len(matrix.bounds)):
        rows = _unit_rows(matrix, rank, unit)
        held.append(rows[1] - rows[0] if rows else 0)
    return held


def _round_robin_over_holders(held: list[list[int]]) -> list[int]:
    """Unit indices ordered so that the ranks holding most of each unit take turns (first unit of
    every holder, then the second of every holder, ...): the greedy then gives each rank its own."""
    seen: dict[int, int] = {}
    keys = []
    for i, rows in enumerate(held):
        holder = max(range(len(rows)), key=lambda r: (rows[r], -r))
        keys.append((seen.get(holder, 0), holder, i))
        seen[holder] = seen.get(holder, 0) + 1
    return [i for _, _, i in sorted(keys)]


def _plan_exchange(bucket: _Bucket, matrices: list[_Matrix]) -> None:
    first = matrices[bucket.units[0][0]]
    size, me = len(first.bounds), first.group_rank
    b = bucket.unit_shape[1]

    for owner in range(size):
        sent = 0
        for (matrix_index, unit), unit_owner in zip(bucket.units, bucket.owners):
            held = _unit_rows(matrices[matrix_index], me, unit) if unit_owner == owner else None
            if held is not None:
                bucket.outgoing.append((matrix_index, unit))
                sent += (held[1] - held[0]) * b
        bucket.outgoing_splits.append(sent)

    mine = [(i, mu) for i, (mu, owner) in enumerate(zip(bucket.units, bucket.owners)) if owner == me]
    bucket.owned = len(mine)
    for source in range(size):
        received = 0
        for slot, (matrix_index, unit) in enumerate(mu for _, mu in mine):
            held = _unit_rows(matrices[matrix_index], source, unit)
            if held is not None:
                bucket.incoming.append((slot, *held))
                received += (held[1] - held[0]) * b
        bucket.incoming_splits.append(received)


class ShardedMuonWithAdamW(MuonWithAdamW):
    """`MuonWithAdamW` for FSDP2 (DTensor Shard(0)) parameters; plain tensors count as unsharded.
    Same constructor, plus the size of a bucket and how many buckets are in flight."""

    def __init__(
        self,
        named_parameters: Iterable[tuple[str, Tensor]],
        *,
        layouts: Mapping[str, MatrixLayout],
        muon: MuonConfig | None = None,
        adamw: AdamWConfig | None = None,
        routing: Sequence[RoutingRule] = DEFAULT_ROUTING,
        bucket_bytes: int = 16 * 2**20,
        buckets_in_flight: int = 2,
    ) -> None:
        if bucket_bytes < 1:
            raise ValueError(f"bucket_bytes must be >= 1, got {bucket_bytes}")
        if buckets_in_flight < 1:
            raise ValueError(f"buckets_in_flight must be >= 1, got {buckets_in_flight}")
        super().__init__(named_parameters, layouts=layouts, muon=muon, adamw=adamw, routing=routing)
        self.buckets_in_flight = buckets_in_flight
        # Plans depend only on shapes and meshes, so they are made once. Keyed by the position of the
        # param group, which load_state_dict keeps.
        self._plans: dict[int, tuple[list[_Matrix], list[_Bucket]]] = {}
        for index, group in enumerate(self.param_groups):
            if group["algorithm"] != "muon":
                continue
            matrices = [_describe(name, param, self.layouts[name])
                        for name, param in zip(group["param_names"], group["params"])]
            element_size = torch.empty(0, dtype=NS_DTYPES[group["ns_dtype"]]).element_size()
            self._plans[index] = (matrices, _plan_buckets(matrices, bucket_bytes=bucket_bytes,
                                                          element_size=element_size, steps=group["ns_steps"]))

    @torch.no_grad()
    def step(self, closure: Any = None) -> float | None:  # type: ignore[override]
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for index, group in enumerate(self.param_groups):
            if group["algorithm"] == "muon":
                self._sharded_muon_step(group, *self._plans[index])
            else:
                self._adamw_group_step(group)
        return loss

    def _adamw_group_step(self, group: dict[str, Any]) -> None:
        for param in group["params"]:
            if param.grad is None:
                continue
            state = self._adamw_state(param)
            # The step counter is a plain tensor, so `+= 1` inside updates the stored one.
            adamw_update(_local(param), _local(param.grad), {k: _local(v) for k, v in state.items()}, group)

    def _sharded_muon_step(self, group: dict[str, Any], matrices: list[_Matrix], buckets: list[_Bucket]) -> None:
        missing = [m.name for m in matrices if m.param.grad is None]
        if len(missing) == len(matrices):
            return
        if missing:
            # The exchange plan needs every unit; skipping some parameters would desynchronize ranks.
            raise RuntimeError(f"sharded Muon needs a gradient for every parameter of the group; none for {missing}")
        lr, weight_decay, momentum = group["lr"], group["weight_decay"], group["momentum"]
        dtype = NS_DTYPES[group["ns_dtype"]]

        # One ns-dtype work tensor per matrix, in the local shard layout: it holds the momentum update
        # until a bucket packs its pieces, then receives the orthogonalized pieces. Each piece belongs
        # to one bucket, and a bucket packs before its results come back, so one tensor serves both.
        work: list[Tensor] = []
        pieces: list[dict[int, Tensor]] = []
        for matrix in matrices:
            grad = _local(matrix.param.grad)  # type: ignore[arg-type]
            buf = _local(self._momentum_buffer(matrix.param))
            buf.lerp_(grad, 1 - momentum)
            update = grad.lerp(buf, momentum) if group["nesterov"] else buf
            work.append(update.to(dtype, copy=True))
            pieces.append({u: view for u, _, view in
                           matrix.layout.shard_pieces(work[-1], matrix.start, matrix.full_shape)})

        def exchange(bucket: _Bucket, send: Tensor, send_splits: list[int], recv_splits: list[int]) -> tuple[Tensor, Any]:
            if bucket.group is None:
                return send, None  # unsharded: this rank is the only source and the only owner
            recv = send.new_empty(sum(recv_splits))
            handle = dist.all_to_all_single(recv, send, recv_splits, send_splits, group=bucket.group, async_op=True)
            return recv, handle

        def start_gather(bucket: _Bucket) -> tuple[Tensor, Any]:
            parts = [pieces[m][u].reshape(-1) for m, u in bucket.outgoing]
            send = torch.cat(parts) if parts else work[0].new_empty(0)
            return exchange(bucket, send, bucket.outgoing_splits, bucket.incoming_splits)

        def orthogonalize_and_return(bucket: _Bucket, recv: Tensor) -> tuple[Tensor, Any]:
            a, b = bucket.unit_shape
            full_Nab = recv.new_empty(bucket.owned, a, b)
            offset = 0
            for slot, lo, hi in bucket.incoming:
                full_Nab[slot, lo:hi] = recv[offset:offset + (hi - lo) * b].view(hi - lo, b)
                offset += (hi - lo) * b
            if bucket.owned:
                full_Nab = newton_schulz(full_Nab, coefficients=group["ns_coefficients"], steps=group["ns_steps"],
                                         eps=group["eps"], dtype=dtype)
            parts = [full_Nab[slot, lo:hi].reshape(-1) for slot, lo, hi in bucket.incoming]
            send = torch.cat(parts) if parts else recv.new_empty(0)
            return exchange(bucket, send, bucket.incoming_splits, bucket.outgoing_splits)

        def finish_return(bucket: _Bucket, recv: Tensor, handle: Any) -> None:
            if handle is not None:
                handle.wait()
            offset = 0
            for m, u in bucket.outgoing:
                piece = pieces[m][u]
                piece.copy_(recv[offset:offset + piece.numel()].view_as(piece))
                offset += piece.numel()

        gathers: dict[int, tuple[Tensor, Any]] = {}
        returns: deque[tuple[_Bucket, Tensor, Any]] = deque()
        for i, bucket in enumerate(buckets):
            # Keep the next buckets' gathers running while this one is orthogonalized.
            for j in range(i, min(i + self.buckets_in_flight, len(buckets))):
                if j not in gathers:
                    gathers[j] = start_gather(buckets[j])
            recv, handle = gathers.pop(i)
            if handle is not None:
                handle.wait()
            returns.append((bucket, *orthogonalize_and_return(bucket, recv)))
            while len(returns) > self.buckets_in_flight:
                finish_return(*returns.popleft())
        while returns:
            finish_return(*returns.popleft())

        for matrix, update in zip(matrices, work):
            scale = lr_scale(matrix.layout.unit_shape(matrix.full_shape), group["lr_scaling"])
            param = _local(matrix.param)
            param.mul_(1 - lr * weight_decay)
            param.add_(update, alpha=-lr * scale)


def build_sharded_muon_adamw(
    model: torch.nn.Module,
    *,
    muon: MuonConfig | None = None,
    adamw: AdamWConfig | None = None,
    routing: Sequence[RoutingRule] = DEFAULT_ROUTING,
    bucket_bytes: int = 16 * 2**20,
    buckets_in_flight: int = 2,
) -> ShardedMuonWithAdamW:
    """The sharded optimizer for a `trainer.model.Transformer`, after (or without) `fully_shard`."""
    return ShardedMuonWithAdamW(model.named_parameters(), layouts=matrix_layouts(model), muon=muon, adamw=adamw,
                                routing=routing, bucket_bytes=bucket_bytes, buckets_in_flight=buckets_in_flight)
