"""The action parser and the exact observation strings (passkt.envs.protocol)."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from passkt.envs.protocol import (
    FINAL_NOTICE,
    NO_RESULTS,
    Action,
    budget_line,
    invalid_action_message,
    parse_action,
    render_information,
)
from passkt.envs.retrieval import Hit

VALID = [
    ("<search>Ed Wood</search>", Action("search", "Ed Wood")),
    ("<answer>yes</answer>", Action("answer", "yes")),
    ("I will look it up. <search> Ed Wood </search>", Action("search", "Ed Wood")),
    (
        "<think>who is he?</think>\n<search>Scott Derrickson</search>",
        Action("search", "Scott Derrickson"),
    ),
    # text after the closing tag is ignored (a tokenizer may merge the stop string with it)
    ("<answer>Paris</answer>\n<|im_end|> and more", Action("answer", "Paris")),
    ("<search>a</search><answer>b</answer>", Action("search", "a")),
    # an action inside a think block does not count
    ("<think>maybe <answer>x</answer></think><search>y</search>", Action("search", "y")),
    ("<think>a</think><think>b</think><answer>c</answer>", Action("answer", "c")),
    ("</search> stray closing tag <answer>Björk 東京</answer>", Action("answer", "Björk 東京")),
    ("<search></search>", Action("search", "")),
    ("<answer>  </answer>", Action("answer", "")),
]

INVALID = [
    ("", "the turn is empty"),
    ("   \n", "the turn is empty"),
    ("The answer is Paris.", "no <search> or <answer> tag found"),
    ("<search>Ed Wood", "<search> is never closed with </search>"),
    ("<search>Ed Wood</answer>", "<search> is never closed with </search>"),
    ("<answer>Paris", "<answer> is never closed with </answer>"),
    ("<think>long reasoning <search>x</search>", "<think> is never closed with </think>"),
    ("<search>a <answer>b</answer></search>", "contains another <search> or <answer> tag"),
    ("<search>a <search>b</search>", "contains another <search> or <answer> tag"),
    ("<Search>x</Search>", "no <search> or <answer> tag found"),
    ("< search >x</ search >", "no <search> or <answer> tag found"),
]


@pytest.mark.parametrize(("text", "expected"), VALID)
def test_valid_actions_parse(text: str, expected: Action) -> None:
    assert parse_action(text) == expected


@pytest.mark.parametrize(("text", "error"), INVALID)
def test_invalid_actions_say_why(text: str, error: str) -> None:
    action = parse_action(text)
    assert action.kind == "invalid"
    assert action.content == ""
    assert action.error is not None and error in action.error


def test_non_string_action_is_invalid_not_an_exception() -> None:
    action = parse_action(None)  # type: ignore[arg-type]
    assert action.kind == "invalid"
    assert "must be text" in (action.error or "")


def test_action_is_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        parse_action("<answer>x</answer>").content = "y"  # type: ignore[misc]


_PLAIN = st.text().filter(lambda s: "<" not in s)


@settings(max_examples=300, deadline=None)
@given(prefix=_PLAIN, content=_PLAIN, suffix=st.text(), tag=st.sampled_from(["search", "answer"]))
def test_first_complete_action_wins(prefix: str, content: str, suffix: str, tag: str) -> None:
    action = parse_action(f"{prefix}<{tag}>{content}</{tag}>{suffix}")
    assert action == Action(tag, content.strip())  # type: ignore[arg-type]


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_parser_total_on_any_text(text: str) -> None:
    action = parse_action(text)
    assert action.kind in ("search", "answer", "invalid")
    assert (action.error is None) == (action.kind != "invalid")


def test_information_block_exact_format() -> None:
    hits = [
        Hit("Ed Wood", "Ed Wood was a filmmaker.", 2.0, 4),
        Hit("Tim Burton", "Burton.", 1.0, 0),
    ]
    assert render_information(hits) == (
        "<information>Doc 1 (Title: Ed Wood) Ed Wood was a filmmaker.\n"
        "Doc 2 (Title: Tim Burton) Burton.</information>"
    )
    assert render_information([]) == NO_RESULTS == "<information>No documents found.</information>"


def test_information_block_is_shortened_to_fit() -> None:
    hits = [Hit(f"T{i}", "word " * 1000, 1.0, i) for i in range(3)]
    text = render_information(hits, max_chars=600)
    assert len(text) <= 600
    assert text.startswith("<information>Doc 1 (Title: T0) word")
    assert text.endswith("…</information>")
    assert text.count("\nDoc ") == 2
    assert render_information(hits[:1], max_chars=10_000) == render_information(hits[:1])


def test_messages_name_what_is_expected() -> None:
    message = invalid_action_message("no <search> or <answer> tag found")
    assert message.startswith("Invalid action: no <search> or <answer> tag found. ")
    assert "<search>your query</search>" in message and "<answer>your answer</answer>" in message
    assert FINAL_NOTICE == (
        "You have no tool calls left. Answer now with <answer>your answer</answer>."
    )
    assert budget_line(1) == "You have 1 tool call left."
    assert budget_line(3) == "You have 3 tool calls left."
