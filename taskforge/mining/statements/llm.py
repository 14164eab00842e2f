"""The LLM statement writer (``"llm"`` in :data:`taskforge.mining.statements.template.STATEMENT_WRITERS`).

It asks a model, over an OpenAI-compatible endpoint (:mod:`taskforge.llm.client`), for a problem statement
written like a good issue: the behaviour wanted, the interface, examples of use. The model sees
what the template writer uses (names, signatures, docstrings, the hidden tests' names) and the
removed code itself, so that it can describe the behaviour precisely, with the instruction never to
quote it. Every answer must pass :func:`~taskforge.mining.statements.template.leaked_lines`; an answer that quotes
the removed code is sent back once with the lines it quoted, and a second one that still does ends
the task with ``TaskforgeError(reason="statement_leaks_code")``: a leaking statement is never
kept, and the writer does not fall back to the template behind the recipe's back. An empty answer
twice is ``llm_malformed_output``; the endpoint's own failures keep their reasons (``llm_timeout``,
``llm_server_error``, ...). Mining records any of these as the candidate's rejection reason.

With ``LLMConfig.trajectories_dir`` each conversation is written there too.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path
from typing import Any

from taskforge.errors import LLMError, TaskforgeError
from taskforge.llm.client import ChatClient, LLMConfig, write_trajectory
from taskforge.mining.statements.template import StatementContext, leaked_lines

__all__ = ["LLMStatementWriter"]

ATTEMPTS = 2
"""Answers asked for: the first, and one more after feedback."""

SYSTEM_PROMPT = """\
You write problem statements for coding tasks, in the style of a clear GitHub issue. A feature was \
removed from a Python repository, and a developer will implement it again from your statement \
alone; hidden tests will check their work.

Describe what the feature must do: its purpose, its interface (names and signatures may be given), \
its behaviour on normal input, edge cases and errors, with short usage examples where they help. \
Never quote or transcribe the removed implementation, not even one line of it, and do not describe \
it step by step: state the behaviour, not the code. Do not mention that code was removed or that \
tests exist. Answer with the statement only, in Markdown."""

_WHAT_HAPPENED = {
    "body": "Its body was replaced with `raise NotImplementedError`; the signature and docstring stayed.",
    "symbol": "Its definition was deleted.",
    "module": "The whole module file was deleted.",
    "feature": "It was deleted together with the other definitions of the feature, in several places, and the "
               "imports and registrations that named them.",
}
_THINKING = re.compile(r"^\s*<think>.*?</think>\s*", re.DOTALL)


class LLMStatementWriter:
    """Writes a statement with a model; see the module docstring for the checks and failures."""

    name = "llm"

    def __init__(self, *, llm: LLMConfig) -> None:
        self.llm = llm

    def write(self, context: StatementContext) -> str:
        client = ChatClient(self.llm)
        messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM_PROMPT},
                                          {"role": "user", "content": _prompt(context)}]
        record: dict[str, Any] = {"writer": self.name, "model": self.llm.model, "target": context.target,
                                  "outcome": "", "messages": messages}
        try:
            statement = self._converse(client, messages, context)
            record["outcome"] = "written"
            return statement
        except TaskforgeError as err:
            record["outcome"], record["error"] = err.reason, str(err)
            raise
        finally:
            record["usage"] = client.usage.to_json()
            if self.llm.trajectories_dir:
                write_trajectory(Path(self.llm.trajectories_dir), "statement", context.target, record)

    def _converse(self, client: ChatClient, messages: list[dict[str, Any]], context: StatementContext) -> str:
        leaks: list[str] = []
        for _ in range(ATTEMPTS):
            reply = client.chat(messages)
            messages.append(reply.message)
            statement = _THINKING.sub("", reply.content).strip()
            if not statement:
                leaks = []
                messages.append({"role": "user", "content": "The answer was empty. Answer with the problem statement."})
                continue
            leaks = leaked_lines(statement, context.removed_code)
            if not leaks:
                return statement + "\n"
            quoted = "\n".join(f"    {line}" for line in leaks)
            messages.append({"role": "user", "content": "The statement quotes these lines of the removed "
                                                        f"implementation:\n\n{quoted}\n\nWrite it again without "
                                                        "them: describe the behaviour, not the code."})
        if leaks:
            raise TaskforgeError(f"the statement for {context.target} still quoted the removed code after "
                                 f"feedback: {leaks[0]!r}", reason="statement_leaks_code")
        raise LLMError(f"the model gave no statement for {context.target} in {ATTEMPTS} tries",
                       reason="llm_malformed_output")


def _prompt(context: StatementContext) -> str:
    target = context.target.replace(":", ".") if context.strategy != "module" else context.target
    opening = (f"Write the problem statement for `{target}` (strategy: {context.strategy}) in `{context.module_path}` "
               f"of the repository {context.repo}. {_WHAT_HAPPENED[context.strategy]}")
    parts = [opening]
    if context.symbols:
        interface = []
        for symbol in context.symbols:
            interface.append(symbol.signature)
            if symbol.docstring:
                interface.append(textwrap.indent(f'"""{symbol.docstring}"""', "    "))
        parts.append("The interface to implement:\n\n```python\n" + "\n".join(interface) + "\n```")
    if context.hidden_tests:
        tests = "\n".join(f"- {t}" for t in context.hidden_tests[:40])
        parts.append(f"The tests that will check it (names only):\n\n{tests}")
    code = "\n\n".join(source.rstrip() for source in context.removed_code.values())
    parts.append("The removed implementation, for your understanding only (never quote it):\n\n"
                 f"```python\n{code}\n```")
    return "\n\n".join(parts)
