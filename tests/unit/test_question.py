"""Questions for a person: construction and answer validation."""

from __future__ import annotations

import math
from typing import Any

import pytest

import loopwright as lw

Q = lw.Question


# --- construction --------------------------------------------------------------------------
@pytest.mark.parametrize("text", ["", "   ", None, 3])
def test_a_question_needs_text(text: Any) -> None:
    with pytest.raises(lw.ConfigError) as err:
        Q(text)
    assert err.value.field == "question.text"


def test_unknown_type_is_refused() -> None:
    with pytest.raises(lw.ConfigError, match="text") as err:
        Q("how many?", type="float")  # type: ignore[arg-type]
    assert err.value.field == "question.type"


def test_choices_are_normalised_to_strings() -> None:
    assert Q("?", choices=["a", 2]).choices == ("a", "2")  # type: ignore[arg-type]
    assert Q("?", choices=["PO-1"]).choices == ("PO-1",)  # (a string is refused: api47b)
    assert Q("?").choices == ()


@pytest.mark.parametrize("choices", [None, 5, {"a": 1}, ("a", ""), ("a", "  ")])
def test_choices_that_are_not_a_list_or_hold_a_blank_are_refused(choices: Any) -> None:
    # an outside probe (probe42a): None and 5 raised TypeError, a mapping gave its keys, and
    # a blank choice could never be chosen (the answer is stripped and may not be empty)
    with pytest.raises(lw.ConfigError) as err:
        Q("which?", choices=choices)
    assert err.value.field == "question.choices"


def test_choices_are_stripped_as_answers_are() -> None:
    # " PO-1" could never be chosen: the answer "PO-1" (or " PO-1", stripped) is not it
    q = Q("which?", choices=(" PO-1", "PO-2 "))
    assert q.choices == ("PO-1", "PO-2")
    assert q.validate(" PO-1") == "PO-1"


def test_round_trip() -> None:
    q = Q("Which PO governs?", choices=("PO-1", "PO-2"))
    assert Q.from_dict(q.to_dict()) == q
    n = Q("How many?", type="integer")
    assert Q.from_dict(n.to_dict()) == n
    assert Q.from_dict({"text": "why?"}) == Q("why?")


# --- text -----------------------------------------------------------------------------------
def test_text_answers_are_stripped_strings() -> None:
    q = Q("why?")
    assert q.validate("  because  ") == "because"
    assert q.validate(12) == "12"


@pytest.mark.parametrize("answer", [None, "", "   \n"])
@pytest.mark.parametrize("type_", ["text", "number", "integer", "boolean"])
def test_empty_answers_are_refused_for_every_type(answer: Any, type_: str) -> None:
    with pytest.raises(lw.ConfigError, match="empty") as err:
        Q("?", type=type_).validate(answer)  # type: ignore[arg-type]
    assert err.value.field == "answer"


# --- choices --------------------------------------------------------------------------------
def test_choices() -> None:
    q = Q("Which PO governs?", choices=("PO-1", "PO-2"))
    assert q.validate("PO-2") == "PO-2"
    assert q.validate(" PO-1 ") == "PO-1"
    for bad in ("PO-3", "po-1", "PO-1, PO-2"):
        with pytest.raises(lw.ConfigError, match=r"one of \['PO-1', 'PO-2'\]") as err:
            q.validate(bad)
        assert err.value.field == "answer"
        assert repr(bad) in str(err.value)


def test_numeric_choices_compare_as_text() -> None:
    q = Q("pick", choices=("1", "2"))
    assert q.validate(2) == "2"
    with pytest.raises(lw.ConfigError):
        q.validate(2.0)  # "2.0" is not a listed choice


# --- numbers --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("answer", "value"),
    [("3.5", 3.5), (" 2 ", 2.0), (7, 7.0), (-1.25, -1.25), ("1e3", 1000.0)],
)
def test_number_answers(answer: Any, value: float) -> None:
    got = Q("how much?", type="number").validate(answer)
    assert got == value
    assert isinstance(got, float)


@pytest.mark.parametrize("answer", ["abc", "1,5", True, False, "nan", "inf", "-inf", [1], {}])
def test_bad_number_answers(answer: Any) -> None:
    with pytest.raises(lw.ConfigError) as err:
        Q("how much?", type="number").validate(answer)
    assert err.value.field == "answer"


@pytest.mark.parametrize(("answer", "value"), [("3", 3), (4, 4), ("5.0", 5), (-2, -2)])
def test_integer_answers(answer: Any, value: int) -> None:
    got = Q("how many?", type="integer").validate(answer)
    assert got == value
    assert type(got) is int


@pytest.mark.parametrize("answer", ["3.5", 2.25, "three", True, "nan", math.inf])
def test_bad_integer_answers(answer: Any) -> None:
    with pytest.raises(lw.ConfigError) as err:
        Q("how many?", type="integer").validate(answer)
    assert err.value.field == "answer"


def test_the_refusal_of_a_bad_answer_reads_as_english() -> None:
    # newuser46: "must be a integer, got 'abc'"
    with pytest.raises(lw.ConfigError, match="must be an integer, got 'abc'"):
        Q("how many?", type="integer").validate("abc")
    with pytest.raises(lw.ConfigError, match="must be a number, got 'abc'"):
        Q("how much?", type="number").validate("abc")


def test_huge_integer_answers() -> None:
    # an integer is kept exact, never converted through float
    assert Q("how many?", type="integer").validate(10**400) == 10**400
    assert Q("id?", type="integer").validate("9007199254740993") == 9007199254740993
    assert Q("id?", type="integer").validate(" -12 ") == -12
    # a number too large for a float is a user error, not an OverflowError
    with pytest.raises(lw.ConfigError) as err:
        Q("how much?", type="number").validate(10**400)
    assert err.value.field == "answer"


# --- booleans -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("answer", "value"),
    [
        (True, True),
        (False, False),
        ("yes", True),
        ("Y", True),
        (" TRUE ", True),
        ("1", True),
        ("no", False),
        ("n", False),
        ("False", False),
        ("0", False),
    ],
)
def test_boolean_answers(answer: Any, value: bool) -> None:
    assert Q("ok?", type="boolean").validate(answer) is value


@pytest.mark.parametrize("answer", ["maybe", "2", "oui", 2])
def test_bad_boolean_answers(answer: Any) -> None:
    with pytest.raises(lw.ConfigError, match="yes or no") as err:
        Q("ok?", type="boolean").validate(answer)
    assert err.value.field == "answer"


def test_an_integer_answer_with_too_many_digits_says_so() -> None:
    """An answer of 5,000 digits to an integer question was refused as "must be a finite
    integer": Python reads at most 4,300 digits as an int, and the float it fell back to was
    inf. The answer is a whole number, too long; the error says that."""
    import sys

    q = lw.Question("How many?", type="integer")
    limit = sys.get_int_max_str_digits()  # 4300 unless PYTHONINTMAXSTRDIGITS says otherwise
    if limit == 0:  # no limit: read whole
        assert q.validate("7" * 5000) == int("7" * 5000)
    else:
        with pytest.raises(lw.ConfigError, match=f"at most {limit} digits, got one of"):
            q.validate("7" * (limit + 700))
    assert q.validate("-" + "7" * 40) == -int("7" * 40)


def test_a_refused_answer_is_quoted_cut() -> None:
    """A refused 100 KB answer was echoed whole in the error, on the terminal and in the API's
    400 detail (probe46c)."""
    q = lw.Question("how many?", type="integer")
    with pytest.raises(lw.ConfigError) as err:
        q.validate("x" * 100_000)
    text = str(err.value)
    assert len(text) < 200 and "(100,000 characters)" in text and "'xxxx" in text
    with pytest.raises(lw.ConfigError, match=r"got 'many'$"):  # a short one whole, as before
        q.validate("many")
    pick = lw.Question("which?", choices=["a", "b"])
    with pytest.raises(lw.ConfigError) as err:
        pick.validate("c" * 5000)
    assert "(5,000 characters)" in str(err.value) and len(str(err.value)) < 200
