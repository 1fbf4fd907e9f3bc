"""Who holds a lease: `host:pid:start:space`, and whether that process surely no longer exists.

`start` (the process's start time, from /proc) guards against a recycled pid. `space` names
the PID namespace and the boot the pid belongs to: two containers that share a hostname (host
networking) see different processes under the same pid, and a machine that rebooted reuses
them all. A process is called dead only when its host, PID namespace and boot are this
process's own and the pid with that start time is gone; whenever that cannot be told, the
answer is "not dead", and the lease's expiry decides.
"""

from __future__ import annotations

import os
from functools import cache

UNKNOWN = "?"


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


@cache
def process_space() -> str:
    """This process's PID namespace and boot, as `<namespace inode>.<boot id prefix>`."""
    try:
        namespace = os.readlink("/proc/self/ns/pid")  # "pid:[4026531836]"
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as boot:
            boot_id = boot.read().strip()
    except OSError:
        return UNKNOWN
    inode = namespace.partition("[")[2].rstrip("]")
    if not inode.isdigit() or not boot_id:
        return UNKNOWN
    return f"{inode}.{boot_id.replace('-', '')[:12]}"


def owner_name(pid: int, start: str | None) -> str:
    """The lease owner name of process `pid` of this host, namespace and boot."""
    return f"{_host()}:{pid}:{start or UNKNOWN}:{process_space()}"


def _host() -> str:
    """This host's name, as `socket.gethostname()` gives it: on POSIX, the node name of
    `os.uname()` (what gethostname reads), without importing socket (3 ms of a command's
    start-up)."""
    uname = getattr(os, "uname", None)
    if uname is not None:
        return str(uname().nodename)
    import socket

    return socket.gethostname()


def this_process() -> str:
    """The lease owner name of this process (recomputed after a fork changes the pid)."""
    return _owner_of(os.getpid())


@cache
def _owner_of(pid: int) -> str:
    return owner_name(pid, _start_time(pid))


def local_prefix() -> str:
    """How the lease owners of this host's processes begin."""
    return f"{_host()}:"


def is_dead(owner: str) -> bool:
    """True only when `owner` surely was a process that no longer exists."""
    try:
        host, pid_text, start, space = owner.rsplit(":", 3)
        pid = int(pid_text)
    except ValueError:
        return False  # not a name this runner writes: only the lease can tell
    if host != _host():
        return False  # another machine's process: only its lease expiry can tell
    if space == UNKNOWN or space != process_space():
        return False  # another container or another boot: its pids are not ours to read
    if start != UNKNOWN:
        return _start_time(pid) != start
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False
