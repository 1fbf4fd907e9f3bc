"""What a fresh interpreter loads: `runner list` and `runner show` no Alembic (the schema is
checked with one SELECT), no loop, no provider adapter, no replay, no journal writer, and on
a pipe no rich (no style can show there); `runner worker` no replay until it checks a
release; `--help` no database library, no rich and no command module (a command's own `--help` its
module alone); and every module imports first, on its own."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from runner import Runner
from tests.integration.agents import solver_agent
from tests.unit.test_layout import PACKAGE, modules

COMMAND = """
import sys
from runner.cli import main
try:
    main(sys.argv[1:], prog_name="runner")
except SystemExit as exit:
    assert not exit.code, exit.code
heavy = ("alembic", "runner.core.loop", "runner.models.openai_chat",
         "runner.models.anthropic_messages", "runner.service.replay", "runner.service.fork",
         "runner.sql.journal", "opentelemetry", "psycopg")
loaded = sorted(name for name in heavy if name in sys.modules)
assert not loaded, f"runner {' '.join(sys.argv[1:])} loaded {loaded}"
"""


@pytest.fixture
def database(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    with Runner(url) as runner:
        runner.run(solver_agent, "add 2 and 3", id="r1")
    return url


@pytest.mark.parametrize("args", [["list"], ["show", "r1"]])
def test_reading_commands_load_neither_alembic_nor_the_loop(database: str, args: list[str]) -> None:
    done = _runner_in_a_child(COMMAND, [*args, "--db", database])
    assert done.returncode == 0, done.stderr
    assert "r1" in done.stdout


WORKER = """
import sys
from runner.cli import main
try:
    main(sys.argv[1:], prog_name="runner")
except SystemExit as exit:
    assert not exit.code, exit.code
heavy = ("alembic", "runner.service.replay", "runner.models.adapter")
loaded = sorted(name for name in heavy if name in sys.modules)
assert not loaded, f"runner {' '.join(sys.argv[1:])} loaded {loaded}"
"""


def test_a_worker_loads_no_replay_until_it_checks_a_release(database: str) -> None:
    done = _runner_in_a_child(WORKER, ["worker", "--once", "--db", database])
    assert done.returncode == 0, done.stderr


# SQLAlchemy imports a dialect to check an option named for it (`postgresql_where=`): the
# schema names none of PostgreSQL's up front (runner.sql.schema.for_postgresql), so a process
# that opens only SQLite does not pay for the PostgreSQL dialect's import (30 to 60 ms).
SQLITE_ONLY = """
import sys
from runner.cli import main
try:
    main(sys.argv[1:], prog_name="runner")
except SystemExit as exit:
    assert not exit.code, exit.code
heavy = ("sqlalchemy.dialects.postgresql", "psycopg")
loaded = sorted(name for name in heavy if name in sys.modules)
assert not loaded, f"runner {' '.join(sys.argv[1:])} loaded {loaded}"
assert "sqlalchemy" in sys.modules  # the check above would hold without a database at all
"""


@pytest.mark.parametrize(
    "args",
    [["worker", "--once"], ["run", "tests.integration.agents:solver_agent", "add 2 and 3"]],
    ids=" ".join,
)
def test_a_process_on_sqlite_loads_no_postgresql_dialect(database: str, args: list[str]) -> None:
    done = _runner_in_a_child(SQLITE_ONLY, [*args, "--db", database])
    assert done.returncode == 0, done.stderr


PG_INDEX = """
import sys
from sqlalchemy.schema import CreateIndex
from runner.sql.database import open_engine
from runner.sql.schema import limit_reservations
engine = open_engine(sys.argv[1])
index = next(i for i in limit_reservations.indexes if i.name.endswith("_unsettled"))
print(CreateIndex(index).compile(dialect=engine.dialect))
engine.dispose()
"""


@pytest.mark.postgres
def test_on_postgresql_the_schema_keeps_its_partial_index(postgres_database: str) -> None:
    # In a fresh interpreter: once a PostgreSQL engine is open, the declared index is revision
    # 0024's, predicate included (autogenerate does not compare it, so this does).
    done = subprocess.run(
        [sys.executable, "-c", PG_INDEX, postgres_database],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert " ".join(done.stdout.split()) == (
        "CREATE INDEX ix_limit_reservations_limit_unsettled ON limit_reservations (limit_name) "
        "WHERE settled = false"
    )


def _runner_in_a_child(script: str, args: list[str]) -> subprocess.CompletedProcess[str]:
    """`script` (which runs the CLI on its argv, then checks what it loaded) in a new
    interpreter: this one has imported everything already."""
    return subprocess.run(
        [sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=60,
        env=_no_forced_terminal(),
    )  # fmt: skip


def _no_forced_terminal() -> dict[str, str]:
    """This environment without what would force a terminal: on a pipe, no style can show,
    so no rich console is loaded."""
    return {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE")}


def test_a_database_behind_head_is_still_refused_without_alembic_loaded_up_front(
    tmp_path: Path,
) -> None:
    # The fast check only ever says "at head": anything else takes the full check's path.
    url = f"sqlite:///{tmp_path / 'old.db'}"
    with Runner(url):
        pass
    import sqlalchemy

    engine = sqlalchemy.create_engine(url)
    with engine.begin() as connection:
        connection.exec_driver_sql("UPDATE alembic_version SET version_num = '0006'")
    engine.dispose()
    done = subprocess.run(
        [sys.executable, "-m", "runner", "list", "--db", url],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert "schema revision 0006" in done.stderr and "runner db upgrade" in done.stderr


# `runner list` and `show` read on a plain driver connection (runner.direct): no SQLAlchemy.
PLAIN = """
import sys
from runner.cli import main
try:
    main(sys.argv[1:], prog_name="runner")
except SystemExit as exit:
    assert not exit.code, exit.code
heavy = ("sqlalchemy", "alembic", "runner.service.runner", "runner.sql.runs",
         "runner.sql.schema", "runner.sql.database", "runner.sql.backend",
         "runner.sql.approvals", "runner.core.loop", "runner.core.tree", "rich", "asyncio",
         "runner.store.rules")
loaded = sorted(name for name in heavy if name in sys.modules)
assert not loaded, f"runner {' '.join(sys.argv[1:])} loaded {loaded}"
print("psycopg" in sys.modules, file=sys.stderr)
print(" ".join(name for name in ("sqlite3", "socket") if name in sys.modules))
"""


@pytest.mark.parametrize(
    "args",
    [
        ["list"],
        ["list", "--status", "running"],
        ["list", "--status", "stalled"],
        ["list", "--status", "waiting"],
        ["list", "--json"],
        ["list", "--status", "waiting", "--json"],
        ["show", "waiting"],
        ["show", "live", "--json"],
    ],
    ids=" ".join,
)
def test_runner_list_and_show_load_no_sqlalchemy(db_url: str, args: list[str]) -> None:
    from tests.integration.listed_runs import fill

    fill(db_url)
    done = _runner_in_a_child(PLAIN, [*args, "--db", db_url])
    assert done.returncode == 0, done.stderr
    *output, loaded = done.stdout.splitlines()
    assert "\n".join(output).strip() not in ("", "[]", "no runs")
    # Not psycopg either: an SQLite file is read with the standard library's sqlite3, a
    # PostgreSQL database with libpq itself (runner.sql.libpq), without sqlite3; neither
    # loads socket (the host's name is os.uname's).
    assert done.stderr.strip() == "False"
    assert loaded == ("sqlite3" if db_url.startswith("sqlite") else "")


PLAIN_MODULES = [
    "runner.sql.plain_connection",
    "runner.sql.run_states",
    "runner.sql.reads",
    "runner.store.rows",
    "runner.store.run_views",
]


@pytest.mark.parametrize("module", PLAIN_MODULES)
def test_the_plain_reads_import_no_sqlalchemy(module: str) -> None:
    check = f"import sys, {module}; assert 'sqlalchemy' not in sys.modules, '{module}'"
    done = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


FIRST = """
import importlib, sys
failed = []
for name in sys.argv[1:]:
    for loaded in [m for m in sys.modules if m == "runner" or m.startswith("runner.")]:
        del sys.modules[loaded]
    try:
        importlib.import_module(name)
    except Exception as exc:
        failed.append(f"{name}: {type(exc).__name__}: {exc}")
print("\\n".join(failed))
sys.exit(1 if failed else 0)
"""


def test_every_module_imports_first() -> None:
    # Each module imported first, into an interpreter where no runner module is loaded yet
    # (one fresh process, emptied of runner before each): an import cycle that the order of
    # the other tests' imports hides fails here.
    names = sorted(set(modules(PACKAGE, "runner")) - {"runner.__main__"})  # that one runs
    done = subprocess.run(
        [sys.executable, "-c", FIRST, *names], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr


HELP = """
import sys
from runner.cli import main
try:
    main(sys.argv[1:], prog_name="runner")
except SystemExit:
    pass
heavy = ("sqlalchemy", "alembic", "psycopg", "rich", "runner.service.runner", "runner.history",
         "opentelemetry", "starlette", "jinja2", "uvicorn", "runner.ui", "runner.core.loop",
         "runner.models.openai_chat", "runner.models.anthropic_messages", "asyncio")
loaded = sorted(name for name in heavy if name in sys.modules)
assert not loaded, f"runner {' '.join(sys.argv[1:])} loaded {loaded}"
"""


@pytest.mark.parametrize(
    "args", [["--help"], ["list", "--help"], ["worker", "--help"], ["ui", "--help"]]
)
def test_help_loads_no_database_library_nor_rich(args: list[str]) -> None:
    done = subprocess.run(
        [sys.executable, "-c", HELP, *args], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "Usage: runner" in done.stdout


# The command modules a fresh `runner ARGS` loaded (runner.cli.COMMANDS names them all).
COMMAND_MODULES = """
import sys
from runner.cli import COMMANDS, main
try:
    main(sys.argv[1:], prog_name="runner")
except SystemExit:
    pass
print(" ".join(sorted({c.module for c in COMMANDS.values()} & sys.modules.keys())))
"""


@pytest.mark.parametrize(
    ("args", "modules"),
    [
        (["--help"], ""),
        (["--version"], ""),
        (["list", "--help"], "runner.cli.runs"),
        (["tail", "--help"], "runner.cli.follow runner.cli.runs"),  # follow shares runs' codes
        (["worker", "--help"], "runner.cli.worker"),
        (["ui", "--help"], "runner.cli.ui"),
        (["queue", "set", "--help"], "runner.cli.queues"),
        (["db", "--help"], "runner.cli.db"),
        (["sql", "--help"], "runner.cli.history"),
    ],
    ids=" ".join,
)
def test_a_command_imports_no_other_commands_module(args: list[str], modules: str) -> None:
    done = _runner_in_a_child(COMMAND_MODULES, args)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == modules


def test_reading_commands_import_no_other_commands_module(database: str) -> None:
    for args in (["list"], ["show", "r1"]):
        done = _runner_in_a_child(COMMAND_MODULES, [*args, "--db", database])
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines()[-1] == "runner.cli.runs", args


def test_a_table_on_a_pipe_loads_no_rich_console() -> None:
    # Where no style can show, a table of ASCII cells and a styled word need no console.
    script = (
        "import sys\n"
        "from runner.cli import output\n"
        "print(output.table(['ID', 'N'], [['a', ('1', 'green')]], right=[1]))\n"
        "print(output.styled('final', 'green'))\n"
        "print(sorted(m for m in ('rich.console', 'rich.table', 'rich.text') if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
        env=_no_forced_terminal(),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["ID  N", "a   1", "final", "[]"]


def test_importing_runner_testing_loads_no_sqlalchemy() -> None:
    # The in-memory store stands on the store's contract alone (runner/store/: protocol, rows,
    # rules), never on runner.sql: a test of an agent on it loads no database library.
    script = (
        "import sys\n"
        "import runner.testing\n"
        "from runner.testing import InMemoryStore\n"
        "InMemoryStore()\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] == 'sqlalchemy' "
        "or m.startswith('runner.sql'))\n"
        "assert not loaded, loaded\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
