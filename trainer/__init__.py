"""taskforge trainer: an MoE model, Muon (per head, per expert, sharded over FSDP2), dual-mesh HSDP,
continued pretraining and RL on mined tasks.

    cli            `taskforge-train`: the launcher (torchrun for several processes) and the mode dispatch
    recipe         the typed configs of a recipe and their strict TOML loading (no loop code)
    runtime        what both modes share: process group, device, seeds, model and optimizer,
                   warmup, checkpoint cadence and resume, run record, metrics
    model          the decoder-only MoE transformer and its matrix layouts
    parallel_dims  parallel degrees and the dense, expert and batch meshes
    parallelize    FSDP2 over the two meshes, context-parallel attention
    checkpoint     DCP checkpoints that resume exactly
    optim/         muon_reference (one device), sharded_muon (FSDP2 shards), hf_muon (a Hugging Face LM)
    pretrain/      data (Parquet token streams, byte tokenizer), loop (continued pretraining)
    rl/            config ([rl] and its sections), policy, loop, hf_policy, env, chat, episodes,
                   curriculum, feedback, monitor, kl
    testing        a tiny tokenizer and tiny Hugging Face models for tests (nothing downloaded)

Imports go one way (tests/trainer/test_imports.py checks that there is no cycle): cli dispatches
to pretrain.loop and rl.loop, which build on runtime, recipe and the model, optimizer and RL
pieces; recipe reads the configs of the modules that own them. torch is imported by the modules
that need it, never here. The trainer uses taskforge only through its public API (``from taskforge
import ...``); taskforge never imports the trainer.
"""

__all__: list[str] = []
