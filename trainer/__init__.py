"""taskforge trainer: an MoE model, Muon (per head, per expert, sharded over FSDP2), dual-mesh HSDP,
continued pretraining and RL on mined tasks.

torch is imported by the modules that need it, never here. The `taskforge-train` launcher is
`trainer.cli:main`. The trainer uses taskforge only through its public API; taskforge never
imports the trainer.
"""

__all__: list[str] = []
