"""Continued pretraining: token streams from Parquet (`data`) and the training loop (`loop`)."""
