"""What a tree of runs looks like, printed: `show`'s parent and children lines, the tree
`show --tree` and `list --tree` draw (each run's state, stop reason and spend), and its JSON.
Written through `runner.cli.output`, the one way out (rich's Tree draws it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from runner.cli.output import Branch, Cell, cost_text, plural, state_style, tree

if TYPE_CHECKING:
    from runner.service.values import RunRow, RunTree

# `show` names at most this many children on its header line; `show --tree` draws them all.
_NAMED = 5


def family_lines(tree_: RunTree, row: RunRow) -> list[str]:
    """`show`'s lines on the run's place in its tree: its parent (and root, when another
    run), and its children with their states. None for a run alone in its tree."""
    lines: list[str] = []
    if row.parent_id:
        lines.append(f"parent    run {row.parent_id}" + _call(row))
        root = row.root_id or row.id
        if root != row.parent_id:
            lines.append(f"root      run {root}")
    node = tree_.find(row.id)
    children = node.children if node is not None else ()
    if children:
        named = ", ".join(f"{child.row.id} ({_status(child.row)})" for child in children[:_NAMED])
        more = len(children) - _NAMED
        if more > 0:
            named += f", and {more} more"
        lines.append(f"children  {len(children)}: {named}")
    if children or row.parent_id:
        lines.append(f"tree      {_spend(tree_)} (runner show {row.id} --tree)")
    return lines


def tree_text(tree_: RunTree, focus: str | None = None) -> str:
    """The tree drawn from its root: each run's id, agent, state and stop reason, its own
    spend, and the step of its parent's call that started it; the tree's total last.
    `focus`: the run asked for, marked."""
    drawn = tree(_branch(tree_, focus))
    total = f"tree: {_spend(tree_)}"
    if tree_.cut:
        total += f" (the first {tree_.runs} read; there are more)"
    return drawn + "\n" + total


def trees_text(trees: list[RunTree]) -> str:
    """`list --tree`: each tree drawn, a blank line between them."""
    if not trees:
        return "no runs"
    return "\n\n".join(tree_text(each) for each in trees)


def tree_json(tree_: RunTree) -> dict[str, Any]:
    """The tree as nested objects: each run's place, state, stop and own spend, and the
    tree's total on the root."""
    data = _node_json(tree_)
    data["tree"] = {
        "runs": tree_.runs, "steps": tree_.steps, "tokens": tree_.tokens, "cost": tree_.cost,
        "cut": tree_.cut,
    }  # fmt: skip
    return data


def _node_json(tree_: RunTree) -> dict[str, Any]:
    row = tree_.row
    return {
        "id": row.id,
        "agent_name": row.agent_name,
        "status": str(row.status),
        "state": row.state or str(row.status),
        "stop_reason": row.stop_reason,
        "steps": row.steps,
        "tokens": row.tokens,
        "cost": row.cost,
        "parent_id": row.parent_id,
        "parent_call_key": row.parent_call_key,
        "children": [_node_json(child) for child in tree_.children],
    }


def _branch(tree_: RunTree, focus: str | None) -> Branch:
    row = tree_.row
    state = row.state or str(row.status)
    label: list[Cell] = [
        (row.id, "bold") if row.id == focus else row.id,
        row.agent_name or row.agent or "-",
        (_status(row), state_style(state, row.stop_reason)),
        f"{plural(row.steps, 'step')}, {plural(row.tokens, 'token')}, "
        f"{cost_text(row.cost, row.tokens)}",
    ]
    if row.parent_call_key:
        label.append(f"called at step {_step_of(row.parent_call_key)}")
    if row.id == focus and (tree_.children or row.parent_id):
        label.append("<- this run")
    return Branch(label, [_branch(child, focus) for child in tree_.children])


def _status(row: RunRow) -> str:
    state = row.state or str(row.status)
    return state + (f": {row.stop_reason}" if row.stop_reason else "")


def _spend(tree_: RunTree) -> str:
    return (
        f"{plural(tree_.runs, 'run')}, {plural(tree_.steps, 'step')}, "
        f"{plural(tree_.tokens, 'token')}, {cost_text(tree_.cost, tree_.tokens)}"
    )


def _call(row: RunRow) -> str:
    key = row.parent_call_key
    return f", started by its call {key} (step {_step_of(key)})" if key else ""


def _step_of(key: str) -> str:
    """The step (`3`, or `3.2` for a step's second call) of a call key `<run>-<step>`."""
    return key.rsplit("-", 1)[-1]
