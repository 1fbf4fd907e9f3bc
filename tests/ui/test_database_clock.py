"""The page and the CLI judge a run on one clock, the database's: "stalled" on the run's
page and in the list of runs, `runner list` and `runner show`, and "seen N ago", all agree
when the database server's clock is an hour ahead of the web host's."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from click.testing import CliRunner
from sqlalchemy import create_engine, text, update
from sqlalchemy.engine import make_url
from starlette.testclient import TestClient

from runner import Runner
from runner.cli import main
from runner.sql import runs as store
from runner.sql.database import open_engine, upgrade
from runner.sql.schema import runs
from runner.ui import make_app

from .conftest import POSTGRES_URL, REQUIRE_POSTGRES

BASE = "http://127.0.0.1:8780"
BUDGETS = {"max_steps": 10, "max_tokens": None, "max_cost": None, "max_consecutive_errors": 3}
AHEAD = timedelta(hours=1)  # the database server's clock, against this host's

# The server's clock functions, shadowed: a schema searched before pg_catalog (named in
# the search path, pg_catalog is searched where it stands) whose clock_timestamp() and
# now() run an hour ahead. Every session of the database reads them: the engine's, the
# page's read-only one and the connection `runner list` opens without SQLAlchemy.
SKEWED_CLOCK = """
CREATE SCHEMA skewed_clock;
CREATE FUNCTION skewed_clock.clock_timestamp() RETURNS timestamptz LANGUAGE sql
    AS $$ SELECT pg_catalog.clock_timestamp() + interval '1 hour' $$;
CREATE FUNCTION skewed_clock.now() RETURNS timestamptz LANGUAGE sql
    AS $$ SELECT pg_catalog.now() + interval '1 hour' $$;
GRANT USAGE ON SCHEMA skewed_clock TO PUBLIC;
"""


@pytest.fixture(scope="module")
def skewed_url() -> Iterator[str]:
    """A PostgreSQL database at head whose clock runs an hour ahead of this host's."""
    admin = create_engine(
        make_url(POSTGRES_URL).render_as_string(hide_password=False), isolation_level="AUTOCOMMIT"
    )
    try:
        with admin.connect() as connection:
            connection.execute(text("SELECT 1"))
    except Exception:
        admin.dispose()
        if REQUIRE_POSTGRES:
            pytest.fail(f"PostgreSQL is required but does not answer at {POSTGRES_URL}")
        pytest.skip("no PostgreSQL server answers (set RUNNER_TEST_POSTGRES_URL)")
    name = f"runner_clock_{uuid.uuid4().hex[:12]}"
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    url = make_url(POSTGRES_URL).set(database=name).render_as_string(hide_password=False)
    try:
        engine = open_engine(url)
        upgrade(engine)  # runner's tables in public, before the search path changes
        with engine.begin() as connection:
            connection.exec_driver_sql(SKEWED_CLOCK)
            connection.exec_driver_sql(
                f'ALTER DATABASE "{name}" SET search_path = skewed_clock, pg_catalog, public'
            )
        engine.dispose()
        yield url
    finally:
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def held(runner: Runner, run_id: str, *, expires: datetime, seen: datetime) -> None:
    """A running run held by a worker on another host, its lease and heartbeat as given."""
    assert store.create_run(
        runner.engine, run_id=run_id, agent=None, agent_name=None, release=None, task="t",
        budgets=BUDGETS, clock=runner.clock,
    )  # fmt: skip
    lease = {"lease_owner": "elsewhere:1:1", "lease_epoch": 1, "lease_expires_at": expires}
    with runner.engine.begin() as connection:
        connection.execute(
            update(runs)
            .where(runs.c.id == run_id)
            .values(status="running", leased_at=seen, last_seen_at=seen, **lease)
        )


@pytest.mark.postgres
def test_the_page_and_the_cli_judge_runs_on_the_databases_clock(skewed_url: str) -> None:
    here = datetime.now(UTC)
    with Runner(skewed_url) as runner:
        # The injection took: the server's clock is an hour ahead of this host's.
        assert abs((runner.now() - here) - AHEAD) < timedelta(minutes=1)
        server = here + AHEAD
        # Live on this host's clock, expired half an hour ago on the server's: stalled.
        held(runner, "clk-expired", expires=here + AHEAD / 2, seen=server - timedelta(minutes=5))
        # Live on both clocks.
        held(runner, "clk-live", expires=server + AHEAD, seen=server - timedelta(minutes=5))

    with TestClient(make_app(skewed_url), base_url=BASE) as client:
        expired = client.get("/runs/clk-expired").text
        assert 'class="status s-stalled">stalled<' in expired
        assert "(expired or dead)" in expired
        live = client.get("/runs/clk-live").text
        assert 'class="status s-running">running<' in live
        assert "(live)" in live
        listed = client.get("/").text
    states = dict(
        re.findall(r'href="/runs/(clk-[a-z]+)".*?class="status s-([a-z]+)"', listed, re.S)
    )
    assert states == {"clk-expired": "stalled", "clk-live": "running"}

    done = CliRunner().invoke(main, ["list", "--db", skewed_url])
    assert done.exit_code == 0, done.output
    lines = {line.split()[0]: line for line in done.output.splitlines() if "clk-" in line}
    assert "stalled" in lines["clk-expired"] and "stalled" not in lines["clk-live"]
    # Seen five minutes ago on the server's clock (this host's would say "just now").
    assert re.search(r"seen 5m0\ds ago", lines["clk-live"]), lines["clk-live"]
    shown = CliRunner().invoke(main, ["show", "clk-expired", "--db", skewed_url])
    assert shown.exit_code == 0, shown.output
    assert "stalled (its lease expired" in shown.output
    assert re.search(r"last seen 5m0\ds ago", shown.output), shown.output


@pytest.mark.postgres
def test_runner_list_by_state_judges_stalled_runs_on_the_databases_clock(
    skewed_url: str,
) -> None:
    """Issue 29: the stalled listing (`runner list --status stalled`, `--status running`)
    reading this host's clock survived the suite, whose clocks always agreed."""
    here = datetime.now(UTC)
    server = here + AHEAD
    with Runner(skewed_url) as runner:
        held(runner, "stl-expired", expires=here + AHEAD / 2, seen=server - timedelta(minutes=5))
        held(runner, "stl-live", expires=server + AHEAD, seen=server - timedelta(minutes=5))
        by_api = {
            state: [row.id for row in runner.list(state=state) if row.id.startswith("stl-")]
            for state in ("stalled", "running")
        }
    assert by_api == {"stalled": ["stl-expired"], "running": ["stl-live"]}
    for state, wanted in (("stalled", "stl-expired"), ("running", "stl-live")):
        done = CliRunner().invoke(main, ["list", "--status", state, "--db", skewed_url])
        assert done.exit_code == 0, done.output
        listed = [line.split()[0] for line in done.output.splitlines() if "stl-" in line]
        assert listed == [wanted], (state, done.output)
