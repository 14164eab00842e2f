"""Optimizers: Muon with AdamW on one device (the reference), on FSDP2 shards, and for Hugging Face models."""
