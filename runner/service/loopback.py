"""Whether a face listens on this machine alone: a host that is its loopback needs no
token (the page, the API and `runner mcp serve --http` all ask). Needs no extra's libraries:
the CLI checks it before loading them."""

from __future__ import annotations

import ipaddress


def is_loopback(host: str) -> bool:
    """Whether `host` (a name or an address to listen on) is this machine's loopback."""
    name = host.strip("[]").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False
