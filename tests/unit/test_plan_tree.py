"""The planner's tree as PostgreSQL serializes it: nodes, lists, escaped strings."""

from __future__ import annotations

import pytest

from runner.history.plan_tree import Node, called, parse

# A PLANNEDSTMT cut down: a target whose name looks like a field and a number, an
# operator, a function call, a sort, and a constant's bytes.
DUMP = (
    r"{PLANNEDSTMT :commandType 1 :planTree {SORT :targetlist ({TARGETENTRY :expr "
    r"{OPEXPR :opno 531 :opfuncid 157 :args ({FUNCEXPR :funcid 2626 :args ({CONST "
    r":consttype 701 :constvalue 8 [ 0 0 0 0 0 0 -16 63 ]})})} :resname :funcid "
    r":ressortgroupref 0} {TARGETENTRY :expr {VAR :varno 1} :resname \1234\ \(x\)}) "
    r":sortOperators 664 1754 :lefttree <>} :rtable ({RTE :eref {ALIAS :aliasname it's "
    r':colnames ("a" "\2880")}})}'
)


def test_every_function_and_operator_is_found_by_its_field() -> None:
    found = called(parse(DUMP))
    assert found.functions == {157, 2626}
    assert found.operators == {531, 664, 1754}


def test_strings_are_never_numbers_or_brackets() -> None:
    (statement,) = parse(DUMP)
    assert isinstance(statement, Node) and statement.kind == "PLANNEDSTMT"
    sort = statement.fields["planTree"][0]
    assert isinstance(sort, Node) and sort.kind == "SORT"
    first, second = sort.fields["targetlist"][0]  # type: ignore[index, misc]
    assert second.fields["resname"] == [r"\1234\ \(x\)"]  # one token, escapes kept
    assert first.fields["resname"] == []  # `:funcid` as a name opened a field of its own
    assert first.fields["funcid"] == []


@pytest.mark.parametrize("text", ["{A :b (1 2}", "{A :b 1}}", "(1"])
def test_an_unbalanced_tree_is_an_error(text: str) -> None:
    with pytest.raises(ValueError):
        parse(text)


def test_the_deadline_is_looked_at_while_parsing() -> None:
    looks: list[int] = []
    parse("(" + " 1" * 50_000 + ")", lambda: looks.append(1))
    assert len(looks) >= 10


def test_a_constants_bytes_are_one_token_however_many() -> None:
    datum = "[ 96 0 0 0" + " 121" * 100_000 + "\n121 ]"  # the server wraps its lines
    (node,) = parse(f"{{CONST :constlen -1 :constvalue 100005 {datum} :location 7}}")
    assert isinstance(node, Node)
    assert node.fields["constvalue"] == ["100005", datum]
    assert node.fields["location"] == ["7"]


def test_a_string_that_only_starts_like_bytes_is_a_word() -> None:
    (node,) = parse(r"{ALIAS :aliasname [ :colnames ([x] [ 1 ]y) :funcid 12}")
    assert isinstance(node, Node)
    assert node.fields["aliasname"] == ["["]
    assert node.fields["colnames"] == [["[x]", "[", "1", "]y"]]
    assert called([node]).functions == {12}
