"""`runner` processes forked from one that has already imported runner and the frameworks.

A `runner` process that loads a Pydantic AI or Agents SDK agent spends seconds of CPU
importing the framework (each imports the MCP SDK's pydantic models whole), far more than
the run it is started for: the crash tests start hundreds of them. So each pytest worker
keeps one server process (`python -m tests.forked_runner SOCKET`) that imports them once
and forks a child for each `runner` command, which then runs exactly what the console
script runs (`runner.cli.main`) and ends as any Python process ends (atexit, threads,
flushed streams). The child is a real process of its own: its own pid, its own streams,
its own environment and working folder, signals as a shell leaves them; a test SIGKILLs it
as it would an exec'd one. What a fork does not repeat is the interpreter's start and the
imports, which the start-up tests (tests/integration/test_startup_imports.py) and the
commands run through `sys.executable` still cover. A command whose environment sets what
the interpreter reads at its start (`PYTHONPATH`, say) otherwise than the tests have it is
exec'd, as is every command with `RUNNER_TEST_EXEC=1`.

The client side, `Forked`, is the part of `subprocess.Popen` the tests use: `pid`,
`returncode`, `poll`, `wait`, `communicate`, `send_signal`, `terminate`, `kill`, and
`stdout`/`stderr` as text pipes; its stdin is /dev/null.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import importlib
import io
import json
import locale
import os
import pkgutil
import random
import select
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

from tests.conditions import GENEROUS, wait_until

ROOT = Path(__file__).resolve().parents[1]
RUNNER = Path(sys.executable).parent / "runner"  # the console script
PIPE = subprocess.PIPE
DEVNULL = subprocess.DEVNULL

# What a `runner` process of the tests imports that costs the most; each only if installed.
_PRELOADED = (
    "runner.cli",
    "runner.service.worker",
    "runner.integrations.pydantic_ai",
    "runner.integrations.openai_agents",
    "runner.mcp",
    "pydantic_ai.models.openai",
    "pydantic_ai.models.anthropic",
    "agents",
    "openai",
    "anthropic",
    "mcp.client.stdio",
    "genai_prices",
)


def exec_wanted() -> bool:
    return os.environ.get("RUNNER_TEST_EXEC") == "1"


# --- the server: imports once, forks a child per command ---------------------------------


def _serve(path: str) -> dict[str, Any] | None:
    """Fork a child for each request on the socket at `path`; returns only in a child,
    with its request. The server reports each child's pid and, once it ends, its wait
    status on the connection the request came on."""
    parent = os.getppid()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # the wake-up fd says a child ended
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    selector.register(wake_read, selectors.EVENT_READ)
    children: dict[int, socket.socket] = {}
    while True:
        for key, _ in selector.select(timeout=1.0):
            if key.fileobj is listener:
                conn, _ = listener.accept()
                message, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
                request = json.loads(message)
                pid = os.fork()
                if pid == 0:
                    selector.close()
                    listener.close()
                    for other in children.values():
                        other.close()
                    signal.set_wakeup_fd(-1)
                    os.close(wake_read)
                    os.close(wake_write)
                    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                    for target, fd in enumerate(fds):
                        os.dup2(fd, target)
                        os.close(fd)
                    conn.close()
                    return dict(request)
                for fd in fds:
                    os.close(fd)
                conn.sendall(f"{pid}\n".encode())
                children[pid] = conn
            else:
                with contextlib.suppress(BlockingIOError):
                    os.read(wake_read, 4096)
        while children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            conn = children.pop(pid, None)
            if conn is not None:
                with contextlib.suppress(OSError):
                    conn.sendall(f"{status}\n".encode())
                conn.close()
        if os.getppid() != parent:  # the pytest worker is gone
            return None


def _become(request: Mapping[str, Any]) -> None:
    """In the child: the command's environment, folder, streams and signals."""
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    # As the interpreter leaves them at its start: SIGINT raises KeyboardInterrupt, SIGPIPE
    # is ignored (a closed pipe is BrokenPipeError), SIGTERM ends the process.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_SETMASK, set())
    # The streams as the interpreter makes them on fds 0, 1 and 2: buffered (unless
    # PYTHONUNBUFFERED), line-buffered on a terminal, stderr always line-buffered.
    unbuffered = bool(os.environ.get("PYTHONUNBUFFERED"))
    encoding = os.environ.get("PYTHONIOENCODING") or locale.getpreferredencoding(False)
    sys.stdin = io.TextIOWrapper(
        io.BufferedReader(io.FileIO(0, "r", closefd=False)), encoding=encoding
    )
    out = io.FileIO(1, "w", closefd=False)
    sys.stdout = io.TextIOWrapper(
        out if unbuffered else io.BufferedWriter(out),
        encoding=encoding,
        line_buffering=os.isatty(1),
        write_through=unbuffered,
    )
    err = io.FileIO(2, "w", closefd=False)
    sys.stderr = io.TextIOWrapper(
        err if unbuffered else io.BufferedWriter(err),
        encoding=encoding,
        errors="backslashreplace",
        line_buffering=True,
        write_through=unbuffered,
    )
    # As the console script's process: its path first in argv, and a `__main__` that is a
    # script, not this module run with -m (click names the program after it).
    sys.argv = [str(RUNNER), *request["args"]]
    main = sys.modules["__main__"]
    main.__package__ = None
    main.__spec__ = None
    sys.path[0] = str(RUNNER.parent)  # the console script's folder, as exec'd
    for name in [n for n in sys.modules if n == "tests" or n.startswith("tests.")]:
        del sys.modules[name]  # this server's own package, which an exec'd runner lacks
    random.seed()
    # Fault points are armed from the environment when their module is imported.
    faults = sys.modules.get("runner.core.faults")
    if faults is not None:
        importlib.reload(faults)


# Packages imported whole: what a command imports on its first call of a client, a
# database or a dialect (openai's types alone are about 500 modules, loaded lazily).
_PRELOADED_WHOLE = ("runner", "openai", "sqlalchemy.dialects", "httpcore", "h11", "anyio", "trio")


def _preload() -> None:
    for name in _PRELOADED:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    for name in _PRELOADED_WHOLE:
        try:
            package = importlib.import_module(name)
        except ImportError:
            continue
        for found in pkgutil.walk_packages(package.__path__, name + ".", onerror=lambda _: None):
            if {"__main__", "tests", "_tests", "testing"} & set(found.name.split(".")):
                continue  # scripts and the packages' own tests, not what a command imports
            with contextlib.suppress(Exception):
                importlib.import_module(found.name)


# --- the client: one server per pytest worker, a Popen-like handle per command ----------


class _Server:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._path = ""

    @staticmethod
    def _stop(process: subprocess.Popen[bytes], folder: str) -> None:
        process.kill()
        process.wait()
        shutil.rmtree(folder, ignore_errors=True)

    def path(self) -> str:
        with self._lock:
            if self._process is None or self._process.poll() is not None:
                folder = tempfile.mkdtemp(prefix="runner-forks-")
                self._path = os.path.join(folder, "socket")
                env = {k: v for k, v in os.environ.items() if not k.startswith("RUNNER_")}
                self._process = subprocess.Popen(
                    [sys.executable, "-m", "tests.forked_runner", self._path],
                    cwd=ROOT,
                    env=env,
                    stdin=subprocess.DEVNULL,
                )
                atexit.register(self._stop, self._process, folder)
                started = self._process
                wait_until(
                    lambda: os.path.exists(self._path) or started.poll() is not None,
                    timeout=GENEROUS,
                    what="the forking server's socket",
                )
                if started.poll() is not None:
                    raise RuntimeError("the forking server ended at its start")
            return self._path


_SERVER = _Server()


class Forked:
    """A `runner` command forked by the server: the part of `subprocess.Popen` tests use."""

    def __init__(
        self,
        args: list[str],
        *,
        env: Mapping[str, str],
        cwd: Path | str | None = None,
        stdout: int | IO[Any] | None = None,
        stderr: int | IO[Any] | None = None,
    ) -> None:
        self.args = ["runner", *args]
        self.returncode: int | None = None
        # Its stdin is /dev/null, as `spawn` gives an exec'd command.
        theirs = [os.open(os.devnull, os.O_RDONLY)]
        ours = [theirs[0]]  # the child's ends, closed here once sent
        mine: list[int | None] = [None, None]  # our ends of its stdout and stderr pipes
        for n, spec in enumerate((stdout, stderr)):
            if spec is PIPE:
                mine[n], write = os.pipe()
                theirs.append(write)
                ours.append(write)
            elif spec is None:
                theirs.append(n + 1)  # inherits ours, as Popen's child would
            elif isinstance(spec, int):
                theirs.append(spec)
            else:
                theirs.append(spec.fileno())
        request = {"args": list(args), "env": dict(env), "cwd": str(cwd or os.getcwd())}
        self._conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._conn.connect(_SERVER.path())
        try:
            socket.send_fds(self._conn, [json.dumps(request).encode()], theirs)
        finally:
            for fd in ours:
                os.close(fd)
        self._buffer = b""
        self.pid = int(self._line(timeout=None) or -1)
        if self.pid < 0:
            raise RuntimeError("the forking server gave no pid")
        self.stdout: IO[str] | None = None if mine[0] is None else open(mine[0])  # noqa: SIM115
        self.stderr: IO[str] | None = None if mine[1] is None else open(mine[1])  # noqa: SIM115

    def _line(self, timeout: float | None) -> str | None:
        """The server's next line; None if none came within `timeout` (None: no limit)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self._buffer:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([self._conn], [], [], left)
            if not ready:
                return None
            chunk = self._conn.recv(4096)
            if not chunk:
                return ""
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line.decode()

    def _ended(self, line: str | None) -> int | None:
        if line is None:
            return None
        if line == "":  # the server is gone: the child cannot be told about any more
            self.returncode = -signal.SIGKILL
        else:
            self.returncode = os.waitstatus_to_exitcode(int(line))
        self._conn.close()
        return self.returncode

    def poll(self) -> int | None:
        if self.returncode is None:
            return self._ended(self._line(timeout=0))
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            code = self._ended(self._line(timeout))
            if code is None:
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
            return code
        return self.returncode

    def communicate(self, timeout: float | None = None) -> tuple[Any, Any]:
        outputs: dict[str, Any] = {}
        readers = [
            threading.Thread(target=lambda n=n, s=s: outputs.__setitem__(n, s.read()), daemon=True)
            for n, s in (("out", self.stdout), ("err", self.stderr))
            if s is not None and not s.closed  # a second call reads what the first left
        ]
        for reader in readers:
            reader.start()
        deadline = None if timeout is None else time.monotonic() + timeout
        for reader in readers:
            reader.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
            if reader.is_alive():
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
        self.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
        for stream in (self.stdout, self.stderr):
            if stream is not None:
                stream.close()
        return outputs.get("out"), outputs.get("err")

    def __del__(self) -> None:
        # As Popen keeps an unwaited child's handle alive (subprocess._active), a handle
        # dropped unwaited here is not a leak of the test's: its pipes close quietly.
        for name in ("stdout", "stderr", "_conn"):  # what __init__ got to make
            handle = getattr(self, name, None)
            if handle is not None:
                with contextlib.suppress(Exception):
                    handle.close()

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signum)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


# What the interpreter reads at its start and the server cannot apply to a fork (the
# module path, the locale its streams' encoding comes from): a command with any of these set
# otherwise than this process has them is exec'd.
_HANDLED = {"PYTHONUNBUFFERED", "PYTHONIOENCODING"}
_AT_START = {"LANG", "LC_ALL", "LC_CTYPE"}


def _needs_exec(env: Mapping[str, str]) -> bool:
    if exec_wanted():
        return True
    names = {k for k in (*env, *os.environ) if k.startswith("PYTHON") or k in _AT_START}
    return any(env.get(name) != os.environ.get(name) for name in names - _HANDLED)


def _as_from_a_shell() -> None:
    """In an exec'd child before exec: SIGINT and SIGTERM as a shell leaves them (their
    default action, unblocked), whatever the pytest worker's state."""
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, set())


def spawn(
    args: list[str],
    *,
    env: Mapping[str, str],
    cwd: Path | str,
    stdout: int | IO[Any] | None = None,
    stderr: int | IO[Any] | None = None,
) -> Forked | subprocess.Popen[str]:
    """`runner ARGS` started: forked by the server, or exec'd when the environment asks
    for a fresh interpreter (or `RUNNER_TEST_EXEC=1`)."""
    if _needs_exec(env):
        return subprocess.Popen(
            [str(RUNNER), *args],
            env=dict(env),
            cwd=cwd,
            stdin=DEVNULL,
            stdout=stdout,
            stderr=stderr,
            text=True,
            preexec_fn=_as_from_a_shell,
        )
    return Forked(args, env=env, cwd=cwd, stdout=stdout, stderr=stderr)


def run(
    args: list[str], *, env: Mapping[str, str], cwd: Path | str, timeout: float
) -> subprocess.CompletedProcess[str]:
    """`subprocess.run` of `runner ARGS` (forked or exec'd, as `spawn`), its output captured
    as text."""
    process = spawn(args, env=env, cwd=cwd, stdout=PIPE, stderr=PIPE)
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        raise
    return subprocess.CompletedProcess(["runner", *args], process.wait(), out, err)


if __name__ == "__main__":
    _preload()
    # What was imported is never collected: out of the collector's sight, so a child's
    # collections walk its own objects only, and do not touch (and copy) the server's pages.
    gc.freeze()
    _request = _serve(sys.argv[1])
    if _request is None:
        sys.exit(0)
    _become(_request)
    from runner.cli import main

    sys.exit(main())
