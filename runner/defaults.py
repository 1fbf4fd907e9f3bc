"""The defaults a user meets in `runner --help`: where the database is, how long a lease
lasts, how many takeovers a run survives.

Constants alone, so that the CLI can show them without loading a database library.
"""

from __future__ import annotations

DEFAULT_URL = "sqlite:///runner.db"
URL_VARIABLE = "RUNNER_DATABASE_URL"
# The PostgreSQL server itself when the database URL is a pooler (PgBouncer in transaction
# mode): what needs a session of its own (LISTEN) connects there (`--direct-db`).
DIRECT_URL_VARIABLE = "RUNNER_DIRECT_DATABASE_URL"
# A streaming replica that history's reads go to (`--read-db`): runner sql, stats, export,
# the page's and the API's reads.
READ_URL_VARIABLE = "RUNNER_READ_DATABASE_URL"
# The queue of a run submitted without one.
DEFAULT_QUEUE = "default"
# How long an SQLite connection waits for another's lock before it gives up.
BUSY_TIMEOUT_MS = 30_000
DEFAULT_LEASE_SECONDS = 30.0
# How many takeovers in a row without a new journal entry before a run stops with crash_loop.
DEFAULT_MAX_RESUMES = 3
# `runner ui`: where the page listens, and the variable that holds its token.
UI_HOST = "127.0.0.1"
UI_PORT = 8780
UI_TOKEN_VARIABLE = "RUNNER_UI_TOKEN"

# Seconds one model call may take in all, unless the agent or the run says otherwise.
DEFAULT_MODEL_TIMEOUT = 600.0

# Seconds a `runner sql` query may run unless --timeout says otherwise.
DEFAULT_QUERY_TIMEOUT = 30.0

# The longest span of time runner takes (a budget, a timeout, a delay): about 31 years, far
# past any budget a run needs and far inside what a timestamp column holds (year 9999).
LONGEST_SECONDS = 1e9
# The longest agent name or release label: the columns hold 200 characters.
LONGEST_LABEL = 200
