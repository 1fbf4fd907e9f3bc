"""The one way out (runner.cli.output): table layout, values as text, and styles only on a
terminal."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runner.cli import output, report_output


@pytest.fixture(autouse=True)
def plain_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("FORCE_COLOR", "NO_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
    monkeypatch.setenv("COLUMNS", "20")  # no table may be wrapped to the terminal's width


def test_columns_are_two_spaces_apart_and_lines_end_without_spaces() -> None:
    shown = output.table(["release", "runs", "x"], [["1.0", "20", ""], ["1.10", "5", "a"]])
    assert shown.splitlines() == ["release  runs  x", "1.0      20", "1.10     5     a"]


def test_right_aligned_cells_under_a_left_or_a_right_header() -> None:
    rows = [["a", "1000"], ["b", "7"]]
    assert output.table(["k", "n"], rows, right=[1]) == "k  n\na  1000\nb     7"
    assert output.table(["k", "n"], rows, right=[1], right_headers=[1]) == (
        "k     n\na  1000\nb     7"
    )


def test_a_wide_table_is_never_wrapped_nor_cut() -> None:
    wide = "w" * 300
    shown = output.table(["a", "b"], [[wide, "end"]])
    assert shown.splitlines()[1] == f"{wide}  end"


def test_cells_are_text_not_markup() -> None:
    shown = output.table(["a"], [["[bold]x[/bold] :smile:"], ["tab\there"]])
    assert shown.splitlines()[1:] == ["[bold]x[/bold] :smile:", "tab here"]


def test_no_escape_codes_when_stdout_is_not_a_terminal() -> None:
    # pytest captures stdout: like a pipe, a file or click's CliRunner.
    assert "\x1b" not in output.table(["a", "b"], [["1", "2"]])


def test_a_terminal_gets_a_bold_header_and_plain_cells(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FORCE_COLOR", "1")  # rich's way to say: this is a terminal
    shown = output.table(["a", "b"], [["1", "2"]]).splitlines()
    assert shown[0] == "\x1b[1ma\x1b[0m  \x1b[1mb\x1b[0m"
    assert shown[1] == "1  2"


def test_a_dumb_terminal_gets_no_styles_and_the_whole_width(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.setenv("TERM", "dumb")
    wide = "w" * 300
    assert output.table(["a", "b"], [[wide, "end"]]) == f"a{' ' * 301}b\n{wide}  end"


def test_values_as_text() -> None:
    moment = datetime(2026, 11, 2, 9, 30, tzinfo=UTC)
    assert [
        output.text(v)
        for v in ("é", None, True, 0.1 + 0.2, 7, {"city": "Zürich"}, [1], moment, b"\x00\xff")
    ] == [
        "é",
        "null",
        "true",
        "0.3",
        "7",
        '{"city": "Zürich"}',
        "[1]",
        "2026-11-02 09:30:00+00:00",
        "00ff",
    ]
    assert output.text(0.1 + 0.2, exact=True) == "0.30000000000000004"


def test_cut_keeps_one_line_of_at_most_the_width() -> None:
    assert output.cut("a\r\nb", 10) == "a  b"
    assert output.cut("x" * 11, 10) == "x" * 7 + "..."
    assert output.cut("x" * 10, 10) == "x" * 10


def test_query_table_aligns_numbers_and_counts_rows() -> None:
    assert report_output.query_table([], iter([])) == "(no result rows)"
    assert report_output.query_table(["n"], iter([])) == "n\n(0 rows)"
    rows = iter([("a", 1, None), ("bb", None, 2.5), ("c", 300, True)])
    assert report_output.query_table(["t", "n", "f"], rows).splitlines() == [
        "t   n    f",
        "a     1",
        "bb        2.5",
        "c   300  true",
        "(3 rows)",
    ]


def test_printable_escapes_what_a_terminal_would_obey() -> None:
    assert output.printable("a\x1b[2Jb\x07\r\x00\x7f\x9b\u202e") == (
        "a\\x1b[2Jb\\x07\\r\\x00\\x7f\\x9b\\u202e"
    )
    assert output.printable("tab\tand\nnewline stay, é and 日本 too") == (
        "tab\tand\nnewline stay, é and 日本 too"
    )
    once = output.printable("\x1b]0;title\x07")
    assert output.printable(once) == once  # escaping twice changes nothing
    assert output.cut("done\rX", 20) == "done\\rX"  # a lone carriage return is shown


# -- the plain table: rich's layout, without rich's console, where no style is shown --------

# Text a cell may hold: ASCII, wide (CJK, emoji) and zero-width characters (combining marks,
# a zero-width joiner), spaces at either end, control characters (escaped), a tab (a space).
_CELL_TEXT = st.one_of(
    st.text(alphabet=st.sampled_from(["a", "Z", "7", " ", "-", "\x1b", "\t", "\r", "\x7f"]),
            max_size=12),
    st.text(alphabet=st.sampled_from(["a", " ", "é", "漢", "🙂", "\u0301", "\u200d", "\u202e",
                                      "\t", "\n"]), max_size=12),
)  # fmt: skip
_CELL = st.one_of(_CELL_TEXT, st.tuples(_CELL_TEXT, st.sampled_from(["", "green", "bold red"])))


@st.composite
def _tables(draw: st.DrawFn) -> tuple[list[str], list[list[output.Cell]], set[int], set[int]]:
    columns = draw(st.integers(min_value=1, max_value=5))
    header = draw(st.lists(_CELL_TEXT.filter(lambda t: "\t" not in t), min_size=columns,
                           max_size=columns))  # fmt: skip
    rows = draw(st.lists(st.lists(_CELL, min_size=columns, max_size=columns), max_size=6))
    right = draw(st.sets(st.integers(min_value=0, max_value=columns - 1)))
    right_headers = draw(st.sets(st.integers(min_value=0, max_value=columns - 1)))
    return header, rows, right, right_headers


@settings(max_examples=400, deadline=None)
@given(_tables())
def test_a_table_where_no_style_is_shown_is_what_rich_prints(
    table: tuple[list[str], list[list[output.Cell]], set[int], set[int]],
) -> None:
    header, rows, right, right_headers = table
    assert output._plain()  # stdout is pytest's capture: not a terminal
    by_rich = output._rich_table(header, rows, right, right_headers)
    assert output.table(header, rows, right=right, right_headers=right_headers) == by_rich
    plain = output._plain_table(header, rows, right, right_headers)
    assert plain is None or plain == by_rich
    cells = [*header, *(c if isinstance(c, str) else c[0] for row in rows for c in row)]
    if all(cell.isascii() and "\n" not in cell for cell in cells):
        assert plain is not None  # a table of ASCII cells is laid out without rich


@pytest.mark.parametrize(
    ("environment", "plain"),
    [({}, True), ({"FORCE_COLOR": "1"}, False), ({"FORCE_COLOR": ""}, True),
     ({"TTY_COMPATIBLE": "1"}, False), ({"TTY_COMPATIBLE": "0"}, True)],
)  # fmt: skip
def test_plain_only_where_rich_would_see_no_terminal(
    monkeypatch: pytest.MonkeyPatch, environment: dict[str, str], plain: bool
) -> None:
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    assert output._plain() is plain
    if plain:
        assert not output._console().is_terminal  # rich agrees


def test_cells_of_several_lines_are_left_to_rich() -> None:
    shown = output.table(["a", "b"], [["one\ntwo", "x"]])
    assert shown == output._rich_table(["a", "b"], [["one\ntwo", "x"]], (), ())
    assert shown.splitlines() == ["a    b", "one  x", "two"]
