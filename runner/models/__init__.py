"""Model adapters: provider APIs as ordinary model callables.

Each adapter imports its official SDK only when it is made (`pip install
'durable-runner[openai]'`, `[anthropic]`), so importing runner never needs them.

It may import: `runner.core` and the shared leaves.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from runner.lazy import exports

if TYPE_CHECKING:
    from runner.models.anthropic_messages import AnthropicMessages
    from runner.models.openai_chat import OpenAIChat
    from runner.models.pricing import Price
    from runner.models.schemas import SchemaError, ToolSpec, tool_spec, tool_specs

# Loaded on first use (PEP 562): a command that only reads runs (and the replay of one)
# never pays for the adapters.
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


__all__ = [
    "AnthropicMessages",
    "OpenAIChat",
    "Price",
    "SchemaError",
    "ToolSpec",
    "tool_spec",
    "tool_specs",
]
