"""The functions a PostgreSQL plan calls, read from the planner's own tree.

EXPLAIN's JSON is a tree of plan nodes whose expressions are text (`pg_sleep('1'::double
precision)` in an "Output" or a "Filter"): finding the calls in it means reading SQL
text back, which a quoted alias such as `"it's"` confused, and which misses a function
called through an operator. The planner's tree itself (`debug_print_plan`, sent to the
client as a LOG message) names every function by its oid: a function call's `funcid`, an
operator's `opfuncid`, an aggregate's `aggfnoid`, a window function's `winfnoid`, and the
operators a sort, a group or a hash uses. This module parses that serialization into
nodes and lists and walks it; it reads no SQL.

The serialization (PostgreSQL's outfuncs.c) is a sequence of tokens: `{NAME :field value
... }` for a node, `( ... )` for a list, `<>` for NULL, words otherwise; a backslash
escapes the next character (a string that starts with a digit, a quote or `<` has one in
front, so a string is never read as a number).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

# One token: a constant's bytes (`[ 0 0 -16 63 ]`, outDatum's form), a bracket, or a run
# of other characters (a backslash takes the next one with it). A constant's bytes are one
# token because the planner folds a constant expression into megabytes of them
# (`repeat('y', 16777217)`: 16 million tokens, 13 s of parsing); they hold only numbers,
# never a function. A string that starts with `[` and is not such a run of numbers is read
# as a word, as before.
_TOKEN = re.compile(r"\[(?:\s+-?\d+)*\s+\](?=[\s(){}]|$)|[(){}]|(?:\\.|[^\s(){}\\])+", re.DOTALL)

# Fields that hold a function's oid, and fields that hold operators' oids (an operator
# runs its function, pg_operator.oprcode).
FUNCTION_FIELDS = frozenset(
    {
        "funcid",  # FuncExpr, a function scan's function, a cast through a function
        "opfuncid",  # OpExpr, DistinctExpr, NullIfExpr, ScalarArrayOpExpr
        "hashfuncid",  # ScalarArrayOpExpr hashed
        "negfuncid",  # ScalarArrayOpExpr hashed, NOT IN
        "aggfnoid",  # Aggref
        "winfnoid",  # WindowFunc
        "startInRangeFunc",  # WindowAgg, RANGE offset
        "endInRangeFunc",
    }
)
OPERATOR_FIELDS = frozenset(
    {
        "opno",
        "opnos",  # RowCompareExpr
        "sortOperators",
        "grpOperators",
        "partOperators",
        "ordOperators",
        "uniqOperators",
        "dupOperators",
        "hashOperators",  # Memoize
        "hashoperators",  # HashJoin
        "indexorderbyops",
    }
)

# How often the walk looks at the clock (a caller's deadline), in tokens.
_CHECK_EVERY = 4096


@dataclass
class Node:
    """One node of the tree: its type (`FUNCEXPR`) and its fields' values in order."""

    kind: str
    fields: dict[str, list[object]] = field(default_factory=dict)


@dataclass
class Called:
    """The oids a plan names: functions it calls, and operators it applies."""

    functions: set[int] = field(default_factory=set)
    operators: set[int] = field(default_factory=set)


def parse(text: str, tick: Callable[[], object] = lambda: None) -> list[object]:
    """The top-level values of a serialized tree (usually one PLANNEDSTMT node).

    `tick` is called every few thousand tokens: a deadline raises from it. No recursion:
    an expression nested deeper than Python's stack is read as any other.
    """
    top: list[object] = []
    # What each open bracket interrupted: the values being filled, and the node (if any).
    stack: list[tuple[list[object], Node | None]] = []
    values, node = top, None
    named = True  # whether the innermost node has its type yet
    for count, token in enumerate(_tokens(text)):
        if count % _CHECK_EVERY == 0:
            tick()
        if not named and node is not None:
            node.kind, named = token, True
        elif token == "{":
            child = Node("")
            values.append(child)
            stack.append((values, node))
            values, node, named = [], child, False  # values before a first field: none
        elif token == "(":
            items: list[object] = []
            values.append(items)
            stack.append((values, node))
            values, node = items, None
        elif token in ("}", ")"):
            if not stack:
                raise ValueError("unbalanced plan tree")
            values, node = stack.pop()
        elif node is not None and token.startswith(":"):
            values = node.fields.setdefault(token[1:], [])
        else:
            values.append(token)
    if stack:
        raise ValueError("unbalanced plan tree")
    return top


def _tokens(text: str) -> Iterator[str]:
    for match in _TOKEN.finditer(text):
        yield match.group(0)


def called(tree: list[object], tick: Callable[[], object] = lambda: None) -> Called:
    """Every function and operator oid named anywhere in `tree` (nested plans included)."""
    found = Called()
    pending: list[object] = list(tree)
    count = 0
    while pending:
        count += 1
        if count % _CHECK_EVERY == 0:
            tick()
        item = pending.pop()
        if isinstance(item, list):
            pending.extend(item)
        elif isinstance(item, Node):
            for name, values in item.fields.items():
                if name in FUNCTION_FIELDS:
                    found.functions.update(_oids(values))
                elif name in OPERATOR_FIELDS:
                    found.operators.update(_oids(values))
                pending.extend(value for value in values if not isinstance(value, str))
    return found


def _oids(values: list[object]) -> Iterator[int]:
    """The numbers among a field's values: an oid, an array of them (`664 1754`) or an
    oid list (`(o 664 1754)`). An escaped string (`\\1`) is not a number."""
    for value in values:
        if isinstance(value, list):
            yield from _oids(value)
        elif isinstance(value, str) and value.isdigit():
            yield int(value)
