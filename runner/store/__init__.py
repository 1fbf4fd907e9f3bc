"""The store: all of runner's SQL, on SQLite and PostgreSQL.

What the service asks of a store (`protocol`), the rules both stores keep (`rules`), and the
SQL store that provides it (`sql_store`). The schema declared once (`schema`), every dialect
difference in one object (`backend`), engines and migrations (`database`), URLs and their
secrets (`urls`), runs as stored (`runs`, `rows`), cancelled if nobody holds them
(`cancels`) and changed outside the loop
(`run_changes`: revivals, forks), the reads written once as plain SQL over a driver
connection (`reads`, `run_states`, `plain_connection`), leases and claims (`leases`; the run
a claim takes next, `runnable`; the heartbeat's renewals, `heartbeat` and `lease_renewals`;
`owner`, `liveness`), the fenced journal writes (`fencing`, `driver`, `sql_journal`; which
failures are worth a retry, `failures`; SQLite's in-process write lock and the kept
connection, `writer`; the journal writes of runs in flight sharing one transaction or
statement, `group_commit`), a worker's pool size (`pool_size`), answers to waiting runs
(`approvals`), messages sent to runs (`messages`), trees of runs (`children`: child runs,
their spend charged up the tree, their ends delivered; `tree_budget`: a child's model call
held against its ancestors' budgets before it starts; `run_trees`: a tree arranged from its
rows), queues (`queues`) and their retention (`retention`), schedules (`schedules`),
provider limits and what each charged (`limits`), reserving from them and parking a run that
must wait (`reservations`), the runs waiting for a slot woken when a call ends
(`limit_line`), wake-ups (`wakeup`), the one watcher that wakes a process's followers of
runs (`follows`; a follower's registration, `follow`), and the pieces of model responses in
flight (`deltas`, written in batches by `delta_writer`). It speaks SQL for the step
machine's journal protocol and knows no policy of the loop, no command line and no page.

It may import: `runner.core` and the shared leaves.
"""
