"""The shared multiple-choice reader: which written answers name one option, and which do not."""

from __future__ import annotations

import numpy as np
import pytest

from normlab.grader.core import CheckFailed, Item, Output
from normlab.grader.probes import ChoiceError, expect_choice, parse_choice

ACCEPTED = [
    "b",
    "B",
    " b ",
    "b.",
    "B)",
    "b)",
    "(b)",
    " (B) ",
    "option b",
    "Option B",
    "answer: (b)",
    "choice b.",
    "(b) because the batch statistics move",
    "b. because the batch statistics move",
    "B) because a is wrong",
    "b - the running averages are fixed",
    "(b) a larger gradient",
    "b, because",
]


@pytest.mark.parametrize("answer", ACCEPTED)
def test_a_single_letter_is_read_in_every_usual_form(answer):
    assert parse_choice(answer) == "b"


@pytest.mark.parametrize(
    "answer, says",
    [
        ("", "does not start with an option letter"),
        ("   ", "does not start with an option letter"),
        ("because", "does not start with an option letter"),
        ("batch statistics", "does not start with an option letter"),
        ("I think b", "does not start with an option letter"),
        ("the answer is b", "does not start with an option letter"),
        ("bc", "several options"),
        ("b, c", "more than one option"),
        ("b and c", "more than one option"),
        ("(b) or (c)", "more than one option"),
        ("b/c", "more than one option"),
        ("(b)(c)", "more than one option"),
        ("b c", "more than one option"),
        ("b and c because both hold", "more than one option"),
        (None, "expected a string"),
        (2, "expected a string"),
    ],
)
def test_no_letter_or_two_letters_is_an_error_that_says_so(answer, says):
    with pytest.raises(ChoiceError, match=says):
        parse_choice(answer)


def _out(value) -> Output:
    if value is None:
        return Output(items=[Item(kind="none", array=None)], is_tuple=False)
    return Output(items=[Item(kind="str", array=np.array(value))], is_tuple=False)


def test_expect_choice_passes_a_right_letter_in_a_sentence():
    expect_choice(_out("(b) because it is right"), "b", what="X_ANSWER", hint="h")


def test_expect_choice_names_the_wrong_letter_and_gives_the_hint():
    with pytest.raises(CheckFailed, match=r"X_ANSWER: \(c\) is not right\. think again"):
        expect_choice(_out("c."), "b", what="X_ANSWER", hint="think again")


@pytest.mark.parametrize("answer", ["b, c", "bc", "because"])
def test_expect_choice_does_not_call_an_unreadable_answer_wrong(answer):
    with pytest.raises(CheckFailed) as failure:
        expect_choice(_out(answer), "b", what="X_ANSWER", hint="think again")
    message = str(failure.value)
    assert "is not right" not in message and "one letter" in message


def test_expect_choice_without_an_answer():
    with pytest.raises(CheckFailed, match="no answer yet"):
        expect_choice(_out(None), "b", what="X_ANSWER", hint="h")


def test_expect_choice_names_the_misconception_of_a_known_wrong_letter():
    why = {"a": "that is the forward factor alone"}
    with pytest.raises(CheckFailed, match="Why: that is the forward factor alone"):
        expect_choice(_out("(a)"), "b", what="X_ANSWER", hint="h", why=why)
    with pytest.raises(CheckFailed) as failure:
        expect_choice(_out("c"), "b", what="X_ANSWER", hint="h", why=why)
    assert "Why:" not in str(failure.value)
