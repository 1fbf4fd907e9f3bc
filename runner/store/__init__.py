"""The store's contract: what the service asks of a store, and what every store shares.
No SQL: the SQL store is runner.sql, the in-memory one runner.testing.

The protocol the service reaches storage through (`protocol`), the rows it hands back (`rows`),
the rules both stores keep, each written once (`rules`: queues, retention, leases, provider
limits; a schedule's own, `cron`; a score's and its scorer's claim, `scores`; which worker may
take a run of which release, `releases`), a follower's registration (`follow`), the thread that
writes a process's deltas in batches (`delta_writer`), which process owns a lease (`owner`) and
whether a run's worker lives (`liveness`), a tree arranged from its rows (`run_trees`), what
`runner list` and `show` show (`overview`), and what a reader makes of a run's rows, its open
waits and its result (`run_views`).
Payloads: the codec seam every payload crosses (`payloads`; a codec's protocol, `codec`),
the codecs a store is configured with (`payload_config`), encryption with a key ring
(`encryption`), offload (`offload`) to blob stores (`blobs`), and the sweep of blobs no row
names (`blob_sweep`).

It may import: `runner.core` and the shared leaves.
"""
