"""common/text.py: what every message quoting the model or a server goes through."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from minimal_agent.common import text


def escaped_whole_then_cut(given_text: str, width: int) -> str:
    """one_line as it was: the whole text escaped, then cut."""
    flat = text.visible(" ".join(given_text.split()))
    if len(flat) <= width and text.columns_of(flat) <= width:
        return flat
    return "".join(text.fitting(list(flat[:width]), width - 3)) + "..."


ANY_TEXT = st.text(st.characters(codec="utf-8") | st.sampled_from("\x1b\r\n\t\u202e\u3000中😀"))


@given(ANY_TEXT, st.integers(3, 120))
def test_one_line_escapes_only_what_shows_yet_says_the_same(given_text, width):
    assert text.one_line(given_text, width) == escaped_whole_then_cut(given_text, width)


@given(ANY_TEXT, st.sampled_from(["", "\n", "\n\t"]))
def test_visible_leaves_no_character_that_acts_on_a_terminal(given_text, keep):
    shown = text.visible(given_text, keep)
    assert all(c.isprintable() or c in keep for c in shown)
    one_by_one = (c if c.isprintable() or c in keep else repr(c)[1:-1] for c in given_text)
    assert shown == "".join(one_by_one)


def test_a_ten_megabyte_argument_is_cut_to_the_width():
    huge = "\x1b[31m" * 2_000_000
    assert text.one_line(huge, 20) == escaped_whole_then_cut(huge[:1000], 20)
    assert len(text.short_arguments('{"content": "' + "\\u001b" * 1_000_000 + '"}')) < 120
