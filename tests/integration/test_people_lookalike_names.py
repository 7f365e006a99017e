"""Names that print as another user's, on SQLite and PostgreSQL (docs/permissions.md). NFKC
keeps a Cyrillic or Greek letter apart from the Latin one it prints as, so an admin could add
"аna" (a Cyrillic a) beside "ana": a second person who reads as the first, whose vote made a
four-eyes payment "approved by аna, ana" (one person twice, as far as anyone reading the record
could tell). Such a name is now the same person's: refused as a new user, and not a second
vote or another person than a run's requester."""

from __future__ import annotations

import time

import pytest

import loopwright as lw
from loopwright._authority import same_person
from loopwright._errors import ConflictError
from loopwright.store._people import person_key


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("ana", "\u0430na"),  # Cyrillic a
        ("ben", "\u0392\u0395\u039d"),  # Greek capitals: BEN
        ("cleo", "\u0441l\u0435\u03bf"),  # Cyrillic c and e, Greek omicron
    ],
)
def test_a_name_that_prints_as_an_existing_users_is_refused(
    url: str, first: str, second: str
) -> None:
    with lw.Runtime(url) as rt:
        rt.store.add_user(first, roles=["approver"], limits={}, by="root", now=time.time())
        with pytest.raises(ConflictError, match="same name spelled another way"):
            rt.store.add_user(second, roles=["approver"], limits={}, by="root", now=time.time())
        assert [u.name for u in rt.store.list_users()] == [first]


def test_people_are_told_apart_across_scripts_but_a_script_keeps_its_own_case() -> None:
    assert same_person("\u0430na", ["ana"])  # the requester "ana" cannot approve as "аna"
    assert person_key("\u041d\u0438\u043d\u0430") == person_key("\u043d\u0438\u043d\u0430")
    assert person_key("ana") != person_key("ben")
    assert person_key("\u0432\u0435\u0440\u0430") != person_key("vera")  # вера is not vera


@pytest.mark.parametrize(
    ("latin", "lookalike"),
    [
        ("hana", "\u04bbana"),  # Cyrillic shha: h
        ("YURI", "\u04aeURI"),  # Cyrillic straight u, a capital: Y
        ("jo", "\u03f3o"),  # Greek yot: j
    ],
)
def test_the_other_letters_that_print_as_latin_ones_are_those_letters(
    latin: str, lookalike: str
) -> None:
    """Cyrillic һ and Ү (Ү prints as Y, its lower case ү as a y) and Greek ϳ print as Latin
    letters as the listed ones do, and were left out: "һana" was a second person beside
    "hana"."""
    assert person_key(lookalike) == person_key(latin)
    assert same_person(lookalike, [latin])
