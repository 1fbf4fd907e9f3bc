"""The service: runs driven on the step machine, in memory or on the store.

`run_agent` and `agent_loop` (the two seed contracts, in memory); the `Runner` (`runner`),
put together from its parts: what they share (`runner_base`), putting runs in the queue
(`submitting`), running and resuming them here (`resuming`), answering waiting runs
(`answering`), sending messages into runs (`messaging`), reading runs and cancelling them
(`inspecting`), following a run's events (`events`) and a tree's (`tree_events`), keeping
schedules (`scheduling`), provider limits (`limiting`), scores of runs, running an agent's
scorers once a run ends (`scoring`), keeping releases apart (`releases`:
a queue's policy for older releases, a worker's check, the replay gate); the `worker` that
serves the queue, with the parts it owns (`claim_pacing`, `claim_execution`, `slot_threads`,
`loaded_agents`, `housekeeping`, `scorer_pool`, `drain_end`, `database_wait`, `worker_log`,
`worker_process`); and the operations on runs (`fork`, `replay`, `revival`, `submissions`,
`conflicts`, `delays`). What the faces show of runs and the database comes from here too
(`overview`, `values`, `database`, and `documents`: the JSON every face gives of runs and
events), and whether a face's host is the machine's own (`loopback`), and the key ring's
operations (`keys`): the faces never reach into the store.

It reaches storage through the store's protocol (`runner.store.protocol`); the one module
that names the SQL store, to open one and for the plain reads of `runner list`, is its door
`database` (tests/unit/test_layers.py holds it).

It may import: `runner.core`, `runner.models`, `runner.tracing`, `runner.store`,
`runner.sql` and the shared leaves.
"""
