"""Model adapters: provider APIs as ordinary model callables.

Each adapter imports its official SDK only when it is made (`pip install
'durable-runner[openai]'`, `[anthropic]`), so importing runner never needs them.
"""

from __future__ import annotations

from runner.models.anthropic_messages import AnthropicMessages
from runner.models.openai_chat import OpenAIChat
from runner.models.pricing import Price
from runner.models.schemas import SchemaError, ToolSpec, tool_spec, tool_specs

__all__ = [
    "AnthropicMessages",
    "OpenAIChat",
    "Price",
    "SchemaError",
    "ToolSpec",
    "tool_spec",
    "tool_specs",
]
