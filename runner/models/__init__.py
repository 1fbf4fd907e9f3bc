"""Model adapters: provider APIs as ordinary model callables.

`OpenAIChat` (`openai_chat`) and `AnthropicMessages` (`anthropic_messages`) share what every
adapter does the same way (`adapter`): tool schemas from a tool's signature and docstring
(`schemas`), the transcript read as turns and actions written back (`turns`), provider
errors as retry-or-stop (`failures`), what a call cost (`pricing`) and a streamed response
made one body again (`streams`, for `stream=True`). Each adapter imports
its official SDK only when it is made (`pip install 'durable-runner[openai]'`,
`[anthropic]`), so importing runner never needs them.

It may import: `runner.core` and the shared leaves.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from runner.lazy import exports

# For type checkers only (`__all__` is computed, so each name is re-exported as `X as X`);
# tests/unit/test_public_surface.py holds these to `_HOMES`.
if TYPE_CHECKING:
    from runner.models.anthropic_messages import AnthropicMessages as AnthropicMessages
    from runner.models.openai_chat import OpenAIChat as OpenAIChat
    from runner.models.pricing import Price as Price
    from runner.models.schemas import SchemaError as SchemaError
    from runner.models.schemas import ToolSpec as ToolSpec
    from runner.models.schemas import tool_spec as tool_spec
    from runner.models.schemas import tool_specs as tool_specs

# The package's names, written once: where each lives (`__all__` and `dir()` come from
# here). Loaded on first use (PEP 562): a command that only reads runs (and the replay of
# one) never pays for the adapters.
_HOMES = {
    "AnthropicMessages": "runner.models.anthropic_messages",
    "OpenAIChat": "runner.models.openai_chat",
    "Price": "runner.models.pricing",
    "SchemaError": "runner.models.schemas",
    "ToolSpec": "runner.models.schemas",
    "tool_spec": "runner.models.schemas",
    "tool_specs": "runner.models.schemas",
}


__getattr__ = exports(__name__, _HOMES)
__all__ = sorted(_HOMES)


def __dir__() -> list[str]:
    return list(__all__)
