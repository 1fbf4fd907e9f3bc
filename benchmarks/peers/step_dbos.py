"""DBOS on the peers' workload: a workflow looping N agent steps, the model call and the
tool call each a `@DBOS.step()` (two recorded step outputs an agent step).

    python step_dbos.py sqlite|postgresql TARGET N RUNS

SQLite: DBOS's own engine on the file TARGET, every connection put in WAL mode (or the
mode in DBOS_SQLITE_JOURNAL: DELETE is DBOS's own default) and synchronous=FULL (runner's
settings), read back through DBOS's engine. PostgreSQL: DBOS's system database at the
libpq URL TARGET. Runs under the peers' venv (README.md).
"""

from __future__ import annotations

import os
import sys
import uuid
from typing import Any

import sqlalchemy as sa
from sqlalchemy.pool import Pool
from workload import (
    Clock,
    Message,
    emit,
    fake_model,
    fake_tool,
    measure,
    remove_sqlite,
    tool_message,
)

JOURNAL = os.environ.get("DBOS_SQLITE_JOURNAL", "WAL")


def main() -> None:
    backend, target = sys.argv[1], sys.argv[2]
    n, runs = int(sys.argv[3]), int(sys.argv[4])
    if backend == "sqlite":
        remove_sqlite(target)
        url = f"sqlite:///{target}"

        @sa.event.listens_for(Pool, "connect")
        def pragmas(dbapi_conn: Any, record: Any) -> None:
            if type(dbapi_conn).__module__.startswith("sqlite3"):
                dbapi_conn.execute(f"PRAGMA journal_mode={JOURNAL}")
                dbapi_conn.execute("PRAGMA synchronous=FULL")

    else:
        url = target

    from dbos import DBOS, DBOSConfig, SetWorkflowID

    config: DBOSConfig = {"name": "peers-step", "system_database_url": url, "log_level": "WARNING"}
    DBOS(config=config)

    @DBOS.step()
    def model_step(transcript_len: int, i: int) -> Message:
        return fake_model(range(transcript_len), i)

    @DBOS.step()
    def tool_step(call: Message) -> str:
        return fake_tool(call)

    @DBOS.workflow()
    def agent(n_steps: int) -> list[Message]:
        transcript: list[Message] = []
        for i in range(n_steps):
            msg = model_step(len(transcript), i)
            call = msg["tool_calls"][0]
            transcript += (msg, tool_message(call, tool_step(call)))
        return transcript

    DBOS.launch()
    info: dict[str, Any] = {}
    if backend == "sqlite":
        from dbos._dbos import _get_dbos_instance  # its engine: to read the settings back

        engine = _get_dbos_instance()._sys_db.engine
        with engine.connect() as c:
            info = {
                "journal_mode": c.exec_driver_sql("PRAGMA journal_mode").scalar(),
                "synchronous": c.exec_driver_sql("PRAGMA synchronous").scalar(),
            }

    def one_run() -> tuple[float, float]:
        clock = Clock()
        with SetWorkflowID("w-" + uuid.uuid4().hex):
            transcript = agent(n)
        elapsed = clock.since()
        assert len(transcript) == 2 * n
        return elapsed

    result = measure(one_run, n, runs)
    DBOS.destroy()
    emit({"db": backend, "n": n, "runs": runs, "info": info, **result})


if __name__ == "__main__":
    main()
