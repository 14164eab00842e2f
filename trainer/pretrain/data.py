"""Token streams for continued pretraining: text documents from Parquet files, a byte-level
tokenizer, and fixed-length sequences cut from the packed stream.

Every document becomes ``BOS bytes... EOS``; the documents of all files, in file order, are
concatenated into one stream, which is cut into sequences of ``seq_len + 1`` tokens (inputs and
next-token targets overlap by one). Sequence order is a seeded permutation per epoch, so the batch
of a step is a pure function of (seed, number of sequences consumed): the data position saved in a
checkpoint is that one number.

The stream is tokenized in memory when the loader is built. That suits test corpora and a few
hundred MB of code; a large corpus would be tokenized ahead of time into shards instead.

Shape legend: B sequences, T positions.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

__all__ = [
    "ByteTokenizer",
    "DataConfig",
    "PackedSequences",
    "check_sources",
    "local_slice",
    "write_code_corpus",
]


@dataclass(kw_only=True, slots=True)
class DataConfig:
    """Where the training text comes from and how it is cut into batches."""

    parquet: list[str]
    """Parquet files with one document per row, read in this order."""
    text_column: str = "text"
    """Column holding the document text."""
    seq_len: int
    """Tokens per training sequence (the model sees seq_len inputs and seq_len targets)."""
    global_batch: int
    """Sequences per optimizer step, summed over all data-parallel ranks."""
    build_from: list[str] = field(default_factory=list)
    """Source folders whose Python files make the first Parquet file when it does not exist yet."""

    def __post_init__(self) -> None:
        if not self.parquet:
            raise ValueError("parquet must name at least one file")
        if not self.text_column:
            raise ValueError("text_column must not be empty")
        if self.seq_len < 1:
            raise ValueError(f"seq_len must be >= 1, got {self.seq_len}")
        if self.global_batch < 1:
            raise ValueError(f"global_batch must be >= 1, got {self.global_batch}")


class ByteTokenizer:
    """UTF-8 bytes are tokens 0..255; then BOS, EOS and PAD. Needs no files and no downloads."""

    bos_id = 256
    eos_id = 257
    pad_id = 258
    vocab_size = 259

    def encode(self, text: str) -> list[int]:
        """BOS, the UTF-8 bytes of `text`, EOS."""
        return [self.bos_id, *text.encode("utf-8"), self.eos_id]

    def encode_tensor(self, text: str) -> torch.Tensor:
        """`encode` as an int64 tensor, without a Python int per byte."""
        import torch

        encoded = bytearray(text.encode("utf-8"))
        body = torch.frombuffer(encoded, dtype=torch.uint8) if encoded else torch.empty(0, dtype=torch.uint8)
        return torch.cat([torch.tensor([self.bos_id]), body.long(), torch.tensor([self.eos_id])])

    def decode(self, ids: Sequence[int]) -> str:
        """Text of the byte tokens in `ids`; special tokens are dropped."""
        return bytes(i for i in ids if i < 256).decode("utf-8", errors="replace")


def check_sources(config: DataConfig) -> None:
    """Raise ValueError naming the first Parquet file that is missing and will not be built."""
    buildable = {config.parquet[0]} if config.build_from else set()
    for name in config.parquet:
        if name not in buildable and not Path(name).is_file():
            raise ValueError(f"data.parquet file {name!r} does not exist (and data.build_from does not make it)")
    for source in config.build_from:
        if not Path(source).is_dir():
            raise ValueError(f"data.build_from folder {source!r} does not exist")


def write_code_corpus(sources: Sequence[Path], out: Path, *, suffix: str = ".py") -> int:
    """Write the files ending in `suffix` under each folder of `sources` to the Parquet file `out`
    (columns repo, path, text), in sorted order; return the number of documents.

    The file appears only when complete (written beside it, then renamed).
    """
    import pyarrow as pa  # type: ignore[import-untyped]
    import pyarrow.parquet as pq  # type: ignore[import-untyped]

    repos, paths, texts = [], [], []
    for source in sources:
        source = Path(source)
        if not source.is_dir():
            raise ValueError(f"build_from folder {str(source)!r} does not exist")
        for path in sorted(source.rglob(f"*{suffix}")):
            if not path.is_file() or "__pycache__" in path.parts:
                continue
            repos.append(source.name)
            paths.append(str(path.relative_to(source)))
            texts.append(path.read_text(encoding="utf-8", errors="replace"))
    if not texts:
        raise ValueError(f"no *{suffix} files under {[str(s) for s in sources]}")
    table = pa.table({"repo": repos, "path": paths, "text": texts})
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp")
    os.close(fd)
    try:
        pq.write_table(table, tmp)
        os.chmod(tmp, 0o644)
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return len(texts)


class PackedSequences:
    """The packed token stream of a `DataConfig`, served as global batches in a seeded order.

    `next_batch()` returns the next [global_batch, seq_len + 1] tokens and advances the position;
    `state_dict()` / `load_state_dict()` carry the position through a checkpoint.
    """

    def __init__(self, config: DataConfig, tokenizer: ByteTokenizer, *, seed: int) -> None:
        import pyarrow.parquet as pq
        import torch

        self.config = config
        self.seed = seed
        documents: list[torch.Tensor] = []
        for name in config.parquet:
            table = pq.read_table(name, columns=[config.text_column])
            texts = table.column(config.text_column).to_pylist()
            documents.extend(tokenizer.encode_tensor(text) for text in texts)
        self.tokens = torch.cat(documents)
        self.num_sequences = (len(self.tokens) - 1) // config.seq_len
        if self.num_sequences < config.global_batch:
            raise ValueError(
                f"the corpus has {len(self.tokens)} tokens, {self.num_sequences} sequences of seq_len"
                f" {config.seq_len}: fewer than global_batch ({config.global_batch})"
            )
        self.position = 0
        """Sequences consumed so far, over all epochs."""

    def _order(self, epoch: int) -> torch.Tensor:
        import torch

        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
        return torch.randperm(self.num_sequences, generator=generator)

    def next_batch(self) -> torch.Tensor:
        """The next global batch, [global_batch, seq_len + 1] token ids."""
        import torch

        seq_len = self.config.seq_len
        rows = []
        orders: dict[int, torch.Tensor] = {}
        for position in range(self.position, self.position + self.config.global_batch):
            epoch, index = divmod(position, self.num_sequences)
            if epoch not in orders:
                orders[epoch] = self._order(epoch)
            start = int(orders[epoch][index]) * seq_len
            rows.append(self.tokens[start:start + seq_len + 1])
        self.position += self.config.global_batch
        return torch.stack(rows)

    def state_dict(self) -> dict[str, Any]:
        return {"position": self.position, "seed": self.seed, "num_sequences": self.num_sequences}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if (state["seed"], state["num_sequences"]) != (self.seed, self.num_sequences):
            raise ValueError(
                f"data state was saved for seed {state['seed']} and {state['num_sequences']} sequences;"
                f" this corpus has seed {self.seed} and {self.num_sequences}"
            )
        self.position = int(state["position"])


def local_slice(
    batch_BT: torch.Tensor, *, dp_rank: int, dp: int, cp_rank: int, cp: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """(inputs, targets) of one rank: its dp share of the sequences and its cp share of positions."""
    sequences, width = batch_BT.shape
    seq_len = width - 1
    if sequences % dp:
        raise ValueError(f"global_batch ({sequences}) must be divisible by the data-parallel degree ({dp})")
    if seq_len % cp:
        raise ValueError(f"seq_len ({seq_len}) must be divisible by cp ({cp})")
    rows, cols = sequences // dp, seq_len // cp
    mine = batch_BT[dp_rank * rows:(dp_rank + 1) * rows]
    inputs_BT = mine[:, cp_rank * cols:(cp_rank + 1) * cols]
    targets_BT = mine[:, cp_rank * cols + 1:(cp_rank + 1) * cols + 1]
    return inputs_BT, targets_BT
