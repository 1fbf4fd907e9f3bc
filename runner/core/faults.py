"""Named fault points: places where a test can have this process SIGKILLed.

Arm with RUNNER_FAULT=name (the first time the point is reached) or name@N (the N-th time).
Unarmed, a fault point is one set lookup: nothing in production pays for them.
"""

from __future__ import annotations

import os
import signal
import threading

POINTS = frozenset(
    {
        "before_action_commit",
        "after_action_commit",
        "during_tool",
        "after_tool_return",
        "before_observation_commit",
        "after_observation_commit",
        "before_final_commit",
        "after_final_commit",
        # A run that `Runner.run` starts: its row (claimed) and its task committed, its loop
        # not begun (runner.sql.fresh_claims).
        "after_run_start",
        # People in the loop: the step's calls and their waits about to be recorded (with
        # the park) and recorded (the run is waiting), an answer recorded (in the process
        # that answered), an approved call about to run after a resume.
        "before_wait_commit",
        "after_wait_commit",
        "after_answer_commit",
        "before_approved_call",
        # A call of a tool declared `mark_start`: its start mark about to be written, and
        # written (the tool has not been called yet).
        "before_start_commit",
        "after_start_commit",
        # Trees of runs: a child's end about to be delivered to its parent (the answer
        # written, its transaction not committed), and delivered.
        "before_delivery_commit",
        "after_delivery_commit",
        # Messages: the worker's delivery into the journal about to commit, and committed;
        # the sender's message written (its transaction not committed), and committed (in
        # the process that sent it, before it reports it).
        "before_message_commit",
        "after_message_commit",
        "before_message_sent",
        "after_message_sent",
        # SQLite's group commit: a transaction holding the writes of two runs or more, its
        # statements run, its COMMIT not yet (runner.sql.group_commit).
        "before_group_commit",
        # A model call's reservation from its provider limit committed, the call not made:
        # a crash here must leak nothing past the lease (runner.core.limits).
        "after_limit_reserve",
        # A child run's model call held against its tree's budget (committed), the call not
        # made: the hold must neither block the tree for ever nor let it overspend.
        "after_tree_hold",
        # A summary of older steps (runner.core.compaction): its model call answered, its
        # entry not yet committed; and committed, the step's model call not yet made.
        "before_compaction_commit",
        "after_compaction_commit",
        # Payloads: an offloaded payload's blob written (durably), the row that names it
        # not yet; a key rotation's batch re-encrypted, not yet committed.
        "after_blob_write",
        "before_rotation_commit",
        # Releases: a worker's check of a run of another release has its verdict (a replay
        # of the run's journal), not yet acted on (run on, or parked).
        "during_release_check",
        # Scores: a scorer returned, its score not yet kept; and kept (runner.service.scoring).
        "before_score_commit",
        "after_score_commit",
    }
)

_armed: dict[str, int] = {}
# The calls of one step reach their fault points from their own threads: count them one
# at a time, so `name@N` is the N-th arrival exactly.
_counting = threading.Lock()
_spec = os.environ.get("RUNNER_FAULT", "")
if _spec:
    _name, _, _count = _spec.partition("@")
    if _name not in POINTS:
        raise SystemExit(f"RUNNER_FAULT names no fault point: {_name!r} (known: {sorted(POINTS)})")
    _armed[_name] = int(_count or 1)


def fault(name: str) -> None:
    """Kill this process right here if a test armed `name` (and it is its turn)."""
    if name not in _armed:
        return
    with _counting:
        _armed[name] -= 1
        due = _armed[name] <= 0
    if due:
        os.kill(os.getpid(), signal.SIGKILL)
