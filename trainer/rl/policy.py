"""What the RL loop asks of a policy (`RLPolicy`), and the trainer's own MoE model as one.

`RLPolicy` is five methods: write an assistant message (`generate`), turn a finished trajectory
into tokens with the policy's own tokens marked (`sequence`), score tokens (`token_logprobs`), give
the feedback KL of a batch of hinted turns (`feedback_kl`), and hear that the weights changed
(`after_update`). Two families implement it:

- ``[rl.policy] kind = "trainer"``: the trainer's `Transformer` with the byte tokenizer
  (`TrainerPolicy`, here), sharded over the recipe's meshes or not;
- ``kind = "hf"``: a `transformers` causal LM with its tokenizer (`trainer.rl.hf_policy`).

With several processes `TrainerPolicy` samples from a full replica of the weights on each rank
(refreshed from the FSDP2 shards after every update), while log-probs and the loss run on the
sharded model, with the same forward passes on every rank: a rank without a hint runs the KL on
an empty example. The feedback KL is the chunked one in both cases (it runs as the model's output
head, inside the forward where FSDP2 gathers the output weight).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import torch
from torch import Tensor

from trainer.pretrain.data import ByteTokenizer
from trainer.rl.chat import Message, Trajectory, render_prefix
from trainer.rl.feedback import FeedbackExample, Hint, encode_feedback
from trainer.rl.kl import (
    feedback_kl_loss,
)

if TYPE_CHECKING:
    from trainer.model import Transformer
    from trainer.rl.kl import KLKind

__all__ = ["ByteSampler", "RLPolicy", "TokenSequence", "TrainerPolicy", "sampling_logits", "trajectory_sequence"]


@dataclass(kw_only=True, slots=True)
class TokenSequence:
    """A conversation as tokens."""

    tokens: list[int]
    mask: list[bool]
    """True at positions whose token the policy generated (its assistant messages, and the token
    that ended each one)."""
    targets: list[int] | None = None
    """The token scored at each position 1 .. T-1 when it is not the sequence's own: the EOS that
    ended a message the sampler stopped on EOS, at the place of the newline that renders the
    message's end. None: ``tokens[1:]``."""


class RLPolicy(Protocol):
    """What the RL loop needs of a policy (see the module docstring)."""

    def generate(self, messages: Sequence[Message], generator: torch.Generator) -> str:
        """The next assistant message after `messages`, sampled with randomness from `generator`."""
        ...

    def sequence(self, trajectory: Trajectory) -> TokenSequence:
        """The whole conversation as tokens with the policy's own marked, cut from the left to the context."""
        ...

    def token_logprobs(self, tokens: list[int], targets: list[int] | None = None) -> Tensor:
        """log p(target_t | tokens_<t) for t = 1 .. T-1 (targets: ``tokens[1:]`` by default), under
        the distribution messages are sampled from, with gradients to the trained weights."""
        ...

    def feedback_kl(self, hinted: Sequence[tuple[Trajectory, Hint]], *, kind: KLKind, chunk_size: int) -> Tensor:
        """Mean over the target tokens of the hinted turns of the student's divergence from the teacher."""
        ...

    def feedback_tokens(self, hinted: Sequence[tuple[Trajectory, Hint]]) -> int:
        """How many target tokens `feedback_kl` averages over (the weight of this rank's mean in
        the global one)."""
        ...

    def after_update(self) -> None:
        """The trained weights changed: bring the sampler up to date."""
        ...


def sampling_logits(logits: Tensor, temperature: float) -> Tensor:
    """The logits messages are sampled from (last dimension: the vocabulary): divided by the
    temperature, with every token but the 256 bytes and EOS masked out (never BOS or PAD)."""
    eos = ByteTokenizer().eos_id
    allowed = torch.full((logits.shape[-1],), float("-inf"), device=logits.device)
    allowed[:256] = 0.0
    allowed[eos] = 0.0
    return logits / temperature + allowed


class ByteSampler:
    """Samples assistant messages from the trainer's model over the byte tokenizer. ``last_ending``
    says how the last message ended: ``eos`` (sampled EOS), ``tag`` (sampled the newline and ``<|``
    that start another block, which are cut off) or ``limit`` (``max_new_tokens``)."""

    def __init__(self, model: Transformer, *, max_new_tokens: int, temperature: float, device: torch.device) -> None:
        self.model = model
        self.tokenizer = ByteTokenizer()
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature
        self.device = device
        self.context = model.config.max_seq_len
        self.last_ending = ""

    def encode_prefix(self, text: str) -> list[int]:
        """BOS and the text's bytes (no EOS: the model continues it), cut from the left to fit."""
        ids = [self.tokenizer.bos_id, *text.encode("utf-8")]
        room = self.context - self.max_new_tokens
        return ids if len(ids) <= room else [self.tokenizer.bos_id, *ids[len(ids) - room + 1:]]

    @torch.no_grad()
    def generate(self, messages: Sequence[Message], generator: torch.Generator) -> str:
        """One assistant message: sampled until EOS, the start of another block, or the limit."""
        ids = self.encode_prefix(render_prefix(messages))
        out: list[int] = []
        was_training = self.model.training
        self.model.eval()
        self.last_ending = "limit"
        try:
            for _ in range(self.max_new_tokens):
                tokens = torch.tensor([ids + out], device=self.device)
                logits = self.model(tokens)[0, -1].float()
                probs = torch.softmax(sampling_logits(logits, self.temperature), dim=-1)
                token = int(torch.multinomial(probs.cpu(), 1, generator=generator))
                if token == self.tokenizer.eos_id:
                    self.last_ending = "eos"
                    break
                out.append(token)
                if bytes(out[-3:]) == b"\n<|":
                    out = out[:-3]
                    self.last_ending = "tag"
                    break
        finally:
            self.model.train(was_training)
        return bytes(out).decode("utf-8", errors="replace")


def trajectory_sequence(trajectory: Trajectory, context: int) -> TokenSequence:
    """The whole conversation as byte tokens, with the assistant messages marked, cut from the left
    to ``context`` tokens.

    The token that ended each sampled message is marked too, so the policy gradient teaches when
    to stop as the feedback KL does (its targets end with EOS): a message the sampler stopped on
    EOS scores EOS in place of the newline that renders its end (the same logits: the context is
    the message so far); one stopped on the newline and ``<|`` of a next block marks those three
    tokens, which the next message's header repeats exactly; one cut at ``max_new_tokens`` marks
    nothing more. A turn without a recorded ending (a scripted message) ends on EOS."""
    tokenizer = ByteTokenizer()
    endings = {turn.index: turn.ending for turn in trajectory.turns}
    tokens, mask, targets = [tokenizer.bos_id], [False], []
    tags: list[int] = []  # positions of a newline and "<|" that ended a message
    for index, message in enumerate(trajectory.messages):
        head = f"<|{message.role}|>\n".encode()
        body = message.content.rstrip("\n").encode("utf-8")
        generated = message.role == "assistant"
        start = len(tokens)
        tokens += [*head, *body, *b"\n"]
        mask += [False] * len(head) + [generated] * len(body) + [False]
        targets += tokens[start:]
        if not generated:
            continue
        ending = endings.get(index, "eos") or "eos"
        end = len(tokens) - 1  # the newline after the body
        if ending == "eos":
            mask[end] = True
            targets[end - 1] = tokenizer.eos_id
        elif ending == "tag":
            tags += [end, end + 1, end + 2]
    for position in tags:
        if position < len(mask):
            mask[position] = True
    if len(tokens) > context:
        tokens, mask, targets = tokens[-context:], mask[-context:], targets[-(context - 1):]
    return TokenSequence(tokens=tokens, mask=mask, targets=targets)


class TrainerPolicy:
    """The trainer's own model as the RL loop's policy (`RLPolicy`): messages sampled from
    `rollout_model` (a full replica with several processes; else `model` itself), log-probs and the
    feedback KL from `model` (FSDP2-sharded with several processes)."""

    def __init__(self, model: Transformer, rollout_model: Transformer, *, max_new_tokens: int, temperature: float,
                 device: torch.device, distributed: bool) -> None:
        self.model = model
        self.rollout_model = rollout_model
        self.sampler = ByteSampler(rollout_model, max_new_tokens=max_new_tokens, temperature=temperature,
                                   device=device)
        self.context = self.sampler.context
        self.device = device
        self.distributed = distributed

    def generate(self, messages: Sequence[Message], generator: torch.Generator) -> str:
        return self.sampler.generate(messages, generator)

    @property
    def last_ending(self) -> str:
        """How the last generated message ended (`ByteSampler`)."""
        return self.sampler.last_ending

    def sequence(self, trajectory: Trajectory) -> TokenSequence:
        return trajectory_sequence(trajectory, self.context)

    def token_logprobs(self, tokens: list[int], targets: list[int] | None = None) -> Tensor:
        ids = torch.tensor([tokens], device=self.device)
        wanted = ids[0, 1:] if targets is None else torch.tensor(targets, device=self.device)
        logits = sampling_logits(self.model(ids)[0, :-1].float(), self.sampler.temperature)
        return torch.log_softmax(logits, dim=-1).gather(1, wanted[:, None])[:, 0]

    def feedback_tokens(self, hinted: Sequence[tuple[Trajectory, Hint]]) -> int:
        examples = [encode_feedback(trajectory, hint, max_len=self.context) for trajectory, hint in hinted]
        return sum(e.student_span[1] - e.student_span[0] for e in examples)

    def feedback_kl(self, hinted: Sequence[tuple[Trajectory, Hint]], *, kind: KLKind, chunk_size: int) -> Tensor:
        """The chunked feedback KL, sharded or not; with shards, on an empty example when this rank
        has no hints (the other ranks' forwards need this rank's)."""
        examples = [encode_feedback(trajectory, hint, max_len=self.context) for trajectory, hint in hinted]
        if self.distributed and not examples:
            examples = [_empty_example()]
        return feedback_kl_loss(self.model, [e.student_tokens for e in examples], [e.teacher_tokens for e in examples],
                                [e.student_span for e in examples], [e.teacher_span for e in examples],
                                kind=kind, chunk_size=chunk_size)

    def after_update(self) -> None:
        """With shards, refresh the rollout replica from them."""
        if self.distributed:
            from torch.distributed.checkpoint.state_dict import (
                StateDictOptions,
                get_model_state_dict,
            )

            full = get_model_state_dict(self.model, options=StateDictOptions(full_state_dict=True))
            self.rollout_model.load_state_dict(full)


def _empty_example() -> FeedbackExample:
    """A hinted turn whose teacher and student are the same sequence: its KL is 0. A rank without
    hints runs it so that every rank makes the same forward passes."""
    tokenizer = ByteTokenizer()
    tokens = torch.tensor([tokenizer.bos_id, *b"{}", tokenizer.eos_id])
    return FeedbackExample(hint=Hint(turn=0, text="", detector="none"), student_tokens=tokens, teacher_tokens=tokens,
                           student_span=(1, 4), teacher_span=(1, 4))
