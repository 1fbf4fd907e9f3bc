"""The migrations: they build exactly the declared schema on SQLite and PostgreSQL, have one
head, go down and up again, are applied automatically only to a fresh SQLite file, and ship
in the wheel so that `runner db upgrade` works from an installed copy."""

from __future__ import annotations

import itertools
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import threading
import venv
import zipfile
from pathlib import Path
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Column, Engine, Integer, MetaData, Table, inspect, text

from runner import Agent, Runner, SchemaOutOfDate
from runner.sql.database import (
    alembic_config,
    current_revision,
    downgrade,
    ensure_schema,
    head_revision,
    migrations_folder,
    open_engine,
    upgrade,
)
from runner.sql.partitions import include_name
from runner.sql.schema import SCHEMA_REVISION, metadata

REPO = Path(__file__).resolve().parents[2]
RUNNER_TABLES = {"runs", "entries"}


def differences(engine: Engine, target: MetaData = metadata) -> list[Any]:
    with engine.connect() as connection:
        context = MigrationContext.configure(
            connection, opts={"compare_type": True, "include_name": include_name}
        )
        return list(compare_metadata(context, target))


def tables(engine: Engine) -> set[str]:
    return set(inspect(engine).get_table_names())


def views(engine: Engine) -> set[str]:
    return set(inspect(engine).get_view_names())


def scripts() -> ScriptDirectory:
    return ScriptDirectory.from_config(alembic_config("sqlite://"))


# -- the migrations against the declared schema -------------------------------------------


def test_upgrading_an_empty_database_gives_exactly_the_declared_schema(engine: Engine) -> None:
    assert tables(engine) == set()
    upgrade(engine)
    assert tables(engine) >= RUNNER_TABLES
    assert current_revision(engine) == head_revision()
    assert differences(engine) == []


def test_the_comparison_would_see_a_difference(engine: Engine) -> None:
    # The test above is only worth something if a drift shows up: add a column, see it.
    upgrade(engine)
    drifted = MetaData()
    for table in metadata.tables.values():
        table.to_metadata(drifted)
    Table("runs", drifted, Column("surprise", Integer), extend_existing=True)
    found = differences(engine, drifted)
    assert [(d[0], d[3].name) for d in found if d[0] == "add_column"] == [
        ("add_column", "surprise")
    ]


def test_there_is_exactly_one_head() -> None:
    heads = scripts().get_heads()
    assert len(heads) == 1
    assert heads[0] == head_revision()
    # Commands check a database against the revision the tables declare, without Alembic.
    assert heads[0] == SCHEMA_REVISION
    # The repository's alembic.ini points at the very same scripts.
    repo_scripts = ScriptDirectory(str(REPO / "migrations"))
    assert repo_scripts.get_heads() == heads
    assert migrations_folder().resolve() == (REPO / "migrations").resolve()


def test_the_revisions_form_one_line_from_base_to_head() -> None:
    revisions = list(scripts().walk_revisions())  # head first
    assert revisions[-1].down_revision is None
    for newer, older in itertools.pairwise(revisions):
        assert newer.down_revision == older.revision


def test_downgrade_to_base_removes_everything_and_upgrade_works_again(engine: Engine) -> None:
    upgrade(engine)
    downgrade(engine, "base")
    assert tables(engine) & RUNNER_TABLES == set()
    assert tables(engine) <= {"alembic_version"}
    assert views(engine) == set()
    assert current_revision(engine) is None
    upgrade(engine)
    assert current_revision(engine) == head_revision()
    assert differences(engine) == []


def test_every_revision_goes_down_and_up_one_step_at_a_time(engine: Engine) -> None:
    revisions = [r.revision for r in reversed(list(scripts().walk_revisions()))]
    for revision in revisions:
        upgrade(engine, revision)
        assert current_revision(engine) == revision
    for older in reversed([None, *revisions[:-1]]):
        downgrade(engine, "-1")
        assert current_revision(engine) == older
    assert tables(engine) & RUNNER_TABLES == set()


def test_data_survives_a_round_trip_of_the_newest_migration(engine: Engine) -> None:
    # Downgrading the newest revision and upgrading again keeps the runs and the journal.
    revisions = [r.revision for r in scripts().walk_revisions()]
    if len(revisions) < 2:
        pytest.skip("only one revision: a downgrade of it drops the tables by design")
    upgrade(engine)
    with Runner(str(engine.url.render_as_string(hide_password=False))) as runner:
        runner.run(_answers_at_once(), "keep me", id="kept")
    downgrade(engine, "-1")
    upgrade(engine)
    with Runner(str(engine.url.render_as_string(hide_password=False))) as runner:
        kept = runner.get("kept")
    assert (kept.stop_reason, kept.output) == ("final", "kept")


def _answers_at_once() -> Agent:
    return Agent(lambda transcript: {"type": "final", "content": "kept"})


# -- ensure_schema: a fresh SQLite file only -------------------------------------------------


def test_a_fresh_sqlite_file_is_migrated_on_first_use(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'fresh.db'}"
    with Runner(url) as runner:
        assert current_revision(runner.engine) == head_revision()
        assert differences(runner.engine) == []
        result = runner.run(_answers_at_once(), "hello")
    assert result.output == "kept"


def test_two_processes_opening_a_fresh_sqlite_file_at_once(tmp_path: Path) -> None:
    # Racing first uses collide on the switch to WAL only now and then: try many files.
    for attempt in range(16):
        url = f"sqlite:///{tmp_path / f'race-{attempt}.db'}"
        assert _first_uses_at_once(url, count=4) == []
        engine = open_engine(url)
        try:
            assert current_revision(engine) == head_revision()
            assert differences(engine) == []
        finally:
            engine.dispose()


def _first_uses_at_once(url: str, count: int) -> list[BaseException]:
    """Open `url` and ensure its schema from `count` threads released together."""
    start = threading.Barrier(count)
    errors: list[BaseException] = []

    def first_use() -> None:
        engine = open_engine(url)
        try:
            start.wait(10)
            ensure_schema(engine)
        except BaseException as exc:
            errors.append(exc)
        finally:
            engine.dispose()

    threads = [threading.Thread(target=first_use) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return errors


def test_an_empty_postgres_database_is_never_migrated_silently(empty_postgres: str) -> None:
    with pytest.raises(SchemaOutOfDate, match="runner db upgrade") as raised:
        Runner(empty_postgres)
    assert "no runner schema" in str(raised.value)
    engine = open_engine(empty_postgres)
    try:
        with pytest.raises(SchemaOutOfDate, match="runner db upgrade"):
            ensure_schema(engine)
        assert tables(engine) == set()
    finally:
        engine.dispose()


def test_a_database_behind_head_is_not_migrated(engine: Engine, empty_url: str) -> None:
    upgrade(engine)
    downgrade(engine, "-1")  # one revision behind this runner (base, were there only one)
    behind = current_revision(engine)
    with pytest.raises(SchemaOutOfDate, match="runner db upgrade"):
        ensure_schema(engine)
    with pytest.raises(SchemaOutOfDate, match="runner db upgrade"):
        Runner(empty_url)
    assert current_revision(engine) == behind  # nothing was applied
    upgrade(engine)
    ensure_schema(engine)  # at head: fine
    with Runner(empty_url) as runner:
        assert runner.run(_answers_at_once(), "now").output == "kept"


def test_a_database_at_an_unknown_revision_is_refused(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'odd.db'}"
    engine = open_engine(url)
    try:
        upgrade(engine)
        with engine.begin() as connection:
            connection.execute(text("UPDATE alembic_version SET version_num = 'f00d'"))
        with pytest.raises(SchemaOutOfDate, match="f00d") as raised:
            ensure_schema(engine)
        # A revision this runner does not know was written by a newer one (test_upgrade_safety).
        assert "upgrade runner" in str(raised.value)
    finally:
        engine.dispose()


def test_a_sqlite_file_with_other_tables_is_not_migrated(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'theirs.db'}"
    engine = open_engine(url)
    try:
        with engine.begin() as connection:
            connection.execute(text("CREATE TABLE notes (body TEXT)"))
        with pytest.raises(SchemaOutOfDate, match="runner db upgrade"):
            ensure_schema(engine)
        assert tables(engine) == {"notes"}
    finally:
        engine.dispose()


# -- from the command line -------------------------------------------------------------------


def _environment(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "RUNNER_DATABASE_URL")}
    env.update(extra)
    return env


def test_alembic_upgrade_head_works_from_the_repository(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'alembic.db'}"
    alembic = Path(sys.executable).parent / "alembic"
    for command in (["upgrade", "head"], ["check"]):
        done = subprocess.run(
            [str(alembic), "-c", "alembic.ini", *command],
            cwd=REPO,
            env=_environment(RUNNER_DATABASE_URL=url),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
    engine = open_engine(url)
    try:
        assert current_revision(engine) == head_revision()
        assert differences(engine) == []
    finally:
        engine.dispose()


def _copy_sources(into: Path) -> None:
    """The files a wheel is built from (not the work tree: no build/ or egg-info left there)."""
    into.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ("runner", "migrations"):
        shutil.copytree(REPO / name, into / name, ignore=ignore)
    for path in REPO.iterdir():
        if path.is_file() and (path.name == "pyproject.toml" or path.suffix in (".md", ".txt")):
            shutil.copy(path, into / path.name)
    for license_file in REPO.glob("LICENSE*"):
        shutil.copy(license_file, into / license_file.name)


def test_runner_db_upgrade_works_from_an_installed_wheel(tmp_path: Path) -> None:
    source, dist, env_dir = tmp_path / "src", tmp_path / "dist", tmp_path / "v"
    _copy_sources(source)
    built = subprocess.run(
        # -v: the build backend's own output, where setuptools' warnings would be.
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-v", "-w", str(dist), str(source)],
        env=_environment(),
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert built.returncode == 0, built.stderr
    said = built.stdout + built.stderr
    # A quiet build: no package left out, no setuptools warning of any kind (each once
    # cost every install ~80 lines: "Package 'runner.ui.static' is absent from ...").
    assert "absent from the `packages` configuration" not in said, said
    warnings = [line for line in said.splitlines() if re.search(r"\.py:\d+: \w*Warning", line)]
    assert warnings == [], said
    (wheel,) = dist.glob("durable_runner-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    assert "runner/migrations/env.py" in names
    for script in (REPO / "migrations" / "versions").glob("*.py"):
        assert f"runner/migrations/versions/{script.name}" in names
    # The page's templates and stylesheet are package data: `runner ui` needs them too.
    page_files = [*(REPO / "runner/ui").glob("templates/*"), *(REPO / "runner/ui").glob("static/*")]
    assert len(page_files) >= 6
    for page_file in page_files:
        assert f"runner/ui/{page_file.parent.name}/{page_file.name}" in names

    # A fresh environment with the wheel installed; its dependencies come from this one
    # (a .pth line adds our site-packages after its own), so no index is needed.
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    installed = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "-q", wheel],
        env=_environment(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert installed.returncode == 0, installed.stderr
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (Path(site) / "runner_test_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")

    work = tmp_path / "elsewhere"  # not the repository: nothing found by accident
    work.mkdir()
    where = subprocess.run(
        [str(python), "-c", "import runner.sql.database as d; print(d.migrations_folder())"],
        cwd=work,
        env=_environment(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert where.returncode == 0, where.stderr
    assert Path(where.stdout.strip()).is_relative_to(env_dir)

    db = work / "x.db"
    for _ in range(2):  # the second time finds it at head and says so
        upgraded = subprocess.run(
            [str(env_dir / "bin" / "runner"), "db", "upgrade", "--db", f"sqlite:///{db}"],
            cwd=work,
            env=_environment(),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert upgraded.returncode == 0, upgraded.stderr
    engine = open_engine(f"sqlite:///{db}")
    try:
        assert tables(engine) >= RUNNER_TABLES
        assert current_revision(engine) == head_revision()
        assert differences(engine) == []
    finally:
        engine.dispose()
