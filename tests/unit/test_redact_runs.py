"""Pieces of a registered secret (``_redact_runs``) and a short ``Authorization`` value: what
an adversarial server echoing the request's key back in its error body changed (upper-cased,
its prefix dropped, cut by a line break, spelled out) is masked; ordinary text, other keys and
digests are not (outside attack, stop 52)."""

from __future__ import annotations

import hashlib
import json
import logging

import pytest

import loopwright as lw
from loopwright import _redact
from loopwright._redact import REDACTED, redact, redact_registered, redact_text, register_secret
from loopwright._redact_logs import masked_logger
from loopwright._redact_runs import RUN_MIN, mask_runs

KEY = "sk-proj-Q7vX2mK9pL4wR8tY3nB6cF1hJ5dS0aZeW4"
OTHER = "sk-proj-Hh3Jk8Lm2Nn5Pq7Rs9Tt1Uv4Wx6Yz0Ab2C"


@pytest.fixture(autouse=True)
def _clean_registry() -> None:
    _redact.reset()
    register_secret(KEY)


@pytest.mark.parametrize(
    "echoed",
    [
        KEY.upper(),  # upper-cased
        KEY[8:],  # without its sk-proj- prefix
        KEY[-RUN_MIN:],  # its tail alone
        KEY[:15] + "\n" + KEY[15:],  # cut by a line break
        KEY[:15] + "\r\n" + KEY[15:].upper(),
        " ".join(KEY),  # spelled out
        " ".join(KEY[8:]).upper(),
    ],
)
def test_a_piece_of_a_registered_key_is_masked(echoed: str) -> None:
    text = f"401: invalid key {echoed} (check your settings)"
    assert redact_text(text) == f"401: invalid key {REDACTED} (check your settings)"
    # in an echoed JSON error body (its line break escaped), and in a record the commit's
    # net lets through when it holds nothing to mask
    body = json.dumps({"error": {"message": f"bad key {echoed}"}})
    assert redact_text(body) == json.dumps({"error": {"message": f"bad key {REDACTED}"}})
    record = {"cycle": 3, "error": {"message": body}}
    for masked in (redact(record), _redact.redact_unique(record)):
        assert masked["error"]["message"] == redact_text(body)


def test_in_an_exception_and_a_log_record() -> None:
    exc = RuntimeError(f"HTTP 401: {{'error': 'Incorrect API key {KEY[8:].upper()}'}}")
    stored = redact({"error": exc})
    assert stored == {"error": f"HTTP 401: {{'error': 'Incorrect API key {REDACTED}'}}"}
    seen: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(self.format(record))

    log = masked_logger("loopwright.test_runs52")
    log.addHandler(Keep())
    log.propagate = False
    try:
        log.warning("model call failed: %s", exc)
    finally:
        log.handlers.clear()
    assert seen == [f"model call failed: HTTP 401: {{'error': 'Incorrect API key {REDACTED}'}}"]


def test_shorter_pieces_other_keys_digests_and_prose_are_kept() -> None:
    short = KEY[-(RUN_MIN - 1) :]  # under RUN_MIN: could be anything's
    for t in (
        f"tail {short} kept",
        "sha256 " + hashlib.sha256(KEY.encode()).hexdigest(),
        "sk-proj- is the prefix of project keys; Q7vX2mK9 alone is 8 characters",
        "the loop keeps a draft of each section and revises it until the checks pass",
    ):
        assert redact_text(t) == t
        assert redact_registered(t) is t
    # another key sharing the prefix (a gram of KEY) is no piece of KEY: only its own shape
    # masks it in the net, and it is kept in the work
    other = f"another key {OTHER} of the same prefix"
    assert mask_runs(other, _redact.registered_names) == other
    assert redact_registered(other) is other


def test_a_registry_replaced_has_no_pieces() -> None:
    _redact.reset()
    assert redact_text(KEY[8:]) == KEY[8:]


def test_redact_registered_masks_only_registered_values() -> None:
    work = {"body": f"key={KEY[8:].upper()} token=ghp_{'a1' * 18}", "n": [KEY, 3]}
    masked = redact_registered(work)
    assert masked == {"body": f"key={REDACTED} token=ghp_{'a1' * 18}", "n": [REDACTED, 3]}
    clean = {"body": "nothing here", "n": [1, 2]}
    assert redact_registered(clean) is clean


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("Authorization: Bearer abc12", f"Authorization: Bearer {REDACTED}"),
        ("authorization: basic YWI6", f"authorization: basic {REDACTED}"),
        ('{"Authorization": "Token a1"}', f'{{"Authorization": "Token {REDACTED}"}}'),
        ("401 for Bearer abc12", f"401 for Bearer {REDACTED}"),
        ("Bearer tokens expire", "Bearer tokens expire"),
        ("Bearer 2 of them", "Bearer 2 of them"),
    ],
)
def test_a_short_authorization_value_is_masked(text: str, want: str) -> None:
    assert redact_text(text) == want
    assert redact({"m": text}) == {"m": want}


def test_a_short_registered_value_is_not_masked_by_value() -> None:
    register_secret("ab12x")  # under MIN_SECRET_LEN: it would mask that word everywhere
    assert redact_text("ab12x is a name") == "ab12x is a name"
    assert lw.Proposal.edit("doc", {"a": "ab12x"}).unregistered().edits[0].value == "ab12x"


def test_registered_key_as_a_mapping_key_in_the_work_is_masked() -> None:
    """``redact_registered`` (an actor's edits at intake, ``Proposal.unregistered``) masks a
    registered key written as a mapping's key too, as every other write does (``_walk``): it
    was kept in clear in the stored work. Two keys masked alike are both kept."""
    work = {"headers": {KEY: "x", "Bearer " + KEY[8:]: "y", "plain": KEY}}
    out = redact_registered(work)
    text = json.dumps(out)
    assert KEY not in text and KEY[8:] not in text and KEY[8:].lower() not in text.lower()
    assert len(out["headers"]) == 3
    assert out["headers"]["plain"] == REDACTED
    untouched = {"headers": {"plain": "ok"}}
    assert redact_registered(untouched) is untouched


def test_unregistered_proposal_masks_a_key_in_a_mapping_key() -> None:
    proposal = lw.Proposal(edits=[lw.Edit("doc", "body", {KEY: 1})]).owned()
    masked = proposal.unregistered()
    assert KEY not in json.dumps(masked.to_dict())
    assert masked.digest() != proposal.digest()
    assert masked.unregistered() is masked  # masking twice changes nothing (digest stable)


def test_registering_grows_with_distinct_values_only_and_ignores_empty_or_short_ones() -> None:
    """The registry only grows, for the life of the process: by each distinct value given, not
    by use (an adapter is built or unpickled again for every task of a long-lived worker), and
    not at all by a value that would mask ordinary text (empty, blank, one character, short
    once stripped, a local server's placeholder key)."""
    from loopwright import _redact_runs

    size, pieces = len(_redact.registered_names), len(_redact_runs._index[0][2])
    for _ in range(1000):
        register_secret(KEY)
        register_secret(f"  {KEY}\n")  # as read from a file: the same value
    for value in ("", "   ", "a", " a ", "ab12x", "     a     ", "EMPTY", "not-needed", None):
        register_secret(value)
    assert (len(_redact.registered_names), len(_redact_runs._index[0][2])) == (size, pieces)
    assert redact_text("a banana and an apple") == "a banana and an apple"
    register_secret(OTHER)  # a rotated key: both masked from now on
    assert len(_redact.registered_names) > size and len(_redact_runs._index[0][2]) > pieces
    assert redact_text(f"{KEY} {OTHER}") == f"{REDACTED} {REDACTED}"


def test_reset_forgets_a_former_values_pieces() -> None:
    # ``_redact.reset`` (what tests/conftest.py runs before each test) empties the index of
    # pieces with the values: emptying the values alone left a former key's pieces masked
    assert redact_text(KEY[8:].upper()) == REDACTED
    before = _redact.registry_state()
    _redact.reset()
    register_secret(OTHER)  # (with nothing registered, no piece is looked for at all)
    assert redact_text(KEY[8:].upper()) == KEY[8:].upper()
    assert redact_text(KEY[-RUN_MIN:]) == KEY[-RUN_MIN:]
    _redact.reset(before)  # and what was registered comes back, its pieces with it
    assert redact_text(KEY[8:].upper()) == REDACTED
