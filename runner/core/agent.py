"""Agents that a new process can rebuild from a reference: `module:attr` or `path.py:attr`."""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runner.core.budgets import Budgets
from runner.core.context import Context
from runner.core.limits import limit_of
from runner.core.scoring import Scorer, as_scorers
from runner.core.stop_reasons import StopReason
from runner.core.tools import Tool, as_tools
from runner.core.tree import outcome_of
from runner.core.tree_inline import InlineParent, SubAgentStopped, inline_child
from runner.defaults import LONGEST_LABEL
from runner.errors import AgentLoadError, BadAgentReference

if TYPE_CHECKING:
    from runner.core.model_call import Model
    from runner.core.result import AgentResult

# What drives a run to its stop: `runner.core.loop.drive`'s signature. An agent whose loop is
# another framework's (runner.integrations) brings its own.
Loop = Callable[..., "AgentResult"]


class Agent:
    """A model, its tools and its budgets, with a name and a release for the history.

    `accepts` is what a message sent to its runs (`Runner.send`) must be: free text by
    default, or a type pydantic validates (a model class, a TypedDict), checked at send.
    `limit` names the provider limit its model calls draw from (`runner limit set`): any
    model's, scripted ones included; the adapters draw from `provider/model` unless told.
    `scorers` are functions of a finished run that return a number (runner.core.scoring):
    workers run each once per run after the run ends, and keep its score.
    """

    def __init__(
        self,
        model: Model,
        tools: Mapping[str, Callable[..., Any]] | None = None,
        *,
        name: str | None = None,
        release: str | None = None,
        ref: str | None = None,
        context: Context | None = None,
        accepts: Any = None,
        limit: str | None = None,
        loop: Loop | None = None,
        scorers: Sequence[Any] | None = None,
        **budgets: Any,
    ) -> None:
        if not callable(model):
            raise ValueError("an Agent's model must be callable")
        if context is not None and not callable(context):
            raise ValueError("an Agent's context must be callable")
        self.tools: dict[str, Tool] = as_tools(tools or {})
        self.model = bind_tools(model, self.tools)
        self.context = context
        if limit is not None and (not isinstance(limit, str) or not limit):
            raise ValueError("an Agent's limit must be the name of a limit")
        # The limit its model calls draw from (runner.core.limits): named here, else the
        # model's own (an adapter's `provider/model`), else none.
        self.limit = limit_of(model, limit)
        for label, value in (("name", name), ("release", release)):
            if value is not None and (not isinstance(value, str) or len(value) > LONGEST_LABEL):
                # Refused here, the same on both databases (PostgreSQL's column refuses
                # more; SQLite's would keep it).
                raise ValueError(
                    f"an Agent's {label} must be text of at most {LONGEST_LABEL} characters"
                )
        self.name = name
        self.release = release
        self.budgets = with_budgets(budgets)
        self.ref = ref
        # What a message sent to its runs must be (`runner send`): text (None or str), or a
        # type pydantic validates (a model, a TypedDict), checked when it is sent.
        self.accepts = accepts
        # What drives its runs: runner's own loop (None), or a framework's (runner.integrations).
        self.loop = loop
        # What workers score each of its runs with once it ends (runner.core.scoring).
        self.scorers: dict[str, Scorer] = as_scorers(scorers)
        # Where the agent was made, so `reference()` can find the attribute holding it.
        self._module: str | None = sys._getframe(1).f_globals.get("__name__")

    def as_tool(
        self, name: str | None = None, description: str | None = None, **budgets: Any
    ) -> Tool:
        """This agent as another agent's tool: a call `name(task=...)` starts a child run of
        this agent on `task`, and its answer (or why it stopped) is the call's observation.

        In a durable run the child is a run of its own (journal, lease, stop reason), whose
        id is derived from the call's key; the parent parks until it ends, and its spend is
        charged to the parent's budgets (see runner.core.tree). In memory it runs inline.
        `budgets` cap the child's own (they can only be smaller than what its parent has
        left); `description` is what the parent's model is told the tool does.
        """
        return sub_agent_tool(self, name, description, budgets)

    def reference(self) -> str | None:
        """How another process finds this agent: given, or the module attribute holding it."""
        if self.ref is not None:
            return self.ref
        module = sys.modules.get(self._module or "")
        if module is None:
            return None
        for attr, value in vars(module).items():
            if value is self:
                if self._module == "__main__" or self._module.startswith("runner_agent_file_"):
                    path = getattr(module, "__file__", None)
                    return f"{Path(path).resolve()}:{attr}" if path else None
                return f"{self._module}:{attr}"
        return None


@dataclass(frozen=True)
class SubAgent:
    """What a sub-agent tool runs: the agent, under its budgets capped by `as_tool`'s."""

    agent: Agent
    budgets: Budgets

    def run(self, task: Any, parent: InlineParent | None = None) -> tuple[str, bool]:
        """Run the agent on `task` inline, here, under `parent` (None: called by hand, a
        root of its own): the call's observation, (content, is_error)."""
        # Loaded when a sub-agent first runs: importing an Agent (`runner list`, a worker's
        # agent file) does not load the loop. (The loop never imports this module.)
        from runner.core.loop import drive

        if not isinstance(task, str) or not task.strip():
            name = self.agent.name or "the sub-agent"
            return f"TypeError: {name} takes one text argument, task", True
        child = inline_child(self.budgets, parent)
        # A framework's agent (runner.integrations) drives its own loop, here as anywhere.
        result = (self.agent.loop or drive)(
            self.agent.model,
            self.agent.tools,
            task,
            child.budgets,
            child.journal,
            deadline=child.deadline,
            cancel=child.cancel,
            clock=child.clock,
            context=self.agent.context,
        )
        stop = result.stop_reason if isinstance(result.stop_reason, StopReason) else None
        budgets = child.budgets.as_dict()
        return outcome_of(child.journal.run_id, stop, result.output, result.error, budgets)


def sub_agent_tool(
    agent: Agent, name: str | None, description: str | None, caps: Mapping[str, Any]
) -> Tool:
    """The Tool of `Agent.as_tool`: one string argument, `task`, and the agent to run."""
    label = name or agent.name or "sub_agent"
    if not isinstance(label, str) or not label.isidentifier():
        raise ValueError(f"a sub-agent tool's name must be an identifier, not {label!r}")
    sub = SubAgent(agent, with_budgets(caps, agent.budgets))

    def run_sub_agent(task: str) -> str:
        content, is_error = sub.run(task)
        if is_error:
            raise SubAgentStopped(content.removeprefix("SubAgentStopped: "))
        return content

    run_sub_agent.__name__ = run_sub_agent.__qualname__ = label
    run_sub_agent.__doc__ = (
        f"{description or f'Hand a task to the {label} agent and get its answer.'}\n\n"
        "Args:\n    task: The task for the agent, complete and self-contained: it sees "
        "nothing else.\n"
    )
    return Tool(run_sub_agent, sub_agent=sub)


def bind_tools(model: Model, tools: Mapping[str, Tool]) -> Model:
    """The model told the agent's tools, if it wants them (adapters send their schemas)."""
    binder = getattr(model, "with_tools", None)
    if callable(binder):
        bound: Model = binder(tools)
        return bound
    return model


def with_budgets(overrides: Mapping[str, Any], base: Budgets | None = None) -> Budgets:
    """`base` (or the defaults) with `overrides` applied; unknown names are a ValueError."""
    fields = (base or Budgets()).as_dict()
    unknown = sorted(set(overrides) - set(fields))
    if unknown:
        raise ValueError(f"unknown budget {', '.join(unknown)}; known: {', '.join(fields)}")
    fields.update(overrides)
    return Budgets(**fields)


def parse_reference(ref: str) -> tuple[str, str, bool]:
    """(module or file, attribute, is a file) of `module:attr` or `path.py:attr`;
    BadAgentReference for anything else."""
    where, colon, attr = ref.rpartition(":")
    is_file = where.endswith(".py") or "/" in where
    module_ok = is_file or all(part.isidentifier() for part in where.split("."))
    if not colon or not where or not attr.isidentifier() or not module_ok:
        raise BadAgentReference(
            f"agent reference {ref!r} must look like module:attr or file.py:attr"
        )
    return where, attr, is_file


def load_agent(ref: str) -> Agent:
    """Import the Agent (or the zero-argument factory of one) that `ref` names."""
    where, attr, is_file = parse_reference(ref)
    module = _load_file(where) if is_file else _import(where)
    try:
        value = getattr(module, attr)
    except AttributeError:
        raise AgentLoadError(f"{where} has no attribute {attr!r}") from None
    if not isinstance(value, Agent):
        value = _foreign(value, ref) or value
    if not isinstance(value, Agent) and callable(value):
        try:
            value = value()
        except Exception as exc:
            raise AgentLoadError(f"{ref}() failed: {type(exc).__name__}: {exc}") from None
    if not isinstance(value, Agent):
        raise AgentLoadError(f"{ref} is a {type(value).__name__}, not a runner.Agent")
    if value.ref is None:
        # A file is recorded by its absolute path: a resume from another folder finds it.
        value.ref = f"{Path(where).resolve()}:{attr}" if is_file else ref
    return value


# Agents of other frameworks that `load_agent` takes as they are, wrapped with the defaults:
# the top-level package of the agent's type -> the integration whose `wrap` makes it a runner
# Agent. Named, not imported: the integration (and its framework) loads only for such agents.
FRAMEWORKS = {
    "pydantic_ai": "runner.integrations.pydantic_ai",
    "agents": "runner.integrations.openai_agents",
}


def _foreign(value: Any, ref: str) -> Agent | None:
    """`value` wrapped by its framework's integration, if it is another framework's agent."""
    home = FRAMEWORKS.get(type(value).__module__.partition(".")[0])
    if home is None:
        return None
    try:
        wrapped = importlib.import_module(home).wrap(value)
    except Exception as exc:
        raise AgentLoadError(f"{ref}: wrapping it failed: {type(exc).__name__}: {exc}") from None
    return wrapped if isinstance(wrapped, Agent) else None


def _import(name: str) -> Any:
    # As `python -m` does: a module in the current folder is importable (the `runner`
    # script's own folder is what Python put first on the path).
    here = os.getcwd()
    if here not in sys.path and "" not in sys.path:
        sys.path.insert(0, here)
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name and name.startswith(exc.name):
            raise AgentLoadError(f"no module named {name!r} (is it on PYTHONPATH?)") from None
        raise AgentLoadError(f"importing {name} failed: {exc}") from None
    except Exception as exc:
        raise AgentLoadError(f"importing {name} failed: {type(exc).__name__}: {exc}") from None


# One lock per agent file. A module must be in sys.modules while its code runs, as import
# does it (a dataclass in the file looks its module up there), so without the lock a second
# thread would take the half-run module and find no agent in it. Reentrant: a file may load
# itself while it runs, and then gets the half-run module as a circular import would.
_file_locks: dict[Path, threading.RLock] = {}
_file_locks_lock = threading.Lock()


def _file_lock(path: Path) -> threading.RLock:
    with _file_locks_lock:
        return _file_locks.setdefault(path, threading.RLock())


def _load_file(path_text: str) -> Any:
    path = Path(path_text).resolve()
    if not path.is_file():
        raise AgentLoadError(f"no such agent file: {path_text}")
    name = "runner_agent_file_" + "".join(c if c.isalnum() else "_" for c in str(path))
    with _file_lock(path):
        if name in sys.modules:
            return sys.modules[name]
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise AgentLoadError(f"cannot load {path_text} as Python")
        module = importlib.util.module_from_spec(spec)
        # As `python file.py` does: the file's folder comes first, so the modules beside
        # it import (a worker may load files from many folders: each adds its own).
        folder = str(path.parent)
        if folder not in sys.path:
            sys.path.insert(0, folder)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except Exception as exc:
            # Nothing left behind: the next load runs the file again from the start.
            del sys.modules[name]
            raise AgentLoadError(
                f"loading {path_text} failed: {type(exc).__name__}: {exc}"
            ) from None
        return module
