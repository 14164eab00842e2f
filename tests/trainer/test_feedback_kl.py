"""Targeted textual feedback: the detectors on scripted trajectories, the teacher's hinted context,
the chunked KL against the naive reference, and, on a tiny model taught what a hint means, that the
hint changes the teacher and that the feedback KL alone moves the student toward it."""

from __future__ import annotations

import copy
import random
from collections.abc import Sequence
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from taskforge import is_test_path
from trainer.model import Transformer, config_from_preset
from trainer.pretrain.data import ByteTokenizer
from trainer.rl.chat import (
    Message,
    Trajectory,
    Turn,
    parse_tool_call,
    render,
    render_prefix,
)
from trainer.rl.feedback import (
    DETECTORS,
    Detector,
    FeedbackExample,
    Hint,
    MalformedCallDetector,
    OverlongMessageDetector,
    TestEditDetector,
    UnknownToolDetector,
    UntestedSubmitDetector,
    default_detectors,
    detect_all,
    encode_feedback,
    make_detector,
    teacher_context,
)
from trainer.rl.kl import (
    KL_KINDS,
    KLKind,
    chunked_token_kl,
    feedback_kl_loss,
    final_hidden,
    naive_token_kl,
)

TOOLS = ("list_files", "read_file", "edit_file", "run_tests", "submit")

# chunked vs naive in float32: the same terms summed in another order, and a closed-form backward
# instead of autograd's chain through log_softmax; with O(1) logits that moves the last few bits
# of values and gradients of size up to ~10.
F32_TOL: dict[str, Any] = {"atol": 1e-5, "rtol": 1e-5}
# float64: the same arithmetic differences, 29 more mantissa bits.
F64_TOL: dict[str, Any] = {"atol": 1e-10, "rtol": 1e-10}
# Through the model: padding the batch regroups the MoE experts' matmuls (see test_model.py), which
# rounds the hidden states ~1e-7 apart before the KL; the KL and gradients are O(1).
MODEL_TOL: dict[str, Any] = {"atol": 1e-5, "rtol": 1e-4}


def _error_kind(call_text: str, tools: Sequence[str]) -> tuple[str, str]:
    call = parse_tool_call(call_text)
    if not call.ok:
        return "malformed", call.error
    if call.name not in tools:
        return "unknown_tool", f"unknown tool {call.name!r}"
    return "", ""


def scripted(calls: Sequence[str], *, tools: Sequence[str] = TOOLS, task: str = "Fix `pkg.mod:func`.",
             bad_args: Sequence[int] = ()) -> Trajectory:
    """A trajectory with one turn per call text, each followed by a tool message; turns in
    `bad_args` are marked as rejected by the tool for their arguments."""
    messages = [Message(role="system", content=f"Tools: {', '.join(tools)}."), Message(role="user", content=task)]
    turns = []
    for i, text in enumerate(calls):
        kind, error = ("bad_args", "missing argument 'path'") if i in bad_args else _error_kind(text, tools)
        observation = f"error: {error}" if error else "ok"
        turns.append(Turn(index=len(messages), text=text, call=parse_tool_call(text), observation=observation,
                          error=error, error_kind=kind))
        messages += [Message(role="assistant", content=text), Message(role="tool", content=observation)]
    return Trajectory(task_id="t", tools=tuple(tools), messages=messages, turns=turns)


def call(name: str, **args: str) -> str:
    import json

    return json.dumps({"tool": name, "args": args})


# ---------------------------------------------------------------------------------------------
# Detectors and the teacher's context


def test_each_detector_fires_where_it_should_and_nowhere_else() -> None:
    trajectory = scripted([
        call("read_file", path="src/pkg/mod.py"),                          # 0 fine
        call("search_web", query="how to fix"),                            # 1 unknown tool
        'read_file("src/pkg/mod.py")',                                     # 2 malformed
        call("edit_file", path="tests/test_mod.py", content="x"),          # 3 edits a test
        call("edit_file", path="src/pkg/mod.py", content="y" * 5000),      # 4 overlong, not a test
        call("read_file"),                                                 # 5 bad arguments
        call("submit"),                                                    # 6 submit, never tested
        call("run_tests"),                                                 # 7 fine
        call("submit"),                                                    # 8 fine: tested before
    ], bad_args=[5])
    fired = {detector.name: [hint.turn for hint in detector.detect(trajectory)] for detector in default_detectors()}
    assert fired == {"unknown_tool": [1], "malformed_call": [2, 5], "test_edit": [3], "untested_submit": [6],
                     "overlong": [4]}

    hints = {hint.turn: hint for hint in detect_all(trajectory)}
    assert hints[1].text == "Reminder: available tools: list_files, read_file, edit_file, run_tests, submit."
    assert '{"tool": NAME, "args": {...}}' in hints[2].text and "not JSON" in hints[2].text
    assert '{"tool": NAME, "args": {...}}' in hints[5].text and "missing argument 'path'" in hints[5].text
    assert hints[3].text == "Do not edit tests; change the package code."
    assert "run_tests" in hints[6].text and "4000 characters" in hints[4].text


def test_untested_submit_needs_a_test_run_that_ran() -> None:
    detector = UntestedSubmitDetector()
    # A malformed or rejected run_tests call did not run the tests.
    assert [h.turn for h in detector.detect(scripted(["run_tests", call("submit")]))] == [1]
    assert [h.turn for h in detector.detect(scripted([call("run_tests"), call("submit")], bad_args=[0]))] == [1]
    assert detector.detect(scripted([call("run_tests"), call("read_file", path="a.py"), call("submit")])) == []
    # No test tool, nothing to remind of.
    assert detector.detect(scripted([call("submit")], tools=("read_file", "submit"))) == []


@pytest.mark.parametrize(("path", "is_test"), [
    ("tests/test_mod.py", True), ("pkg/tests/helpers.py", True), ("test/data.json", True),
    ("test_mod.py", True), ("src/pkg/mod_test.py", True), ("conftest.py", True), ("src/conftest.py", True),
    ("testing/helpers.py", True), ("tests\\helpers.py", True),
    ("src/pkg/mod.py", False), ("src/pkg/testing.py", False), ("src/pkg/contest.py", False),
    ("latest_results.py", False), ("tests.py", False), ("pytest.ini", False),
])
def test_test_edit_detector_reads_test_paths_as_taskforge_does(path: str, is_test: bool) -> None:
    """The detector's test files are taskforge's (`is_test_path`, pytest's default layout, which
    counts testing/ folders too), with backslashes read as separators."""
    edit = scripted([call("edit_file", path=path, old="a", new="b")])
    assert bool(TestEditDetector().detect(edit)) is is_test
    assert is_test_path(path.replace("\\", "/")) is is_test


def test_registry_and_options() -> None:
    assert list(DETECTORS) == ["unknown_tool", "malformed_call", "test_edit", "untested_submit", "overlong"]
    with pytest.raises(ValueError, match="malformed_call, overlong, test_edit, unknown_tool, untested_submit"):
        make_detector("typo")
    short = make_detector("overlong", max_chars=10)
    assert [h.turn for h in short.detect(scripted([call("submit"), call("run_tests")]))] == [0, 1]
    with pytest.raises(ValueError, match="max_chars"):
        OverlongMessageDetector(max_chars=0)
    edits = make_detector("test_edit", edit_tools=("write_file",))
    assert [h.turn for h in edits.detect(scripted([call("write_file", path="tests/a.py")],
                                                  tools=("write_file",)))] == [0]


def test_detect_all_merges_per_turn_with_extra_flags() -> None:
    # Turn 0 is malformed and overlong; the monitor flags turn 0 and turn 1 from outside.
    trajectory = scripted(["x" * 50, call("submit")])
    detectors: list[Detector] = [MalformedCallDetector(), OverlongMessageDetector(max_chars=40), UnknownToolDetector()]
    hints = detect_all(trajectory, detectors, extra=[(1, "Do not special-case the tests."),
                                                    Hint(turn=0, text="Keep it short.", detector="monitor"),
                                                    (1, "Do not special-case the tests.")])
    assert [h.turn for h in hints] == [0, 1]
    assert hints[0].detector == "malformed_call+overlong+monitor"
    assert hints[0].text.split("\n")[1:] == [
        "Reminder: keep each message under 40 characters: one tool call, nothing else.", "Keep it short."]
    assert hints[1] == Hint(turn=1, text="Do not special-case the tests.", detector="extra")
    with pytest.raises(ValueError, match="out of range"):
        detect_all(trajectory, detectors, extra=[(2, "no such turn")])


def test_teacher_context_puts_the_hint_right_before_the_turn_only_for_the_teacher() -> None:
    trajectory = scripted([call("read_file", path="a.py"), call("search_web"), call("run_tests")])
    [hint] = detect_all(trajectory)
    assert hint.turn == 1
    student, teacher, target = teacher_context(trajectory, hint)
    turn = trajectory.turns[1]
    assert student == trajectory.messages[:turn.index]
    assert teacher == [*student, Message(role="hint", content=hint.text)]
    assert target == call("search_web") == trajectory.messages[turn.index].content
    assert all(m.role != "hint" for m in student)
    assert render_prefix(teacher) == render(student) + f"<|hint|>\n{hint.text}\n<|assistant|>\n"

    example = encode_feedback(trajectory, hint)
    tokenizer = ByteTokenizer()
    (s0, s1), (t0, t1) = example.student_span, example.teacher_span
    assert torch.equal(example.student_tokens[s0:s1], example.teacher_tokens[t0:t1])
    assert tokenizer.decode(example.student_tokens[s0:s1].tolist()) == target
    assert example.student_tokens[s1 - 1] == tokenizer.eos_id and s1 == len(example.student_tokens)
    assert tokenizer.decode(example.student_tokens[:s0].tolist()) == render_prefix(student)
    assert tokenizer.decode(example.teacher_tokens[:t0].tolist()) == render_prefix(teacher)

    # Truncated to fit a model, the start of the context goes and the hint stays.
    short = encode_feedback(trajectory, hint, max_len=160)
    assert len(short.teacher_tokens) == len(short.student_tokens) == 160 and short.teacher_tokens[0] == tokenizer.bos_id
    assert hint.text in tokenizer.decode(short.teacher_tokens.tolist())
    assert tokenizer.decode(short.student_tokens[short.student_span[0]:].tolist()) == target
    with pytest.raises(ValueError, match="does not fit"):
        encode_feedback(trajectory, hint, max_len=20)
    with pytest.raises(ValueError, match="out of range"):
        teacher_context(trajectory, Hint(turn=3, text="", detector="x"))


# ---------------------------------------------------------------------------------------------
# Chunked KL against the naive reference


def _kl_inputs(T: int, V: int, D: int, dtype: torch.dtype, seed: int) -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(seed)
    student = torch.randn(T, D, generator=generator, dtype=dtype)
    # The teacher is the student moved a little, as a hint moves a model: KLs of O(0.1-1).
    teacher = student + 0.5 * torch.randn(T, D, generator=generator, dtype=dtype)
    weight = torch.randn(V, D, generator=generator, dtype=dtype) * 2 / D ** 0.5
    return student.requires_grad_(), teacher, weight.requires_grad_(), torch.rand(T, generator=generator, dtype=dtype)


@pytest.mark.parametrize("kind", KL_KINDS)
@pytest.mark.parametrize("chunk_size", [1, 7, 16, 50, 64])
def test_chunked_equals_naive_values_and_gradients(kind: KLKind, chunk_size: int) -> None:
    student, teacher, weight, upstream = _kl_inputs(T=50, V=300, D=24, dtype=torch.float32, seed=0)
    naive = naive_token_kl(student @ weight.T, teacher @ weight.T, kind)
    chunked = chunked_token_kl(student, teacher, weight, kind, chunk_size=chunk_size)
    assert chunked.shape == (50,) and (naive >= 0).all() and naive.mean() > 0.05
    torch.testing.assert_close(chunked, naive, **F32_TOL)
    # A non-uniform upstream gradient checks that each token's gradient is scaled by its own weight.
    expected = torch.autograd.grad((naive * upstream).sum(), (student, weight))
    got = torch.autograd.grad((chunked * upstream).sum(), (student, weight))
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, **F32_TOL)


@pytest.mark.parametrize("kind", KL_KINDS)
def test_chunked_equals_naive_in_float64_and_leaves_the_teacher_alone(kind: KLKind) -> None:
    student, teacher, weight, upstream = _kl_inputs(T=33, V=97, D=16, dtype=torch.float64, seed=1)
    teacher.requires_grad_()
    naive = naive_token_kl(student @ weight.T, teacher @ weight.T, kind)
    chunked = chunked_token_kl(student, teacher, weight, kind, chunk_size=10)
    assert chunked.dtype == torch.float64
    torch.testing.assert_close(chunked, naive, **F64_TOL)
    expected = torch.autograd.grad((naive * upstream).sum(), (student, weight))
    got = torch.autograd.grad((chunked * upstream).sum(), (student, weight))
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, **F64_TOL)
    chunked_token_kl(student, teacher, weight, kind).sum().backward()
    assert teacher.grad is None and student.grad is not None
    # The divergence of a distribution from itself is zero.
    torch.testing.assert_close(chunked_token_kl(teacher, teacher, weight, kind),
                               torch.zeros(33, dtype=torch.float64), atol=1e-12, rtol=0)


def test_chunked_kl_rejects_bad_arguments() -> None:
    student, teacher, weight, _ = _kl_inputs(T=4, V=8, D=4, dtype=torch.float32, seed=0)
    with pytest.raises(ValueError, match="kind"):
        chunked_token_kl(student, teacher, weight, "backward")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="chunk_size"):
        chunked_token_kl(student, teacher, weight, chunk_size=0)
    with pytest.raises(ValueError, match="differ in shape"):
        chunked_token_kl(student, teacher[:3], weight)


def test_feedback_kl_loss_equals_the_naive_loss_through_the_model() -> None:
    """A batch of hints of different lengths (padded) against each sequence run alone through
    `model(...)`, with its full logits and the naive KL: the same loss and parameter gradients."""
    model = Transformer(config_from_preset("tiny", vocab_size=ByteTokenizer.vocab_size, max_seq_len=512))
    model.init_weights(seed=3)
    with torch.no_grad():
        # Weights 10x their initial scale, so that a random model's outputs are far from uniform and
        # the hint moves them: KLs of O(0.1) instead of O(1e-5).
        for name, param in model.named_parameters():
            if not name.endswith("norm.weight"):
                param.mul_(10)
    trajectories = [scripted([call("search_web")]), scripted([call("read_file", path="a.py"), "oops", call("submit")],
                                                             task="Add `slugify`.")]
    examples = [encode_feedback(t, h) for t in trajectories for h in detect_all(t)]
    assert len(examples) == 3

    def batched(kind: KLKind) -> torch.Tensor:
        return feedback_kl_loss(model, [e.student_tokens for e in examples], [e.teacher_tokens for e in examples],
                                [e.student_span for e in examples], [e.teacher_span for e in examples],
                                kind=kind, chunk_size=16)

    def reference(kind: KLKind) -> torch.Tensor:
        per_token = []
        for e in examples:
            (s0, s1), (t0, t1) = e.student_span, e.teacher_span
            with torch.no_grad():
                teacher_logits = model(e.teacher_tokens[None])[0, t0 - 1:t1 - 1]
            student_logits = model(e.student_tokens[None])[0, s0 - 1:s1 - 1]
            per_token.append(naive_token_kl(student_logits, teacher_logits, kind))
        return torch.cat(per_token).mean()

    parameters = list(model.parameters())
    for kind in KL_KINDS:
        loss, expected = batched(kind), reference(kind)
        assert loss.item() > 1e-3
        torch.testing.assert_close(loss, expected, **MODEL_TOL)
        for g, e in zip(torch.autograd.grad(loss, parameters, allow_unused=True),
                        torch.autograd.grad(expected, parameters, allow_unused=True)):
            if e is None:
                # An expert no target-side token was routed to (padding may reach it in the batch,
                # with no effect on the loss).
                assert g is None or not g.any()
                continue
            torch.testing.assert_close(g, e, **MODEL_TOL)

    with torch.no_grad():
        hidden = final_hidden(model, examples[0].student_tokens[None])
        torch.testing.assert_close(model.output(hidden), model(examples[0].student_tokens[None]))
    with pytest.raises(ValueError, match="target tokens differ"):
        feedback_kl_loss(model, [examples[0].student_tokens], [examples[1].teacher_tokens],
                         [examples[0].student_span], [examples[1].teacher_span])


# ---------------------------------------------------------------------------------------------
# A tiny model that knows what a hint means

FAKE_TOOL = "search_web"
TASKS = ("parse_date", "slugify", "merge", "flatten", "retry", "to_camel", "chunked", "dedent", "wrap")
PRETRAIN_STEPS, PRETRAIN_BATCH, PRETRAIN_LR, PRETRAIN_SEED = 200, 16, 3e-3, 0


def _context(tools: Sequence[str], task: str) -> list[Message]:
    return [Message(role="system", content=f"Tools: {', '.join(tools)}."), Message(role="user", content=f"Fix {task}.")]


def unknown_tool_trajectory(tools: Sequence[str], task: str) -> Trajectory:
    trajectory = scripted([call(FAKE_TOOL)], tools=tools, task=f"Fix {task}.")
    assert trajectory.turns[0].error_kind == "unknown_tool"
    return trajectory


def _corpus_sequence(rng: random.Random, tokenizer: ByteTokenizer) -> tuple[list[int], int]:
    """One conversation in the chat format, tokenized like `encode_feedback`, and where its answer
    starts. With the unknown-tool hint (half of them) the assistant calls a listed tool; without
    it, half the time the made-up one."""
    tools = tuple(rng.sample(TOOLS, 3))
    messages = _context(tools, rng.choice(TASKS))
    if rng.random() < 0.5:
        [hint] = UnknownToolDetector().detect(unknown_tool_trajectory(tools, "x"))
        messages.append(Message(role="hint", content=hint.text))
        name = rng.choice(tools)
    else:
        name = FAKE_TOOL if rng.random() < 0.5 else rng.choice(tools)
    context = [tokenizer.bos_id, *render_prefix(messages).encode()]
    return context + [*call(name).encode(), tokenizer.eos_id], len(context)


@pytest.fixture(scope="module")
def hint_model() -> Transformer:
    """The tiny preset trained (next-token loss on the assistant's answers) on a synthetic corpus
    where a hint decides between a listed tool and the made-up one: ~20 s on one thread."""
    tokenizer = ByteTokenizer()
    model = Transformer(config_from_preset("tiny", vocab_size=tokenizer.vocab_size, max_seq_len=256))
    model.init_weights(seed=PRETRAIN_SEED)
    optimizer = torch.optim.Adam(model.parameters(), lr=PRETRAIN_LR)
    rng = random.Random(PRETRAIN_SEED)
    for _ in range(PRETRAIN_STEPS):
        sequences = [_corpus_sequence(rng, tokenizer) for _ in range(PRETRAIN_BATCH)]
        tokens_BT = torch.full((PRETRAIN_BATCH, max(len(s) for s, _ in sequences)), tokenizer.pad_id)
        targets_BT = torch.full_like(tokens_BT, -100)
        for i, (sequence, start) in enumerate(sequences):
            tokens_BT[i, :len(sequence)] = torch.tensor(sequence)
            targets_BT[i, start - 1:len(sequence) - 1] = torch.tensor(sequence[start:])
        logits_BTV = model(tokens_BT)
        F.cross_entropy(logits_BTV.flatten(0, 1), targets_BT.flatten(), ignore_index=-100).backward()
        optimizer.step()
        optimizer.zero_grad()
    return model


@torch.no_grad()
def tool_logprob(model: Transformer, tokens: torch.Tensor, span: tuple[int, int], name: str) -> float:
    """log P(the bytes of tool `name` | the context and `{"tool": "`) at the answer in `span`: the
    sum of the log-probabilities of the name's bytes, each given the ones before it."""
    start = span[0] + len('{"tool": "')
    name_ids = torch.tensor(list(name.encode()))
    logp_TV = F.log_softmax(model(torch.cat([tokens[:start], name_ids])[None])[0], dim=-1)
    return logp_TV[torch.arange(start - 1, start - 1 + len(name_ids)), name_ids].sum().item()


def student_and_teacher(model: Transformer, example: FeedbackExample, name: str) -> tuple[float, float]:
    return (tool_logprob(model, example.student_tokens, example.student_span, name),
            tool_logprob(model, example.teacher_tokens, example.teacher_span, name))


def _unknown_tool_example(tools: Sequence[str], task: str) -> FeedbackExample:
    trajectory = unknown_tool_trajectory(tools, task)
    [hint] = detect_all(trajectory)
    assert hint.detector == "unknown_tool"
    return encode_feedback(trajectory, hint, max_len=256)


def test_the_hint_changes_the_teacher(hint_model: Transformer) -> None:
    # A task the corpus never had.
    example = _unknown_tool_example(("read_file", "run_tests", "submit"), "tokenize")
    student, teacher = student_and_teacher(hint_model, example, FAKE_TOOL)
    # Trained: about log(1/2) without the hint and -8 with it (pretraining seeds 0-6: margins of
    # 1.7-11 nats on such turns).
    assert teacher < student - 1.0, (student, teacher)


def test_the_kl_teaches(hint_model: Transformer) -> None:
    """Only the feedback KL, on the unknown-tool turns of 8 trajectories: without any hint in its
    context, the student names the made-up tool much less, on those turns and on a held-out one,
    and the listed tools do not lose."""
    model = copy.deepcopy(hint_model)
    rng = random.Random(1)
    specs = [(tuple(rng.sample(TOOLS, 3)), rng.choice(TASKS)) for _ in range(8)]
    specs.append((("list_files", "edit_file", "run_tests"), "tokenize"))  # held out: not trained on
    examples = [_unknown_tool_example(tools, task) for tools, task in specs]
    train = examples[:-1]

    def listed(example: FeedbackExample, tools: Sequence[str]) -> float:
        """log P(any listed tool) for the student."""
        return torch.tensor([tool_logprob(model, example.student_tokens, example.student_span, name)
                             for name in tools]).logsumexp(0).item()

    fake_before = [tool_logprob(model, e.student_tokens, e.student_span, FAKE_TOOL) for e in examples]
    listed_before = [listed(e, tools) for e, (tools, _) in zip(examples, specs)]
    # A small lr: Adam moves every weight by ~lr per step whatever its gradient, and the teacher
    # shares the weights, so larger steps (1e-3) wreck both within 10 steps.
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    for _ in range(10):
        loss = feedback_kl_loss(model, [e.student_tokens for e in train], [e.teacher_tokens for e in train],
                                [e.student_span for e in train], [e.teacher_span for e in train],
                                kind="reverse", chunk_size=64)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    fake_after = [tool_logprob(model, e.student_tokens, e.student_span, FAKE_TOOL) for e in examples]
    listed_after = [listed(e, tools) for e, (tools, _) in zip(examples, specs)]

    # Observed (pretraining seeds 0-4): the made-up tool from about -0.8..-1.9 to -3.3..-7.4 nats on
    # every turn, held out included. 1.5 nats is a 4.5x smaller probability.
    for before, after in zip(fake_before, fake_after):
        assert after < before - 1.5, (fake_before, fake_after)
    # The mass did not go to garbage: the listed tools moved by -0.2..+0.8 nats. (Longer or faster
    # training makes both the student and the teacher, which share the weights, collapse.)
    for before, after in zip(listed_before, listed_after):
        assert after > before - 0.5, (listed_before, listed_after)
