"""A Hugging Face causal LM as the RL policy: chat tokens and masks, sampling, log-probs, the feedback
KL against its reference, Muon per head and per expert from the HF config, generation through an
OpenAI-compatible server (a scripted one on loopback), and an RL step on mined tasks.

Everything is built here: a byte-level BPE tokenizer trained on a few chat turns and tiny random
Llama and Mixtral models; nothing is downloaded.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar, Literal

import pytest

pytest.importorskip("transformers")

import torch

from trainer.model import MatrixLayout
from trainer.optim.hf_muon import (
    HF_ROUTING,
    StackedHalves,
    build_hf_muon_adamw,
    hf_matrix_layouts,
)
from trainer.optim.muon_reference import AdamWConfig, MuonConfig, newton_schulz
from trainer.rl.chat import Message, ToolCall, Trajectory, Turn, render
from trainer.rl.config import GeneratorConfig, PolicyConfig, RLConfig
from trainer.rl.feedback import Hint
from trainer.rl.hf_policy import (
    GeneratorError,
    HFPolicy,
    OpenAIPolicy,
    load_hf_policy,
    message_text,
)
from trainer.testing import byte_bpe_tokenizer, tiny_causal_lm

ROOT = Path(__file__).resolve().parents[2]
CPU = torch.device("cpu")
CALL = '{"tool": "read_file", "args": {"path": "src/pkg/mod.py"}}'


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return byte_bpe_tokenizer()


def _policy(tokenizer: Any, *, family: Literal["llama", "mixtral"] = "llama", seed: int = 0, **options: Any) -> HFPolicy:
    options = {"max_new_tokens": 24, "temperature": 1.0, "device": CPU, **options}
    return HFPolicy(tiny_causal_lm(tokenizer, family=family, seed=seed), tokenizer, **options)


def _trajectory() -> Trajectory:
    """Two turns: a malformed call (hinted below), then a read."""
    trajectory = Trajectory(task_id="t", tools=("read_file", "submit"), messages=[
        Message(role="system", content="You fix repositories. <eos> is not the end."),
        Message(role="user", content="Implement `pkg.mod:func`."),
        Message(role="assistant", content="read the file please\n"),
        Message(role="tool", content="error (malformed): not JSON"),
        Message(role="assistant", content=CALL),
        Message(role="tool", content="def func(x):\n    raise NotImplementedError"),
    ])
    trajectory.turns += [
        Turn(index=2, text="read the file please\n", call=ToolCall(error="not JSON"), observation="error",
             error="not JSON", error_kind="malformed"),
        Turn(index=4, text=CALL, call=ToolCall(name="read_file", args={"path": "src/pkg/mod.py"}), observation="..."),
    ]
    return trajectory


# -- tokens ------------------------------------------------------------------------------------------


def test_chat_tokens_mask_exactly_the_assistant_messages(tokenizer: Any) -> None:
    policy = _policy(tokenizer)
    trajectory = _trajectory()
    sequence = policy.sequence(trajectory)
    assert sequence.tokens[0] == tokenizer.bos_token_id
    assert tokenizer.decode(sequence.tokens[1:]) == render(trajectory.messages)
    marked = [t for t, m in zip(sequence.tokens, sequence.mask, strict=True) if m]
    assert tokenizer.decode(marked) == "read the file please" + CALL
    # "<eos>" written in a message is text, never the EOS token.
    assert tokenizer.eos_token_id not in sequence.tokens
    # The prompt of the second turn is exactly the sequence's tokens up to that message.
    prompt = policy.encode_prefix(trajectory.messages[:4])
    assert sequence.tokens[:len(prompt)] == prompt and sequence.mask[len(prompt)]
    # Cut from the left to the context.
    short = _policy(tokenizer, max_seq_len=40, max_new_tokens=8)
    cut = short.sequence(trajectory)
    assert len(cut.tokens) == 40 and cut.tokens == sequence.tokens[-40:]
    assert len(short.encode_prefix(trajectory.messages)) == 32
    assert short.encode_prefix(trajectory.messages)[0] == tokenizer.bos_token_id


def test_feedback_spans_hold_the_same_target_after_both_prompts(tokenizer: Any) -> None:
    policy = _policy(tokenizer)
    trajectory = _trajectory()
    hint = Hint(turn=0, text='Reminder: reply with exactly one JSON object {"tool": NAME, "args": {...}}.',
                detector="malformed_call")
    example = policy.encode_feedback(trajectory, hint)
    (s0, s1), (t0, t1) = example.student_span, example.teacher_span
    assert torch.equal(example.student_tokens[s0:s1], example.teacher_tokens[t0:t1])
    assert s1 == len(example.student_tokens) and t1 == len(example.teacher_tokens)
    target = example.student_tokens[s0:s1].tolist()
    assert target[-1] == tokenizer.eos_token_id and tokenizer.decode(target[:-1]) == "read the file please"
    student_text = tokenizer.decode(example.student_tokens[:s0].tolist())
    teacher_text = tokenizer.decode(example.teacher_tokens[:t0].tolist())
    assert student_text.endswith("<|user|>\nImplement `pkg.mod:func`.\n<|assistant|>\n")
    assert teacher_text == student_text.removesuffix("<|assistant|>\n") + f"<|hint|>\n{hint.text}\n<|assistant|>\n"
    # Too long for the context: the prompt loses its start after BOS; the hint and the target stay.
    short = _policy(tokenizer, max_seq_len=30, max_new_tokens=8).encode_feedback(trajectory, hint)
    assert len(short.teacher_tokens) == 30 and short.teacher_tokens[0] == tokenizer.bos_token_id
    assert short.teacher_tokens[short.teacher_span[0]:].tolist() == target


# -- sampling and log-probs -------------------------------------------------------------------------------


def test_message_text_cuts_at_the_next_block() -> None:
    assert message_text('{"tool": "submit"}\n<|tool|>\nok') == '{"tool": "submit"}'
    assert message_text("<|tool|>") == "" and message_text("abc\n\n") == "abc" and message_text("a<b") == "a<b"


def test_sampling_draws_from_the_scored_distribution(tokenizer: Any) -> None:
    """One token from generate() is the token torch.multinomial draws from softmax(logits / T)
    under the same seed, although the model's own generation defaults say top-k 3, top-p 0.3 and
    a repetition penalty: the policy replaces them."""
    from transformers import GenerationConfig

    model = tiny_causal_lm(tokenizer)
    model.generation_config = GenerationConfig(  # type: ignore[no-untyped-call]
        do_sample=True, top_k=3, top_p=0.3, repetition_penalty=3.0)
    policy = HFPolicy(model, tokenizer, max_new_tokens=1, temperature=0.7, device=CPU)
    messages = [Message(role="user", content="say something")]
    prompt = policy.encode_prefix(messages)
    with torch.no_grad():
        probs_V = torch.softmax(model(torch.tensor([prompt])).logits[0, -1] / 0.7, dim=-1)
    for seed in range(8):
        sampled = policy.generate(messages, torch.Generator().manual_seed(seed))
        generator = torch.Generator().manual_seed(seed)
        torch.manual_seed(int(torch.randint(2**62, (1,), generator=generator)))
        expected = int(torch.multinomial(probs_V, 1))
        assert sampled == message_text(tokenizer.decode([expected], skip_special_tokens=True))
    # The same generator state gives the same message.
    again = [policy.generate(messages, torch.Generator().manual_seed(3)) for _ in range(2)]
    assert again[0] == again[1]


def test_sampling_stops_at_a_block_start_and_at_eos(tokenizer: Any) -> None:
    """A tiny model taught two continuations: "ok" then a new block (and more text), and "done"
    then EOS. Both messages end where they should, long before max_new_tokens."""
    policy = _policy(tokenizer, max_new_tokens=24)
    model = policy.model
    say_ok = [Message(role="user", content="say ok")]
    say_done = [Message(role="user", content="say done")]
    taught = [
        (policy.encode_prefix(say_ok), policy.encode_text("ok\n<|tool|>\nnothing to see here, more and more text")),
        (policy.encode_prefix(say_done), [*policy.encode_text("done"), tokenizer.eos_token_id]),
    ]
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for _ in range(300):
        loss = sum(-policy.token_logprobs(prompt + answer)[len(prompt) - 1:].sum() for prompt, answer in taught)
        optimizer.zero_grad()
        loss.backward()  # type: ignore[union-attr]
        optimizer.step()
        if float(loss.detach()) < 0.05:  # type: ignore[union-attr]
            break
    forwards = []
    hook = model.get_decoder().register_forward_hook(  # type: ignore[no-untyped-call]
        lambda *_: forwards.append(1))
    try:
        generator = torch.Generator().manual_seed(0)
        assert policy.generate(say_ok, generator) == "ok"
        assert 0 < len(forwards) < 8  # "ok", "\n", "<|": then it stopped
        forwards.clear()
        assert policy.generate(say_done, generator) == "done"
        assert 0 < len(forwards) < 8
    finally:
        hook.remove()


def test_log_probs_equal_a_manual_computation(tokenizer: Any) -> None:
    policy = _policy(tokenizer)
    tokens = policy.sequence(_trajectory()).tokens
    got = policy.token_logprobs(tokens)
    with torch.no_grad():
        logits_TV = policy.model(torch.tensor([tokens])).logits[0].double()
    expected = [float(logits_TV[t - 1, tokens[t]] - torch.logsumexp(logits_TV[t - 1], dim=0))
                for t in range(1, len(tokens))]
    # float32 log-softmax against float64 on logits of O(0.1): rounding only.
    assert torch.allclose(got.double(), torch.tensor(expected, dtype=torch.float64), atol=1e-5, rtol=0)
    got.sum().backward()  # type: ignore[no-untyped-call]
    assert policy.model.model.layers[0].self_attn.q_proj.weight.grad is not None


# -- the feedback KL -------------------------------------------------------------------------------------


@pytest.mark.parametrize("family", ["llama", "mixtral"])
@pytest.mark.parametrize("kind", ["reverse", "forward", "jsd"])
def test_feedback_kl_chunked_equals_the_naive_reference(tokenizer: Any, family: Literal["llama", "mixtral"],
                                                         kind: str) -> None:
    trajectory = _trajectory()
    hinted = [(trajectory, Hint(turn=0, text="Reminder: one JSON call.", detector="malformed_call")),
              (trajectory, Hint(turn=1, text="Reminder: run the tests.", detector="untested_submit"))]
    results = []
    for kl_path in ("chunked", "naive"):
        policy = _policy(tokenizer, family=family, seed=1, kl_path=kl_path)
        assert policy.kl_path == kl_path
        kl = policy.feedback_kl(hinted, kind=kind, chunk_size=7)  # type: ignore[arg-type]
        kl.backward()  # type: ignore[no-untyped-call]
        grads = {name: p.grad.clone() for name, p in policy.model.named_parameters() if p.grad is not None}
        results.append((kl.detach(), grads))
    (kl_chunked, grads_chunked), (kl_naive, grads_naive) = results
    assert float(kl_naive) > 0
    # float32; the two sum the same terms in another order (trainer.rl.kl.chunked_token_kl's tolerance).
    assert torch.allclose(kl_chunked, kl_naive, rtol=1e-5, atol=1e-6)
    assert grads_chunked.keys() == grads_naive.keys() and "lm_head.weight" in grads_chunked
    for name, grad in grads_chunked.items():
        assert torch.allclose(grad, grads_naive[name], rtol=1e-4, atol=1e-6), name


def test_a_softcapped_model_takes_the_naive_kl(tokenizer: Any) -> None:
    from transformers import Gemma2Config, Gemma2ForCausalLM

    options = {"vocab_size": len(tokenizer), "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1,
               "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
               "eos_token_id": tokenizer.eos_token_id, "pad_token_id": tokenizer.pad_token_id}
    capped = Gemma2ForCausalLM(Gemma2Config(**options, final_logit_softcapping=30.0))
    head_before = capped.lm_head.weight.detach().clone()
    policy = HFPolicy(capped, tokenizer, max_new_tokens=8, temperature=1.0, device=CPU)
    assert policy.kl_path == "naive"
    assert torch.equal(capped.lm_head.weight, head_before)  # the check leaves the (tied) weights as they were
    with pytest.raises(ValueError, match="kl_path chunked"):
        HFPolicy(capped, tokenizer, max_new_tokens=8, temperature=1.0, device=CPU, kl_path="chunked")
    plain = Gemma2ForCausalLM(Gemma2Config(**options, final_logit_softcapping=None))
    assert HFPolicy(plain, tokenizer, max_new_tokens=8, temperature=1.0, device=CPU).kl_path == "chunked"


# -- Muon per head and per expert ------------------------------------------------------------------------


def _orthogonalized(matrix: torch.Tensor) -> torch.Tensor:
    return newton_schulz(matrix[None], coefficients=MuonConfig().ns_coefficients, steps=5, eps=1e-7,
                         dtype=torch.float32)[0]


def test_muon_groups_per_head_and_per_expert_from_the_hf_config(tokenizer: Any) -> None:
    """After one step (lr 0.1, no weight decay, one step of momentum: the update is a multiple of
    the gradient, which orthogonalization does not see), q_proj moved by each head's rows
    orthogonalized on their own, o_proj by each head's columns, a fused expert gate_up by each
    expert's gate and up halves, and down_proj per expert."""
    model = tiny_causal_lm(tokenizer, family="mixtral")
    layouts = hf_matrix_layouts(model)
    prefix = "model.layers.0."
    assert layouts[prefix + "self_attn.q_proj.weight"] == MatrixLayout(kind="row_blocks", units=4)
    assert layouts[prefix + "self_attn.k_proj.weight"] == MatrixLayout(kind="row_blocks", units=2)
    assert layouts[prefix + "self_attn.o_proj.weight"] == MatrixLayout(kind="col_blocks", units=4)
    assert layouts[prefix + "mlp.experts.gate_up_proj"] == StackedHalves(experts=4)
    assert layouts[prefix + "mlp.experts.down_proj"] == MatrixLayout(kind="stacked", units=4)

    muon = MuonConfig(lr=0.1, weight_decay=0.0, ns_dtype="float32", lr_scaling="none")
    optimizer = build_hf_muon_adamw(model, muon=muon, adamw=AdamWConfig(lr=0.0, weight_decay=0.0))
    by_algorithm: dict[str, set[str]] = {"muon": set(), "adamw": set()}
    for group in optimizer.param_groups:
        by_algorithm[group["algorithm"]].update(group["param_names"])
    assert {prefix + "mlp.gate.weight", "model.embed_tokens.weight", "lm_head.weight", "model.norm.weight",
            prefix + "input_layernorm.weight"} <= by_algorithm["adamw"]
    assert {prefix + f"self_attn.{p}_proj.weight" for p in "qkvo"} | {
        prefix + "mlp.experts.gate_up_proj", prefix + "mlp.experts.down_proj"} <= by_algorithm["muon"]

    generator = torch.Generator().manual_seed(0)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    for p in model.parameters():
        p.grad = torch.randn(p.shape, generator=generator)
    grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    optimizer.step()
    after = dict(model.named_parameters())

    def moved(name: str) -> torch.Tensor:
        return (before[name] - after[name].detach()) / 0.1

    q = prefix + "self_attn.q_proj.weight"
    expected_q = torch.cat([_orthogonalized(head) for head in torch.split(grads[q], 16, dim=0)])
    o = prefix + "self_attn.o_proj.weight"
    expected_o = torch.cat([_orthogonalized(head) for head in torch.split(grads[o], 16, dim=1)], dim=1)
    gate_up = prefix + "mlp.experts.gate_up_proj"
    expected_gate_up = torch.stack([torch.cat([_orthogonalized(half) for half in torch.split(expert, 128, dim=0)])
                                    for expert in grads[gate_up]])
    down = prefix + "mlp.experts.down_proj"
    expected_down = torch.stack([_orthogonalized(expert) for expert in grads[down]])
    # The same float32 iteration on the same matrices, batched one way or the other: rounding only.
    for name, expected in ((q, expected_q), (o, expected_o), (gate_up, expected_gate_up), (down, expected_down)):
        assert torch.allclose(moved(name), expected, atol=1e-5, rtol=1e-4), name
    # And not the same as orthogonalizing q_proj whole: the grouping matters.
    assert not torch.allclose(moved(q), _orthogonalized(grads[q]), atol=1e-3)


def test_a_dense_llama_routes_its_mlp_to_muon_and_layouts_check_the_heads(tokenizer: Any) -> None:
    model = tiny_causal_lm(tokenizer)
    optimizer = build_hf_muon_adamw(model)
    muon = {name for group in optimizer.param_groups if group["algorithm"] == "muon" for name in group["param_names"]}
    assert muon == {f"model.layers.{i}.{part}.weight" for i in (0, 1) for part in (
        "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
        "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")}
    assert hf_matrix_layouts(model)["model.layers.1.mlp.down_proj.weight"] == MatrixLayout(kind="whole", units=1)
    model.config.num_key_value_heads = 3  # k_proj holds 2 heads of 16 rows, not 3
    with pytest.raises(ValueError, match="k_proj"):
        hf_matrix_layouts(model)
    assert [rule.pattern for rule in HF_ROUTING][-1] == ""  # a catch-all ends the rules


# -- the OpenAI-compatible generator ----------------------------------------------------------------------


class _ScriptedCompletions(BaseHTTPRequestHandler):
    """POST /v1/completions answers from `script` in order: (status, JSON body); requests are recorded."""

    script: ClassVar[list[tuple[int, dict[str, Any]]]] = []
    requests: ClassVar[list[dict[str, Any]]] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append({"path": self.path, "auth": self.headers.get("Authorization"), "body": body})
        status, answer = type(self).script.pop(0)
        data = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture()
def completions_server() -> Iterator[str]:
    _ScriptedCompletions.script, _ScriptedCompletions.requests = [], []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _ScriptedCompletions)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def _answer(text: str) -> tuple[int, dict[str, Any]]:
    return 200, {"id": "cmpl-1", "object": "text_completion",
                 "choices": [{"index": 0, "text": text, "finish_reason": "stop"}]}


def test_openai_generator_against_a_scripted_server(tokenizer: Any, completions_server: str) -> None:
    synced: list[Any] = []
    policy = OpenAIPolicy(tiny_causal_lm(tokenizer), tokenizer, base_url=completions_server,
                          served_model="tiny", max_new_tokens=16, temperature=0.8, device=CPU, api_key="k",
                          sync_weights=synced.append, retries=1)
    _ScriptedCompletions.script += [_answer(CALL + "\n"), (503, {"error": "busy"}), _answer("x\n<|tool|>\n")]
    messages = _trajectory().messages[:2]
    assert policy.generate(messages, torch.Generator().manual_seed(0)) == CALL
    assert policy.generate(messages, torch.Generator().manual_seed(0)) == "x"  # after one 503, tried again
    first = _ScriptedCompletions.requests[0]
    assert first["path"] == "/v1/completions" and first["auth"] == "Bearer k"
    body = first["body"]
    assert body["prompt"] == policy.encode_prefix(messages)  # the very tokens the loss scores
    assert body["model"] == "tiny" and body["stop"] == ["<|"] and body["max_tokens"] == 16
    assert body["temperature"] == 0.8 and body["top_p"] == 1.0 and body["top_k"] == -1
    assert _ScriptedCompletions.requests[1]["body"]["seed"] == body["seed"]  # seeded from the generator
    # Log-probs and the loss stay local; weights go out only through the hook.
    assert policy.token_logprobs(policy.sequence(_trajectory()).tokens).requires_grad
    policy.after_update()
    assert synced == [policy.model]
    _ScriptedCompletions.script += [(400, {"error": "bad prompt"})]
    with pytest.raises(GeneratorError, match="HTTP 400"):
        policy.generate(messages, torch.Generator())
    _ScriptedCompletions.script += [(200, {"choices": []})]
    with pytest.raises(GeneratorError, match="choices"):
        policy.generate(messages, torch.Generator())


def test_unreachable_server_is_a_generator_error(tokenizer: Any) -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # nothing listens here once the socket closes
    policy = OpenAIPolicy(tiny_causal_lm(tokenizer), tokenizer, base_url=f"http://127.0.0.1:{port}/v1",
                          served_model="tiny", max_new_tokens=4, temperature=1.0, device=CPU, retries=0)
    with pytest.raises(GeneratorError, match="unreachable"):
        policy.generate([Message(role="user", content="hi")], torch.Generator())


# -- recipes and loading -----------------------------------------------------------------------------------


def test_rl_config_checks_the_policy_keys() -> None:
    with pytest.raises(ValueError, match="exactly one of rl.policy.model_dir and rl.policy.model_config"):
        PolicyConfig(kind="hf")
    with pytest.raises(ValueError, match="model_type"):
        PolicyConfig(kind="hf", model_config={"hidden_size": 64}, tokenizer_dir="tok")
    with pytest.raises(ValueError, match="need rl.policy.kind hf"):
        PolicyConfig(model_dir="m")
    with pytest.raises(ValueError, match=r"rl.generator.kind openai needs rl.policy.kind hf"):
        RLConfig(tasks=["x"], generator=GeneratorConfig(kind="openai", url="http://x/v1", model="m"))
    with pytest.raises(ValueError, match="needs rl.generator.url and rl.generator.model"):
        GeneratorConfig(kind="openai")
    with pytest.raises(ValueError, match="rl.policy.kind must be"):
        PolicyConfig(kind="vllm")


def test_a_policy_loads_from_a_saved_folder_or_a_config(tokenizer: Any, tmp_path: Path) -> None:
    from trainer.recipe import load_recipe

    model = tiny_causal_lm(tokenizer, seed=5)
    model.save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    loaded = load_hf_policy(PolicyConfig(kind="hf", model_dir=str(tmp_path / "model")), GeneratorConfig(),
                            seed=0, device=CPU)
    assert type(loaded) is HFPolicy and loaded.kl_path == "chunked"
    tokens = loaded.sequence(_trajectory()).tokens
    with torch.no_grad():
        assert torch.equal(loaded.model(torch.tensor([tokens])).logits, model(torch.tensor([tokens])).logits)
    config = PolicyConfig(kind="hf", tokenizer_dir=str(tmp_path / "model"),
                          model_config={"model_type": "llama", "vocab_size": len(tokenizer), "hidden_size": 32,
                                        "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2,
                                        "num_key_value_heads": 1, "max_position_embeddings": 512})
    random = [load_hf_policy(config, GeneratorConfig(), seed=seed, device=CPU).model.lm_head.weight
              for seed in (1, 1, 2)]
    assert torch.equal(random[0], random[1]) and not torch.equal(random[0], random[2])
    with pytest.raises(ValueError, match="not a folder"):
        load_hf_policy(PolicyConfig(kind="hf", model_dir=str(tmp_path / "nothing")), GeneratorConfig(), seed=0,
                       device=CPU)
    # Several processes shard it with FSDP2 (tests/trainer/test_hf_parallel.py); its experts are not dispatched.
    load_recipe(ROOT / "recipes/train/tiny-rl-cpu.toml",
                ['rl.policy.kind="hf"', f'rl.policy.model_dir="{tmp_path / "model"}"', "launch.nproc_per_node=2",
                 "parallel.dp_shard=2"])
    with pytest.raises(ValueError, match="parallel.ep must be 1"):
        load_recipe(ROOT / "recipes/train/tiny-rl-cpu.toml",
                    ['rl.policy.kind="hf"', f'rl.policy.model_dir="{tmp_path / "model"}"', "launch.nproc_per_node=2",
                     "parallel.dp_shard=2", "parallel.ep=2"])


# -- an RL step ----------------------------------------------------------------------------------------------


@pytest.mark.docker
def test_an_rl_step_with_a_hugging_face_policy(tokenizer: Any, tmp_path: Path, local_sample: Any,
                                               session_cache: Path) -> None:
    """One step of tiny-rl-cpu.toml with a tiny Llama saved to a folder as the policy: rollouts
    sampled by model.generate in the real sandbox, the real scorer, the loss with the feedback KL,
    Muon per head, a checkpoint."""
    model_dir = tmp_path / "tiny-llama"
    tiny_causal_lm(tokenizer, max_position_embeddings=1024).save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    out = tmp_path / "run"
    command = [sys.executable, "-m", "trainer.cli", "--recipe", str(ROOT / "recipes/train/tiny-rl-cpu.toml"),
               "--set", f'output_dir="{out}"', "--set", "train.steps=1", "--set", 'rl.policy.kind="hf"',
               "--set", f'rl.policy.model_dir="{model_dir}"', "--set", "rl.max_turns=1",
               "--set", "rl.generator.max_new_tokens=16",
               "--set", "rl.tasks_per_step=2", "--set", f'rl.tasks=["{local_sample[0]}"]']
    done = subprocess.run(command, capture_output=True, text=True, timeout=900, cwd=tmp_path, check=False,
                          env={**os.environ, "TASKFORGE_CACHE": str(session_cache)})
    assert done.returncode == 0, done.stderr[-4000:]
    (line,) = [json.loads(text) for text in (out / "metrics.jsonl").read_text().splitlines()]
    assert len(line["rewards"]) == 4 and len(set(line["tasks"])) == 2
    assert math.isfinite(line["loss"]) and math.isfinite(line["kl"])
    assert set(line["reward_status"]) <= {"ok", "tampered", "timeout", "patch_failed"}, line
    # A random model writes malformed calls: hinted turns, so the feedback KL ran.
    assert line["hint_fraction"] > 0 and line["kl"] > 0
    assert (out / "checkpoints" / "step_000001" / "manifest.json").is_file()
    assert json.loads((out / "run.json").read_text())["recipe"]["rl"]["policy"]["kind"] == "hf"
