"""The step machine: the one loop every run goes through, in memory or durable.

The loop itself: the order of a step (`loop`), the thread it runs on so that its model calls
are made inline and still given up in time (`loop_host`), the model call with its retries and
wrap-up (`model_call`), running a step's tool calls and settling them after a crash
(`tool_runs`), the stop rules with the counters they read (`stop_rules`), and how a call in
flight learns its run must stop (`interrupts`) and where the pieces of a streaming response go
while it is in flight (`deltas`). What it works on: what the model asked for (`actions`), a
step's action as journal entries and back (`steps`), the tools and how user code is called
(`tools`, `calls`; a framework's sync functions on threads kept between calls: `kept_threads`;
the one thread that watches every call in flight for a cancel or a pause: `watching`), the tool
listings a run started with (`listings`), agents a new process can rebuild (`agent`), the
limits of a run (`budgets`, `budget_changes`), its running totals (`counters`) and why it
stopped (`stop_reasons`), the quicker making of a step's frozen dataclasses (`frozen`), the
journal protocol and the in-memory journal (`journal`), what a resumed loop takes back from
its journal (`resume_cursor`), waits for a person (`waiting`,
`ask`), sub-agents as child runs and the one budget of their tree (`tree`; in memory, run
inline: `tree_inline`), messages sent to a run (`messages`), the provider limits a model call
reserves from and settles with (`limits`), scorers of finished runs and the model-judged one
(`scoring`), what the model is shown (`context`; summaries of older steps: `compaction`, asked
for and journaled by `compacting`), what the loop tells a tracer (`spans`), the result of a run
(`result`) and where it stands (`status`). Small parts: time as a parameter (`clock`), the one
backoff (`backoff`), run ids (`ids`), text as UTF-8 can carry it (`utf8`), named fault points
for crash tests (`faults`), and seed 004's scripted contract over the loop (`agent_loop`). A
run whose loop is another framework's goes through the journal at each of its model requests
and tool calls (`foreign`; what such a run holds and writes: `foreign_record`; its requests:
`foreign_requests`; its tool calls: `foreign_calls`; the values its glue passes:
`foreign_values`). It knows no SQL, no command line, no provider and no tracing library.

It may import: only the shared leaves (`runner.errors`, `runner.defaults`, `runner.lazy`).
"""
