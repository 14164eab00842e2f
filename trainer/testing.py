"""Test helpers that ship with the trainer (as httpx ships `MockTransport`): a byte-level BPE
tokenizer trained here on a few chat-format turns, and tiny random Hugging Face causal LMs over it
(Llama, or Mixtral with stacked experts). Nothing is downloaded; they need the ``train`` extra
(``transformers``, ``tokenizers``).

    tokenizer = byte_bpe_tokenizer()
    model = tiny_causal_lm(tokenizer, family="mixtral", seed=1)
    policy = HFPolicy(model, tokenizer, max_new_tokens=24, temperature=1.0, device=torch.device("cpu"))
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Literal

import torch

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

__all__ = ["CHAT_CORPUS", "byte_bpe_tokenizer", "tiny_causal_lm"]

CHAT_CORPUS = (
    "<|system|>\nYou are fixing a repository. Tools: list_files, read_file, edit_file, run_tests, submit.\n"
    'Reply with exactly one JSON object {"tool": NAME, "args": {...}}.\n'
    "<|user|>\nImplement `pkg.mod:func` so that the tests pass.\n"
    '<|assistant|>\n{"tool": "list_files", "args": {"path": "."}}\n'
    "<|tool|>\nsrc/pkg/__init__.py\nsrc/pkg/mod.py\ntests/test_mod.py\n"
    '<|assistant|>\n{"tool": "read_file", "args": {"path": "src/pkg/mod.py", "start_line": 1, "end_line": 40}}\n'
    "<|tool|>\ndef func(x):\n    raise NotImplementedError\n"
    '<|assistant|>\n{"tool": "edit_file", "args": {"path": "src/pkg/mod.py", "old": "raise", "new": "return x"}}\n'
    "<|tool|>\nerror (malformed): not JSON: Expecting value at column 1\n"
    "<|hint|>\nReminder: run the tests (run_tests) before you submit.\n"
    '<|assistant|>\n{"tool": "run_tests", "args": {"paths": ["tests/test_mod.py"]}}\n'
    "<|tool|>\n===== 3 passed, 1 failed in 0.12s =====\nexit status 1\n"
    '<|assistant|>\n{"tool": "submit", "args": {}}\n'
)
"""A few turns of the chat format (`trainer.rl.chat`): the default training text of `byte_bpe_tokenizer`."""


def byte_bpe_tokenizer(corpus: Iterable[str] = (CHAT_CORPUS,), *, vocab_size: int = 512) -> PreTrainedTokenizerBase:
    """A byte-level BPE tokenizer trained here on `corpus` (by default a few chat-format turns),
    with ``<bos>``, ``<eos>`` and ``<pad>``: every byte has a token, so it encodes any text."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    backend.train_from_iterator(corpus, trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=["<bos>", "<eos>", "<pad>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    return PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=backend, bos_token="<bos>", eos_token="<eos>", pad_token="<pad>")


def tiny_causal_lm(tokenizer: PreTrainedTokenizerBase, *, family: Literal["llama", "mixtral"] = "llama",
                   seed: int = 0, max_position_embeddings: int = 2048) -> PreTrainedModel:
    """A randomly initialized 2-layer model (hidden 64, 4 query heads of 16, 2 key/value heads)
    over `tokenizer`'s vocabulary: Llama, or Mixtral with 4 stacked experts (top 2)."""
    from transformers import (
        LlamaConfig,
        LlamaForCausalLM,
        MixtralConfig,
        MixtralForCausalLM,
    )

    common: dict[str, Any] = {
        "vocab_size": len(tokenizer), "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": max_position_embeddings,
        "bos_token_id": tokenizer.bos_token_id, "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
    }
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        if family == "llama":
            return LlamaForCausalLM(LlamaConfig(**common))
        return MixtralForCausalLM(MixtralConfig(**common, num_local_experts=4, num_experts_per_tok=2))

