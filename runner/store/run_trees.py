"""Trees of runs: a root and the child runs its calls started, arranged from their rows.

A child run names its parent (`parent_id`) and its tree's root (`root_id`, a root's own
id), so a whole tree is one read of the index on `root_id` (`reads.tree_runs`) and its shape
comes from the parent links here, with no recursive query. A fork is no part of it: a fork
is a root of its own (`forked_from_id` is another relation).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from runner.store.rows import RunRow

# At most this many runs of one tree are read (`runner show --tree`, the page): a tree
# larger than that is drawn in part, its oldest runs first, and says so (`cut`).
TREE_LIMIT = 2000


@dataclass(frozen=True)
class RunTree:
    """A run and the runs its calls started, each a tree too, oldest first. `cut`: on the
    root, that the tree has more runs than were read (TREE_LIMIT)."""

    row: RunRow
    children: tuple[RunTree, ...] = ()
    cut: bool = False

    def walk(self) -> Iterator[RunTree]:
        """This tree and every tree below it, parents before their children."""
        yield self
        for child in self.children:
            yield from child.walk()

    def find(self, run_id: str) -> RunTree | None:
        """The subtree of the run `run_id`, if it is in this tree."""
        return next((tree for tree in self.walk() if tree.row.id == run_id), None)

    @property
    def runs(self) -> int:
        return sum(1 for _ in self.walk())

    @property
    def steps(self) -> int:
        """Steps taken by every run of the tree, each its own (so far, when unfinished)."""
        return sum(tree.row.steps for tree in self.walk())

    @property
    def tokens(self) -> int:
        return sum(tree.row.tokens for tree in self.walk())

    @property
    def cost(self) -> float:
        return sum(tree.row.cost for tree in self.walk())


def tree_of(rows: Sequence[RunRow], root_id: str, *, cut: bool = False) -> RunTree:
    """The tree of `rows` (runs of one tree, oldest first) rooted at `root_id`. A run whose
    parent is not among them (pruned, or past the limit read) hangs from the root, so no
    run read is left out; a root that is gone itself is replaced by the oldest run read."""
    by_parent: dict[str | None, list[RunRow]] = {}
    ids = {row.id for row in rows}
    root = next((row for row in rows if row.id == root_id), None)
    if root is None:
        if not rows:
            raise ValueError(f"no run of the tree rooted at {root_id}")
        root = rows[0]
    for row in rows:
        if row.id == root.id:
            continue
        parent = row.parent_id if row.parent_id in ids else root.id
        by_parent.setdefault(parent, []).append(row)

    def grown(row: RunRow) -> RunTree:
        return RunTree(row, tuple(grown(child) for child in by_parent.get(row.id, [])))

    tree = grown(root)
    return RunTree(tree.row, tree.children, cut=cut)
