"""The step machine: the one loop every run goes through, in memory or durable.

What the model asked for (`actions`), the tools and how they are called (`tools`, `calls`),
the limits of a run (`budgets`) and why it stopped (`stop_reasons`), the journal protocol
the loop writes through and the in-memory journal (`journal`), what a resumed loop takes
back from its journal (`resume_cursor`), waits for a person (`waiting`, `ask`), what the
model is shown (`context`), time as a parameter (`clock`), and the loop itself: the order
of a step (`loop`), the model call with its retries and wrap-up (`model_call`), running a
step's tool calls and settling them after a crash (`tool_runs`), and the stop rules with
the counters they read (`stop_rules`). It knows no SQL, no command line, no provider and
no tracing library.

It may import: only the shared leaves (`runner.errors`, `runner.defaults`, `runner.lazy`).
"""
