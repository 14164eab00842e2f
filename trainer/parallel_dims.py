"""Parallel degrees of one training run, and the named device meshes built from them.

Ranks are laid out row-major over (dp_replicate, dp_shard, cp, tp): consecutive ranks first differ
in tp (always 1 here), then in cp, then in dp_shard, and last in dp_replicate. On a GPU node the
inner factors therefore stay inside the node and only the replicas cross nodes (and an expert group
made wider than a dense shard group, which spans replicas on purpose).

Three meshes are built over that one layout, each with named axes:

``dense``  ("dp_replicate", "dp_shard_cp")
    HSDP for everything that is not an expert: parameters are sharded over the dp_shard * cp ranks
    of one replica and replicated over dp_replicate. The cp ranks hold the same parameters and see
    different parts of the same sequences, so they join the shard group (as in torchtitan).

``expert`` ("dp_replicate_e", "ep")
    HSDP for the stacked expert weights. "ep" is a contiguous block of ``ep`` ranks; the expert
    tensors ``[E, ...]`` are sharded on their expert dimension over it, so each ep rank stores
    ``E / ep`` whole experts. "dp_replicate_e" = world / ep holds the replicas. Experts borrow the
    ranks of the dense mesh rather than adding ranks of their own, so EP and CP overlap: at world 8,
    cp=2 and ep=8 fit on 8 GPUs, not 16. An ep block either lies inside one dense shard group
    (``ep`` divides dp_shard * cp: experts stay inside a node) or is made of ``ep / (dp_shard * cp)``
    whole consecutive dense shard groups (experts sharded wider than the dense weights, across their
    replicas). Any other ``ep`` would cut dense shard groups unevenly, and is rejected.

``batch``  ("dp", "cp")
    Who reads which data: "dp" = dp_replicate * dp_shard ranks read different sequences, and the
    "cp" ranks of one dp index split the same sequences along time.

Examples at world 8. Small dense shard groups with experts inside them, dp_replicate=2,
dp_shard=2, cp=2, ep=2::

    dense   [[0 1 2 3] [4 5 6 7]]         shard groups {0..3} {4..7}, replicas {0,4} {1,5} ...
    expert  [[0 1] [2 3] [4 5] [6 7]]     experts split over pairs, replicated four times
    batch   [[0 1] [2 3] [4 5] [6 7]]     four data-parallel readers, each pair splits time

The same dense layout with experts sharded wide, across both replicas (ep=8)::

    dense   [[0 1 2 3] [4 5 6 7]]         shard groups {0..3} {4..7}, replicas {0,4} {1,5} ...
    expert  [[0 1 2 3 4 5 6 7]]           one expert group of both shard groups, no replicas
    batch   [[0 1] [2 3] [4 5] [6 7]]

Either way both meshes span every rank, so FSDP2 averages each gradient over all world_size ranks
exactly once (see `trainer.parallelize`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch
    from torch.distributed.device_mesh import DeviceMesh

__all__ = ["Meshes", "ParallelDims"]


@dataclass(kw_only=True, slots=True, frozen=True)
class ParallelDims:
    """Parallel degrees; their product (without ep, which borrows ranks) is the world size."""

    dp_replicate: int = 1
    """Replicas of the dense HSDP mesh (across nodes on a cluster)."""
    dp_shard: int = 1
    """Data-parallel ranks that shard parameters inside one replica."""
    cp: int = 1
    """Context-parallel ranks that split each sequence along time."""
    tp: int = 1
    """Tensor parallelism; validated, and only 1 is implemented."""
    ep: int = 1
    """Ranks the expert weights are sharded over; must divide dp_shard * cp, or be a multiple of
    it that divides world_size (experts sharded across dense replicas)."""
    world_size: int
    """Number of processes; must equal dp_replicate * dp_shard * cp * tp."""

    def __post_init__(self) -> None:
        for name in ("dp_replicate", "dp_shard", "cp", "tp", "ep", "world_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.tp != 1:
            raise ValueError(f"tp={self.tp} is not implemented; tp must be 1")
        product = self.dp_replicate * self.dp_shard * self.cp * self.tp
        if product != self.world_size:
            raise ValueError(
                f"dp_replicate ({self.dp_replicate}) * dp_shard ({self.dp_shard}) * cp ({self.cp})"
                f" * tp ({self.tp}) = {product}, but world_size is {self.world_size}"
            )
        # Both cases keep ep a divisor of world_size: dp_shard * cp divides it.
        inside_a_shard_group = self.dp_shard_cp % self.ep == 0
        across_shard_groups = self.ep % self.dp_shard_cp == 0 and self.world_size % self.ep == 0
        if not (inside_a_shard_group or across_shard_groups):
            raise ValueError(
                f"ep ({self.ep}) must divide dp_shard ({self.dp_shard}) * cp ({self.cp})"
                f" = {self.dp_shard_cp} (experts inside one dense shard group), or be a multiple of"
                f" it that divides world_size ({self.world_size}) = dp_replicate ({self.dp_replicate})"
                f" * {self.dp_shard_cp} (experts across whole dense shard groups)"
            )

    @property
    def dp(self) -> int:
        """Data-parallel degree: how many ranks read different sequences."""
        return self.dp_replicate * self.dp_shard

    @property
    def dp_shard_cp(self) -> int:
        """Size of one dense shard group."""
        return self.dp_shard * self.cp

    @property
    def dp_replicate_e(self) -> int:
        """Replicas of the expert weights."""
        return self.world_size // self.ep

    def dense_layout(self) -> torch.Tensor:
        """Ranks of the dense mesh, shape [dp_replicate, dp_shard * cp]."""
        import torch

        return torch.arange(self.world_size).reshape(self.dp_replicate, self.dp_shard_cp)

    def expert_layout(self) -> torch.Tensor:
        """Ranks of the expert mesh, shape [world / ep, ep]: each row lies inside one dense row
        (ep divides dp_shard * cp) or is ep / (dp_shard * cp) whole consecutive dense rows."""
        import torch

        return torch.arange(self.world_size).reshape(self.dp_replicate_e, self.ep)

    def batch_layout(self) -> torch.Tensor:
        """Ranks of the batch mesh, shape [dp, cp]."""
        import torch

        return torch.arange(self.world_size).reshape(self.dp, self.cp)

    def build_meshes(self, device_type: str) -> Meshes:
        """Build the three named meshes; every rank of the default process group must call this."""
        import torch.distributed as dist
        from torch.distributed.device_mesh import DeviceMesh

        if dist.get_world_size() != self.world_size:
            raise ValueError(
                f"world_size is {self.world_size} but the process group has {dist.get_world_size()} ranks"
            )
        return Meshes(
            dense=DeviceMesh(device_type, self.dense_layout(), mesh_dim_names=("dp_replicate", "dp_shard_cp")),
            expert=DeviceMesh(device_type, self.expert_layout(), mesh_dim_names=("dp_replicate_e", "ep")),
            batch=DeviceMesh(device_type, self.batch_layout(), mesh_dim_names=("dp", "cp")),
        )


@dataclass(kw_only=True, slots=True, frozen=True)
class Meshes:
    """The named meshes of one run (see the module docstring for their layouts)."""

    dense: DeviceMesh
    """("dp_replicate", "dp_shard_cp"): HSDP mesh of embeddings, attention, norms, router, output."""
    expert: DeviceMesh
    """("dp_replicate_e", "ep"): HSDP mesh of the stacked expert weights."""
    batch: DeviceMesh
    """("dp", "cp"): which sequences a rank reads, and which time slice of them."""

    @property
    def dp_rank(self) -> int:
        """Index of this rank's share of the global batch."""
        return self.batch.get_local_rank("dp")

    @property
    def cp_rank(self) -> int:
        """Index of this rank's time slice."""
        return self.batch.get_local_rank("cp")
