"""Who holds a lease: `host:pid:start`, and whether that process still exists.

The process start time (from /proc) guards against a recycled pid: a new process with the
same pid is not the owner that took the lease.
"""

from __future__ import annotations

import os
import socket
from functools import cache


def _start_time(pid: int) -> str | None:
    """The process's start time, or None if it does not exist or is a zombie."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            # The command name (field 2) may hold spaces: split after its closing paren.
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    if len(fields) < 20 or fields[0] in ("Z", "X"):
        return None  # a killed process not yet reaped by its parent is as dead as it gets
    return fields[19]  # field 22 of the file: start time in clock ticks since boot


def this_process() -> str:
    """The lease owner name of this process (recomputed after a fork changes the pid)."""
    return _owner_of(os.getpid())


@cache
def _owner_of(pid: int) -> str:
    return f"{socket.gethostname()}:{pid}:{_start_time(pid) or '?'}"


def local_prefix() -> str:
    """How the lease owners of this host's processes begin."""
    return f"{socket.gethostname()}:"


def is_dead(owner: str) -> bool:
    """True when `owner` was a process on this host that no longer exists."""
    try:
        host, pid_text, start = owner.rsplit(":", 2)
        pid = int(pid_text)
    except ValueError:
        return False
    if host != socket.gethostname():
        return False  # another machine's process: only its lease expiry can tell
    if start != "?":
        return _start_time(pid) != start
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False
