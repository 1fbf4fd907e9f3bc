"""The SQL store: all of runner's SQL, on SQLite and PostgreSQL, behind the store's
protocol (runner.store).

The store that provides the protocol on a database (`store`, over the modules below). The
schema declared once (`schema`), every dialect difference in one object (`backend`), engines
and migrations (`database`), URLs and their secrets (`urls`), a worker's pool size
(`pool_size`). Runs as stored (`runs`) and changed outside the loop (`run_changes`:
revivals, forks); the reads written once as plain SQL over a driver connection (`reads`,
`run_states`, `plain_connection`; libpq itself through ctypes for them, `libpq`; `runner
list` and `show` read so, `plain_overview`). Leases and claims (`leases`; a run inserted
already claimed, `fresh_claims`; the run a claim takes next, `runnable`; the heartbeat's
renewals, `heartbeat` and `lease_renewals`). The journal: its fenced writes (`fencing`,
`driver`, `journal`; the fenced inserts and the values they bind, `fenced_inserts`; a write
of one entry alone, `write_alone`; which failures are worth a retry, `database_failures`; SQLite's
in-process write lock and the kept connection, `writer`; the journal writes of runs in
flight sharing one transaction or statement, `group_commit`; many rows bound as one JSON
text on PostgreSQL, `json_batches`). Answers to waiting runs (`approvals`), messages sent to
runs (`messages`), trees of runs (`children`: child runs, their spend charged up the tree,
their ends delivered; a parent's park with its first child in one statement, `parking`; a
parent answered and claimed back by its last child's end, `take_back`; what a tree has left
to spend, `tree_budget`), queues (`queues`) and
their retention (`retention`), schedules (`schedules`), releases (`releases`: a queue's
policy for runs of older releases in a claim, a failed check's parking, each release's
runs), provider limits and what each charged (`limits`), reserving from them and parking a
run that must wait (`reservations`), a worker's grants of a busy limit's calls (`grants`), a
call's reservation and settle riding in its run's journal writes (`limit_rides`; on
PostgreSQL in the journal write's own statement, `reserving`), waking the runs in a limit's
line when a call ends (`limit_line`), wake-ups (`wakeup`), the one watcher that wakes a
process's followers of runs (`follows`), the pieces of model responses in flight (`deltas`),
scores of runs with their scorers' claims (`scores`), and cancelled runs whose holder is
gone finished (`cancels`). It knows no policy of the loop, no command line and no page.
Also: the codecs each engine writes payloads through (`payloads`) and the blobs their rows
name (`blob_references`), and their key rotation (`key_rotation`); the journal's monthly
partitions on PostgreSQL (`partitions`).

It may import: `runner.core`, `runner.store` and the shared leaves.
"""
