"""An MCP tool's result as the observation the model is shown."""

from __future__ import annotations

import json
from typing import Any


class MCPToolError(Exception):
    """The server answered the call with an error result (`isError`): its text is the
    observation, flagged as an error, and the run goes on."""


def observation_of(result: Any) -> str:
    """The text of a CallToolResult: its text blocks, else its structured content as JSON;
    other blocks (images, audio, resources) named by what they are. MCPToolError if the
    server said the call failed."""
    parts: list[str] = []
    for block in result.content or ():
        kind = getattr(block, "type", None)
        if kind == "text":
            parts.append(block.text)
        elif kind == "resource":
            resource = block.resource
            text = getattr(resource, "text", None)
            parts.append(text if text is not None else f"[resource {resource.uri}]")
        elif kind == "resource_link":
            parts.append(f"[resource {block.uri}]")
        else:
            parts.append(f"[{kind} {getattr(block, 'mime_type', '') or ''}]".replace(" ]", "]"))
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, sort_keys=True))
    text = "\n".join(parts)
    if result.is_error:
        raise MCPToolError(text or "the server reported an error")
    return text
