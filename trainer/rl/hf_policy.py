"""A Hugging Face causal LM as the RL loop's policy (`trainer.rl.policy.RLPolicy`).

``[rl.policy] kind = "hf"``: any `transformers` causal LM with its tokenizer (`HFPolicy`), loaded
from a local folder (``model_dir``, ``from_pretrained``; nothing is downloaded) or built at random
from a config (``model_config``). It samples with ``model.generate``; with ``[rl.generator] kind =
"openai"`` (`OpenAIPolicy`) an OpenAI-compatible server (vLLM, SGLang) serving the same weights
samples instead, and the log-probs and the loss still run here, on the model being trained.

**Tokens of the chat format.** A conversation (``trainer.rl.chat.render``) is tokenized piece by
piece: the text between assistant messages (tags, system, user and tool messages) as one piece,
each assistant message's body as another, so a body's tokens never merge with the tags around
it. The mask marks the bodies' tokens (the policy gradient's tokens); the prompt a message is
sampled from is the same pieces up to the open ``<|assistant|>`` tag, so the sampler and the loss
see the same context tokens. A sampled message is kept as text (the environment reads text) and
tokenized again for the loss, which can differ from the sampled tokens where the tokenizer has
several spellings of one string: the log-probs and the PPO ratio are both computed on the
re-tokenized message, so they stay consistent with each other. Special-token text inside a
message (``<|endoftext|>`` in a file, say) is tokenized as plain text, never as the special token.
The tokenizer's BOS (if it has one) starts every sequence; its EOS ends each feedback target, as
the byte tokenizer's does.

**Sampling** stops at an EOS, at the start of the next block (``<|``), or after
``max_new_tokens``; the message is the text before ``<|`` without trailing newlines
(`message_text`). The sampler draws from softmax(logits / temperature), the distribution the
log-probs are taken from too (`token_logprobs` divides by the temperature): the model's own
generation defaults (top-k, top-p, repetition penalty, ...) are replaced, and requests to a
server set them off explicitly.

**The feedback KL** is `trainer.rl.kl.chunked_token_kl` on the decoder's final hidden states (after
the final norm) and the lm head's weight, so the [tokens × vocab] logits never exist whole; that
needs the model's logits to be exactly ``lm_head(last_hidden_state)``, which `HFPolicy` checks
once on a few tokens (``kl_path``). A model whose logits are transformed further (a final
softcap, a logit scale) or whose head has a bias fails the check and takes the reference,
`trainer.rl.kl.naive_token_kl` on the full logits of the hinted turns.

**Weights and the server.** An `OpenAIPolicy` does not move weights to the server: that is the
caller's job, through the ``sync_weights`` hook (``[rl.generator] sync``: a function called with the
model after every update and once at the start). Without a hook the server keeps the weights it
was started with and the rollouts are off-policy.

Shape legend: B sequences, T positions, D model dim, V vocabulary, N target tokens.
"""

from __future__ import annotations

import importlib
import json
import logging
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

import torch
from torch import Tensor

from trainer.rl.chat import Message, Trajectory, tag
from trainer.rl.feedback import FeedbackExample, Hint, teacher_context
from trainer.rl.kl import chunked_token_kl, naive_token_kl, predicting_rows
from trainer.rl.policy import TokenSequence

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from trainer.parallel_dims import Meshes, ParallelDims
    from trainer.rl.config import GeneratorConfig, PolicyConfig
    from trainer.rl.kl import KLKind

__all__ = [
    "BLOCK_START",
    "GeneratorError",
    "HFPolicy",
    "OpenAIPolicy",
    "load_hf_policy",
    "message_text",
]

log = logging.getLogger(__name__)

BLOCK_START = "<|"
"""What every block of the chat format starts with; sampling stops there."""


def message_text(generated: str) -> str:
    """The assistant message in a sampled continuation: the text before the next block, without
    trailing newlines (which rendering drops anyway)."""
    cut = generated.find(BLOCK_START)
    return (generated if cut < 0 else generated[:cut]).rstrip("\n")


class GeneratorError(RuntimeError):
    """The completions server refused a request, answered something unreadable, or could not be reached."""


def _token_ids(value: int | list[int] | None) -> list[int]:
    if value is None:
        return []
    return [value] if isinstance(value, int) else list(value)


class HFPolicy:
    """A `transformers` causal LM and its tokenizer as the RL policy (see the module docstring).

    In one process the model trains in place: `model` is both the sampler and the trained weights.
    With several processes `model` is FSDP2-sharded (`trainer.parallelize.shard_hf_model`) and
    `rollout_model`, a full replica on each rank, samples; `after_update` refreshes it from the
    shards. ``context`` is `max_seq_len`, or the config's ``max_position_embeddings``.
    """

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        *,
        max_new_tokens: int,
        temperature: float,
        device: torch.device,
        max_seq_len: int | None = None,
        kl_path: Literal["auto", "chunked", "naive"] = "auto",
        rollout_model: PreTrainedModel | None = None,
    ) -> None:
        from transformers import GenerationConfig

        if tokenizer.eos_token_id is None:
            raise ValueError("the tokenizer has no EOS token; a feedback target ends with one")
        self.distributed = rollout_model is not None
        if not self.distributed:
            model.to(device)  # type: ignore[arg-type]
        self.model = model
        self.rollout_model: PreTrainedModel = rollout_model if rollout_model is not None else model
        self.rollout_model.to(device)  # type: ignore[arg-type]
        self.tokenizer = tokenizer
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature
        self.device = device
        self.context: int = max_seq_len or model.config.max_position_embeddings
        if self.context <= max_new_tokens + 1:
            raise ValueError(f"the context ({self.context} tokens) leaves no room for a prompt "
                             f"before {max_new_tokens} new tokens")
        self.bos: list[int] = _token_ids(tokenizer.bos_token_id)
        self.eos_id: int = tokenizer.eos_token_id
        stop_ids = sorted({self.eos_id, *_token_ids(self.rollout_model.generation_config.eos_token_id)})
        pad_id = self.eos_id if tokenizer.pad_token_id is None else tokenizer.pad_token_id
        self.pad_id: int = pad_id
        # generate() fills every sampling option left unset from the model's generation config, so
        # that config is replaced by one that sets none (no top-k, top-p, penalties, ...).
        self.rollout_model.generation_config = GenerationConfig(  # type: ignore[no-untyped-call]
            bos_token_id=tokenizer.bos_token_id, eos_token_id=stop_ids, pad_token_id=pad_id)
        self.generation_config = GenerationConfig(  # type: ignore[no-untyped-call]
            do_sample=True, temperature=temperature, top_k=0, top_p=1.0, max_new_tokens=max_new_tokens,
            eos_token_id=stop_ids, pad_token_id=pad_id, stop_strings=[BLOCK_START])
        chunked_ok = self._logits_are_head_of_hidden()
        if kl_path == "chunked" and not chunked_ok:
            raise ValueError("kl_path chunked needs logits = lm_head(last hidden state) with a bias-free head; "
                             "this model's are not")
        self.kl_path: Literal["chunked", "naive"] = "naive" if kl_path == "naive" or not chunked_ok else "chunked"
        log.info("HF policy %s: context %d, feedback KL %s", type(model).__name__, self.context, self.kl_path)

    # -- tokens ------------------------------------------------------------------------------------

    def encode_text(self, text: str) -> list[int]:
        """Tokens of plain text: no BOS or EOS added, special-token text kept as text."""
        ids: list[int] = self.tokenizer(text, add_special_tokens=False, split_special_tokens=True)["input_ids"]
        return ids

    def encode_chat(self, messages: Sequence[Message], *, open_assistant: bool) -> TokenSequence:
        """BOS and the rendered conversation (`trainer.rl.chat.render`, plus the assistant tag if
        `open_assistant`), assistant bodies tokenized on their own and marked in the mask."""
        tokens, mask = list(self.bos), [False] * len(self.bos)
        pending = ""
        for message in messages:
            if message.role != "assistant":
                pending += message.render()
                continue
            for text, generated in ((pending + tag("assistant"), False), (message.content.rstrip("\n"), True)):
                ids = self.encode_text(text)
                tokens += ids
                mask += [generated] * len(ids)
            pending = "\n"
        if open_assistant:
            pending += tag("assistant")
        ids = self.encode_text(pending)
        return TokenSequence(tokens=tokens + ids, mask=mask + [False] * len(ids))

    def encode_prefix(self, messages: Sequence[Message]) -> list[int]:
        """The prompt for the next assistant message, cut from the left (after BOS) to leave room
        for `max_new_tokens`."""
        ids = self.encode_chat(messages, open_assistant=True).tokens
        room = self.context - self.max_new_tokens
        return ids if len(ids) <= room else [*self.bos, *ids[len(ids) - room + len(self.bos):]]

    def sequence(self, trajectory: Trajectory) -> TokenSequence:
        seq = self.encode_chat(trajectory.messages, open_assistant=False)
        if len(seq.tokens) > self.context:
            seq = TokenSequence(tokens=seq.tokens[-self.context:], mask=seq.mask[-self.context:])
        return seq

    def encode_feedback(self, trajectory: Trajectory, hint: Hint) -> FeedbackExample:
        """The student and teacher sequences of a hinted turn (as `trainer.rl.feedback.encode_feedback`
        builds them for the byte tokenizer): the prompt of that turn, without and with the hint,
        then the turn's message and EOS, the span covering those. A sequence longer than the
        context loses the start of its prompt after BOS."""
        student, teacher, target = teacher_context(trajectory, hint)
        answer = [*self.encode_text(target.rstrip("\n")), self.eos_id]
        sequences = []
        for prefix in (student, teacher):
            context = self.encode_chat(prefix, open_assistant=True).tokens
            if len(context) + len(answer) > self.context:
                keep = self.context - len(self.bos) - len(answer)
                if keep < 1:
                    raise ValueError(f"the target ({len(answer)} tokens with EOS) does not fit in the "
                                     f"context of {self.context}")
                context = [*self.bos, *context[len(context) - keep:]]
            sequences.append((torch.tensor(context + answer), (len(context), len(context) + len(answer))))
        (student_tokens, student_span), (teacher_tokens, teacher_span) = sequences
        return FeedbackExample(hint=hint, student_tokens=student_tokens, teacher_tokens=teacher_tokens,
                               student_span=student_span, teacher_span=teacher_span)

    # -- sampling ----------------------------------------------------------------------------------

    @torch.no_grad()
    def generate(self, messages: Sequence[Message], generator: torch.Generator) -> str:
        ids = self.encode_prefix(messages)
        seed = int(torch.randint(2**62, (1,), generator=generator))
        prompt_1T = torch.tensor([ids], device=self.device)
        sampler = self.rollout_model
        was_training = sampler.training
        sampler.eval()  # type: ignore[no-untyped-call]
        # generate() draws from the global RNG; a fork seeded from `generator` keeps runs reproducible
        # without disturbing the caller's RNG.
        devices = [self.device.index or 0] if self.device.type == "cuda" else []
        try:
            with torch.random.fork_rng(devices=devices):
                torch.manual_seed(seed)
                out_1T = sampler.generate(prompt_1T, attention_mask=torch.ones_like(prompt_1T),  # type: ignore[operator]
                                          generation_config=self.generation_config, tokenizer=self.tokenizer)
        finally:
            sampler.train(was_training)
        text = self.tokenizer.decode(out_1T[0, len(ids):].tolist(), skip_special_tokens=True)
        return message_text(cast(str, text))

    def after_update(self) -> None:
        """With shards, refresh the sampling replica from them; in one process the sampler is the
        trained model itself."""
        if self.distributed:
            from torch.distributed.checkpoint.state_dict import (
                StateDictOptions,
                get_model_state_dict,
            )

            full = get_model_state_dict(self.model, options=StateDictOptions(full_state_dict=True))
            self.rollout_model.load_state_dict(full)

    # -- scores and the loss -----------------------------------------------------------------------

    def token_logprobs(self, tokens: list[int], targets: list[int] | None = None) -> Tensor:
        """Under softmax(logits / temperature), the distribution messages are sampled from."""
        ids_1T = torch.tensor([tokens], device=self.device)
        wanted_T = ids_1T[0, 1:] if targets is None else torch.tensor(targets, device=self.device)
        logits_TV = self.model(input_ids=ids_1T).logits[0, :-1].float() / self.temperature
        return torch.log_softmax(logits_TV, dim=-1).gather(1, wanted_T[:, None])[:, 0]

    def _batch(self, sequences: Sequence[Tensor]) -> tuple[Tensor, Tensor]:
        """Right-padded ids [B, T] and their attention mask: padding comes after each sequence,
        where a causal model never looks from the target positions."""
        ids_BT = torch.full((len(sequences), max(len(s) for s in sequences)), self.pad_id, dtype=torch.long)
        mask_BT = torch.zeros_like(ids_BT)
        for i, sequence in enumerate(sequences):
            ids_BT[i, :len(sequence)] = sequence
            mask_BT[i, :len(sequence)] = 1
        return ids_BT.to(self.device), mask_BT.to(self.device)

    def _final_hidden(self, ids_BT: Tensor, mask_BT: Tensor) -> Tensor:
        """The decoder's last hidden state [B, T, D], after its final norm: what lm_head reads (of the
        unsharded replica: the decoder is called alone, outside any FSDP2 forward)."""
        decoder = self.rollout_model.get_decoder()  # type: ignore[no-untyped-call]
        hidden_BTD: Tensor = decoder(input_ids=ids_BT, attention_mask=mask_BT).last_hidden_state
        return hidden_BTD

    def _with_head(self, ids_BT: Tensor, mask_BT: Tensor, head: Callable[[Tensor, Tensor], Tensor]) -> Tensor:
        """``head(last hidden state, lm_head weight)`` computed inside the model's own forward, in
        place of the logits: under FSDP2 the head's weight is gathered there and its gradient is
        reduce-scattered like any other (`kl_path` chunked has checked that the logits are exactly
        lm_head(last hidden state), so nothing after the head is skipped)."""
        lm_head = self.model.get_output_embeddings()  # type: ignore[no-untyped-call]
        lm_head.forward = lambda hidden: head(hidden, lm_head.weight)
        try:
            out: Tensor = self.model(input_ids=ids_BT, attention_mask=mask_BT).logits
        finally:
            del lm_head.forward
        return out

    @torch.no_grad()
    def _logits_are_head_of_hidden(self) -> bool:
        """Whether the model's logits are exactly lm_head(last hidden state), on 8 tokens, with the
        head's weight scaled for the check so that the largest logit is about 50: a nonlinear
        transform of the logits (a softcap) is then far from the identity, and a constant factor
        (a logit scale) is visible at any size."""
        # On the replica when there are shards: the same architecture, unsharded weights.
        model = self.rollout_model
        head = model.get_output_embeddings()  # type: ignore[no-untyped-call]
        if not isinstance(head, torch.nn.Linear) or head.bias is not None:
            return False
        ids_BT = (torch.arange(8) % model.config.vocab_size)[None].to(self.device)
        mask_BT = torch.ones_like(ids_BT)
        saved_VD = head.weight.detach().clone()
        try:
            head.weight.mul_(50.0 / (float(head(self._final_hidden(ids_BT, mask_BT)).abs().max()) + 1e-12))
            logits_BTV = model(input_ids=ids_BT, attention_mask=mask_BT).logits
            from_hidden_BTV = head(self._final_hidden(ids_BT, mask_BT))
        finally:
            head.weight.copy_(saved_VD)
        # The same ops on the same inputs: equal up to kernel nondeterminism, well inside this tolerance.
        return bool(torch.allclose(from_hidden_BTV.float(), logits_BTV.float(), rtol=1e-4, atol=1e-3))

    def feedback_tokens(self, hinted: Sequence[tuple[Trajectory, Hint]]) -> int:
        """Target tokens of the hinted turns (what `feedback_kl` averages over)."""
        return sum(e.student_span[1] - e.student_span[0] for e in (self.encode_feedback(t, h) for t, h in hinted))

    def feedback_kl(self, hinted: Sequence[tuple[Trajectory, Hint]], *, kind: KLKind, chunk_size: int) -> Tensor:
        """`trainer.rl.kl.feedback_kl_loss` for this model: the teacher (hinted prompt) under no_grad,
        the student with gradients, the divergence averaged over the target tokens. With shards, a
        rank without hints runs an example whose KL is 0 (the other ranks' forwards need its)."""
        examples = [self.encode_feedback(trajectory, hint) for trajectory, hint in hinted]
        if not examples:
            if not self.distributed:
                raise ValueError("feedback_kl needs at least one hinted turn")
            tokens = torch.tensor([*self.bos, *self.encode_text("{}"), self.eos_id])
            span = (len(tokens) - 2, len(tokens))
            examples = [FeedbackExample(hint=Hint(turn=0, text="", detector="none"), student_tokens=tokens,
                                        teacher_tokens=tokens, student_span=span, teacher_span=span)]
        student = self._batch([e.student_tokens for e in examples])
        teacher = self._batch([e.teacher_tokens for e in examples])
        student_spans = [e.student_span for e in examples]
        teacher_spans = [e.teacher_span for e in examples]
        if self.kl_path == "chunked":
            with torch.no_grad():
                teacher_rows_ND = predicting_rows(self._with_head(*teacher, lambda hidden, _weight: hidden),
                                                  teacher_spans)

            def head(hidden_BTD: Tensor, weight_VD: Tensor) -> Tensor:
                return chunked_token_kl(predicting_rows(hidden_BTD, student_spans), teacher_rows_ND, weight_VD,
                                        kind=kind, chunk_size=chunk_size)

            kl_N = self._with_head(*student, head)
        else:
            with torch.no_grad():
                teacher_logits_BTV = self.model(input_ids=teacher[0], attention_mask=teacher[1]).logits
            student_logits_BTV = self.model(input_ids=student[0], attention_mask=student[1]).logits
            kl_N = naive_token_kl(predicting_rows(student_logits_BTV, student_spans),
                                  predicting_rows(teacher_logits_BTV, teacher_spans), kind=kind)
        return kl_N.mean()


class OpenAIPolicy(HFPolicy):
    """An `HFPolicy` whose messages come from an OpenAI-compatible completions server (vLLM,
    SGLang) that serves the same weights and tokenizer; log-probs and the loss run on `model`.

    Each message is one ``POST {base_url}/completions`` whose ``prompt`` is the token ids of
    `encode_prefix` (both servers take a list of ids, so the server samples from exactly the
    context the loss scores), with ``stop: ["<|"]``, ``max_tokens``, ``temperature``, a ``seed``
    drawn from the loop's generator, and ``top_p 1``, ``top_k -1``, ``min_p 0``,
    ``repetition_penalty 1`` (vLLM and SGLang extensions), so that a server which applies the
    model's generation defaults samples the plain distribution all the same. A refused or
    unreachable request is tried `retries` more times, then raises `GeneratorError`.

    Weights: `sync_weights(model)` runs after every update and from `after_update`'s first call;
    it is the caller's code (the server's own update endpoint, a shared checkpoint folder, ...).
    """

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        *,
        base_url: str,
        served_model: str,
        max_new_tokens: int,
        temperature: float,
        device: torch.device,
        api_key: str | None = None,
        timeout_s: float = 600.0,
        retries: int = 2,
        sync_weights: Callable[[PreTrainedModel], None] | None = None,
        max_seq_len: int | None = None,
        kl_path: Literal["auto", "chunked", "naive"] = "auto",
    ) -> None:
        super().__init__(model, tokenizer, max_new_tokens=max_new_tokens, temperature=temperature, device=device,
                         max_seq_len=max_seq_len, kl_path=kl_path)
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must be an http(s) URL, got {base_url!r}")
        if not served_model:
            raise ValueError("served_model must name the model the server serves")
        if retries < 0:
            raise ValueError(f"retries must be >= 0, got {retries}")
        self.base_url = base_url.rstrip("/")
        self.served_model = served_model
        self.api_key = api_key
        self.timeout_s = timeout_s
        self.retries = retries
        self.sync_weights = sync_weights

    def generate(self, messages: Sequence[Message], generator: torch.Generator) -> str:
        ids = self.encode_prefix(messages)
        seed = int(torch.randint(2**31 - 1, (1,), generator=generator))
        body = {
            "model": self.served_model, "prompt": ids, "max_tokens": self.max_new_tokens,
            "temperature": self.temperature, "top_p": 1.0, "top_k": -1, "min_p": 0.0, "repetition_penalty": 1.0,
            "n": 1, "stop": [BLOCK_START], "seed": seed,
        }
        answer = self._post("/completions", body)
        try:
            text = answer["choices"][0]["text"]
        except (KeyError, IndexError, TypeError):
            raise GeneratorError(f"the completions answer has no choices[0].text: {str(answer)[:300]}") from None
        if not isinstance(text, str):
            raise GeneratorError(f"choices[0].text is {type(text).__name__}, not a string")
        return message_text(text)

    def after_update(self) -> None:
        if self.sync_weights is not None:
            self.sync_weights(self.rollout_model)

    def _post(self, path: str, payload: dict[str, Any]) -> Any:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        request = urllib.request.Request(self.base_url + path, data=json.dumps(payload).encode(), headers=headers,
                                         method="POST")
        for attempt in range(self.retries + 1):
            try:
                with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                    return json.loads(response.read())
            except urllib.error.HTTPError as err:
                detail = err.read()[:300].decode("utf-8", errors="replace")
                err.close()
                if err.code not in (429, 502, 503) or attempt == self.retries:
                    raise GeneratorError(f"{self.base_url}{path}: HTTP {err.code}: {detail}") from None
            except (urllib.error.URLError, ConnectionError) as err:
                if attempt == self.retries:
                    raise GeneratorError(f"{self.base_url}{path} is unreachable: {err}") from None
            except json.JSONDecodeError as err:
                raise GeneratorError(f"{self.base_url}{path} answered something that is not JSON: {err}") from None
            time.sleep(min(30.0, 0.5 * 2**attempt))
        raise AssertionError("unreachable")


def _resolve_hook(dotted: str) -> Callable[[PreTrainedModel], None]:
    """A function from "package.module:function"."""
    module, sep, name = dotted.partition(":")
    if not sep or not module or not name:
        raise ValueError(f"rl.generator.sync must look like package.module:function, got {dotted!r}")
    hook: Callable[[PreTrainedModel], None] = getattr(importlib.import_module(module), name)
    return hook


def load_hf_policy(policy: PolicyConfig, generator: GeneratorConfig, *, seed: int, device: torch.device,
                   dims: ParallelDims | None = None, meshes: Meshes | None = None) -> HFPolicy:
    """The Hugging Face policy of ``[rl.policy]`` (``kind = "hf"``) sampling as ``[rl.generator]``
    says: the model from ``model_dir`` (float32 master weights) or, at random from ``seed``, from
    ``model_config``; the tokenizer from ``tokenizer_dir`` or ``model_dir``; local files only. With
    `meshes` (several processes) the model is FSDP2-sharded and a full replica samples."""
    import os

    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    for key in ("model_dir", "tokenizer_dir"):
        folder = getattr(policy, key)
        if folder and not Path(folder).is_dir():
            raise ValueError(f"rl.policy.{key} {folder!r} is not a folder (models are read from local folders only)")
    tokenizer = AutoTokenizer.from_pretrained(policy.tokenizer_dir or policy.model_dir, local_files_only=True)
    if policy.model_dir:
        model = AutoModelForCausalLM.from_pretrained(policy.model_dir, dtype=torch.float32, local_files_only=True)
    else:
        options = dict(policy.model_config)
        hf_config = AutoConfig.for_model(options.pop("model_type"), **options)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = AutoModelForCausalLM.from_config(hf_config, dtype=torch.float32)  # type: ignore[no-untyped-call]
    common: dict[str, Any] = {"max_new_tokens": generator.max_new_tokens, "temperature": generator.temperature,
                              "device": device}
    if meshes is not None and dims is not None:
        import copy

        from trainer.parallelize import shard_hf_model

        model.to(device)
        common["rollout_model"] = copy.deepcopy(model)
        shard_hf_model(model, dims, meshes)
    if generator.kind == "local":
        return HFPolicy(model, tokenizer, **common)
    return OpenAIPolicy(model, tokenizer, base_url=generator.url, served_model=generator.model,
                        api_key=os.environ.get(generator.api_key_env) or None,
                        sync_weights=_resolve_hook(generator.sync) if generator.sync else None, **common)
