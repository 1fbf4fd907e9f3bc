"""The service: runs driven on the step machine, in memory or on the store.

`run_agent` and `agent_loop` (the two seed contracts, in memory), the `Runner` (durable runs:
run, submit, resume, cancel, answer, list), the worker that serves the queue, and the
operations on runs (`fork`, `replay`, `revival`, `submissions`, `conflicts`, `delays`). What
the faces show of runs and the database comes from here too (`overview`, `values`,
`database`): the faces never reach into the store.

It may import: `runner.core`, `runner.models`, `runner.tracing`, `runner.store` and the shared
leaves.
"""
