"""`ask_human`: a built-in tool through which the model asks a person a question.

Give it to any agent (`Agent(model, {"ask_human": ask_human, ...})`, under any name). Each
call waits, in a durable run, for a person's `runner reply ID TEXT`; the reply is the call's
observation. The function below never runs in a run: it is what the model's schema is built
from, and it refuses to answer for a person when called by hand.
"""

from __future__ import annotations

from runner.core.tools import Tool


def _ask_human(question: str) -> str:
    """Ask a person a question and wait for their reply (minutes or days): use it when only a
    person can decide, or to confirm something before acting on it.

    Args:
        question: The question, complete and self-contained: the person sees nothing else.
    """
    raise RuntimeError("ask_human is answered by a person (`runner reply`), inside a durable run")


ask_human = Tool(_ask_human, replies=True)
"""The built-in tool whose call waits for a person's reply, which becomes its observation."""
