"""loopwright._redact: what is masked, what is left alone, and that nothing is copied or
rescanned needlessly (it runs on every write)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable

import pytest

import loopwright as lw
from loopwright import _redact
from loopwright._redact import REDACTED, redact, redact_text, register_secret, register_secret_field


@pytest.fixture(autouse=True)
def _clean_registry() -> None:
    _redact.reset()


def test_secret_environment_values_are_masked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "planted-openai-value-1")
    monkeypatch.setenv("SERVICE_TOKEN", "planted-token-value-2")
    monkeypatch.setenv("AWS_SECRET", "planted-secret-value-3")
    monkeypatch.setenv("DB_PASSWORD_FILE_CONTENT", "planted-password-4")
    monkeypatch.setenv("HOME_DIRECTORY", "/home/planted-not-a-secret")
    monkeypatch.setenv("DEBUG_KEY", "1")  # too short to mask by value: it would eat every "1"
    text = (
        "a planted-openai-value-1 b planted-token-value-2 c planted-secret-value-3 "
        "d planted-password-4 e /home/planted-not-a-secret f 1"
    )
    assert redact_text(text) == "a *** b *** c *** d *** e /home/planted-not-a-secret f 1"
    # a changed environment is noticed (the cache is keyed on it)
    monkeypatch.setenv("OPENAI_API_KEY", "planted-openai-value-9")
    assert redact_text("x planted-openai-value-9 planted-openai-value-1") == (
        "x *** planted-openai-value-1"
    )


def test_registered_values_and_fields() -> None:
    register_secret("configured-key-abc")
    register_secret("not-needed")  # the placeholder local servers get is no secret
    register_secret("abc")  # too short
    assert redact_text("key configured-key-abc, not-needed, abc") == "key ***, not-needed, abc"
    # a local server's dummy key is not masked in the model names and prompts it appears in
    for dummy in ("ollama", "EMPTY", "offline", "lm-studio"):
        register_secret(dummy)
    assert redact_text("ollama/llama3 offline-actor EMPTY lm-studio") == (
        "ollama/llama3 offline-actor EMPTY lm-studio"
    )
    register_secret_field("PIN-Code")
    assert redact({"pin_code": "1234", "pin": "1234"}) == {"pin_code": REDACTED, "pin": "1234"}


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("http://bob:s3cret@host:8080/v1", "http://***@host:8080/v1"),
        ("postgresql://postgres:pw@127.0.0.1:5432/test", "postgresql://***@127.0.0.1:5432/test"),
        ("postgresql://postgres@127.0.0.1:5432/test", "postgresql://postgres@127.0.0.1:5432/test"),
        ("see https://h/x?api_key=zz&b=1", "see https://h/x?api_key=***&b=1"),
        ("https://h/x?api-key=***: Connection error", "https://h/x?api-key=***: Connection error"),
        ("Incorrect API key provided: sk-proj-abcdefghijklmnop", "Incorrect API key provided: ***"),
        ("Authorization: Bearer eyJhbGciOi.payload.sig", "Authorization: Bearer ***"),
        ("host=db user=app password=hunter22 dbname=x", "host=db user=app password=*** dbname=x"),
        ("ghp_" + "a" * 36, REDACTED),
        ("xoxb-1234567890-abcdef", REDACTED),
        ("AKIAABCDEFGHIJKLMNOP", REDACTED),
        ("hf_" + "b" * 30, REDACTED),
        # loopwright's own user token, pasted into a note (the audit log keeps notes for good)
        ("my token: lw_wKQRwnF8LU_4LaYpsnunzMSmJcGVVGMc8TMUyE4GPJg", "my token: ***"),
        ("flow_rate lw_short yellow_lw_" + "c" * 43, None),
        # ordinary text stays
        ("the token validation uses basic arithmetic", None),
        ("assert f(2) == 4 # Real Execution Output: 3", None),
        ("task-abcdefghijklmnopqrstu and risk-adjusted", None),
        ("http://[::1]:8080/v1", None),
    ],
)
def test_shapes(text: str, want: str | None) -> None:
    assert redact_text(text) == (text if want is None else want)


def test_mapping_keys_named_secret() -> None:
    data = {
        "password": "p",
        "Api-Key": "k",
        "token": 7,  # a fencing token is a counter: numbers stay
        "max_tokens": 800,
        "nested": {"client_secret": ["a", {"x": "y"}], "ok": "fine"},
        "rows": [{"secret": "s", "name": "n"}],
    }
    out = redact(data, secret_fields=["name"])
    assert out == {
        "password": REDACTED,
        "Api-Key": REDACTED,
        "token": 7,
        "max_tokens": 800,
        "nested": {"client_secret": [REDACTED, {"x": REDACTED}], "ok": "fine"},
        "rows": [{"secret": REDACTED, "name": REDACTED}],
    }
    assert data["password"] == "p"  # the input is never modified


def test_nothing_to_mask_returns_the_same_objects() -> None:
    data = {"a": ["x", 1, {"b": "c"}], "t": ("y",), "n": None}
    assert redact(data) is data
    assert redact("plain") == "plain"
    changed = redact({"keep": {"k": "v"}, "hide": "sk-abcdefghijklmnopq"})
    assert changed["hide"] == REDACTED and changed["keep"] == {"k": "v"}


def test_tuples_and_keys() -> None:
    assert redact(("sk-abcdefghijklmnopq", 1)) == (REDACTED, 1)
    assert redact({"http://u:p@h/": 1}) == {"http://***@h/": 1}


def test_linear_and_cheap_on_clean_data() -> None:
    """O(size): a large clean document is walked once and returned as is."""
    doc = {"runs": [{"id": f"r{i}", "text": "x" * 200, "n": i} for i in range(2000)]}
    assert redact(doc) is doc
    assert len(json.dumps(doc)) > 400_000


def test_prefix_grouped_alternation_matches_exactly_the_words() -> None:
    """``trie`` (the triggers' and secret fields' patterns) finds a word exactly where the
    flat alternation of the same words does, prefixes of each other included."""
    import random
    import re

    from loopwright._redact import SECRET_FIELDS, TRIGGERS, trie, triggered

    rng = random.Random(7)
    for words in (
        list(TRIGGERS),
        sorted(SECRET_FIELDS),
        ["a", "ab", "abc", "b", "ba", "x-y", "x.y"],
    ):
        grouped = re.compile(trie(words))
        flat = re.compile("|".join(re.escape(w) for w in words))
        quoted = re.compile('"(?:' + trie(words) + ')"')
        quoted_flat = re.compile('"(?:' + "|".join(re.escape(w) for w in words) + ')"')
        alphabet = "".join(sorted(set("".join(words)))) + '"_ '
        texts = [*words, *(f'"{w}"' for w in words), *(f'"{w}x"' for w in words)]
        texts += [
            "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12))) for _ in range(3000)
        ]
        for t in texts:
            assert (grouped.search(t) is None) == (flat.search(t) is None), (words, t)
            assert (quoted.search(t) is None) == (quoted_flat.search(t) is None), (words, t)
            assert triggered(t) == any(w in t for w in TRIGGERS), t


def test_every_trigger_passes_the_substring_prefilter() -> None:
    """``triggered`` runs the expression only when one of ``PREFILTER`` is in the text: a
    trigger none of them is part of (one added later, say) would never be found."""
    from loopwright._redact import PREFILTER, TRIGGER_IN, TRIGGERS, triggered

    for t in TRIGGERS:
        assert t in TRIGGER_IN or any(n in t for n in PREFILTER), t
        assert triggered(f"a clean record around {t} and after"), t
    for near in ("gh", "high", "passwo", "hf", "glpat", "github_pa", "sk", "aiz"):
        assert not triggered(f"nothing to see: {near}"), near


@pytest.mark.parametrize(
    "key",
    [
        "db_password",
        "OPENAI_API_KEY",
        "github_token",
        "x-api-key",
        "token ",
        " Password",
        "aws_secret",
        # HTTP headers a verifier keeps as evidence: Basic credentials, a session cookie
        "Proxy-Authorization",
        "Set-Cookie",
        "aws_credentials",
        "ssh_passphrase",
    ],
)
def test_keys_named_like_a_secret_are_masked_on_both_paths(key: str) -> None:
    """A compound name (``db_password``, ``x-api-key``) or a name with spaces around it is a
    secret field; the clean-case scan must agree with the walk, alone or beside a trigger."""
    alone = {key: "planted-value-1"}
    assert redact(alone) == {key: REDACTED}
    beside = {key: "planted-value-1", "hint": "a=b"}
    assert redact(beside) == {key: REDACTED, "hint": "a=b"}


def test_names_that_are_not_secrets_stay() -> None:
    data = {
        "task_key": "invoice-7",
        "cache_key": "abc1234567",
        "max_tokens": "abcdefgh",
        "tokens": 10,
        "fencing_token": 3,  # a number under a secret name: a counter, kept
        "cookie_count": "abcdefgh",
        "credentials_ok": "abcdefgh",
    }
    assert redact(data) is data


@pytest.mark.parametrize(
    ("text", "want"),
    [
        (
            "login {'user': 'app', 'password': 'planted-1'}",
            "login {'user': 'app', 'password': '***'}",
        ),
        ('got {"password": "planted-2"}', 'got {"password": "***"}'),
        ("api_key=planted-3 next", "api_key=*** next"),
        ("client_secret: planted-4", "client_secret: ***"),
        ("Authorization: Basic dXNlcjpwYXNzd29yZA==", "Authorization: Basic ***"),
        ("-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY-----", "***"),
        ("key sk_live_abcdefghijklmnop1234 used", "key *** used"),
    ],
)
def test_secrets_written_into_text_are_masked(text: str, want: str) -> None:
    assert redact_text(text) == want


@pytest.mark.parametrize(
    "text", ["a basic understanding of things", "the api is rapid", "a secret garden", "token: 4"]
)
def test_ordinary_text_near_those_shapes_stays(text: str) -> None:
    assert redact_text(text) == text


def test_objects_are_masked_as_the_text_they_are_stored_as() -> None:
    """What is not JSON (an exception, bytes, an object) is stored as its text: that text is
    masked; numbers, booleans and None stay."""

    class Conn:
        def __repr__(self) -> str:
            return "Conn(dsn='postgresql://app:planted-5@db/x')"

    got = redact(
        {
            "error": ConnectionError("cannot reach postgresql://app:planted-6@db/x"),
            "conn": Conn(),
            "password": b"planted-7",
            "n": 3,
            "ok": True,
            "none": None,
        }
    )
    assert got == {
        "error": "cannot reach postgresql://***@db/x",
        "conn": "Conn(dsn='postgresql://***@db/x')",
        "password": REDACTED,
        "n": 3,
        "ok": True,
        "none": None,
    }


@pytest.mark.parametrize(
    "key",
    [
        "github_token ",
        "stripe_secret\t",
        "aws_access_key ",
        "x_api-key",
        "Session-Token\n",
        " db_SECRET_KEY\x0b",
        "token\xa0",
        "id_token\u3000 ",
        "passwort",
    ],
)
def test_keys_with_spaces_after_them_are_masked(key: str) -> None:
    """The JSON fast path found a key ending like a secret's name only right before its closing
    quote: ``github_token `` (what ``field_key`` strips after it) was declared clean and stored raw,
    and an effect call holding it was run. Now every key the walk masks is masked."""
    assert redact({key: "planted-value-1"}) == {key: REDACTED}
    assert redact([{"ok": 1}, {"nested": {key: "planted-value-1"}}]) == [
        {"ok": 1},
        {"nested": {key: REDACTED}},
    ]
    call = lw.EffectCall("publish", {"creds": {key: "planted-value-1"}})
    assert call.secret_args() == ["creds"]


def test_the_fast_path_never_passes_a_key_the_walk_masks() -> None:
    """``_clean`` is a pre-filter: for every key ``secret_name`` flags (any case, ``-`` or
    ``_``, whitespace of every kind around it, a registered field's name) it must answer "not
    clean", so the walk masks the value."""
    import random

    from loopwright._redact import SECRET_SUFFIXES, _clean, field_key, secret_name

    register_secret_field("pin code")
    fields = _redact.SECRET_FIELDS | {"pin code"}
    names = [*fields, *(f"db{s}" for s in SECRET_SUFFIXES), "db_passwd_x", "tokens", "task_key"]
    spaces = ["", " ", "\t", "\n", "\r", "\x0b", "\x0c", "\x1c", "\x1f", "\xa0", "\u2028", "\u3000"]
    rng = random.Random(9)
    checked = 0
    for _ in range(4000):
        name = rng.choice(names)
        name = "".join(
            c.upper() if rng.random() < 0.3 else c for c in name.replace("_", rng.choice("_-"))
        )
        key = "".join(rng.choices(spaces, k=rng.randint(0, 2))) + name
        key += "".join(rng.choices(spaces, k=rng.randint(0, 2)))
        data = {"usage": {"tokens": 3}, "rows": [{"id": "x", key: "planted-value-2"}]}
        if secret_name(field_key(key), fields):
            checked += 1
            assert not _clean(data, (), fields), repr(key)
            assert redact(data)["rows"][0][key] == REDACTED, repr(key)
        else:
            assert redact(data) is data, repr(key)
    assert checked > 3000


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("DB_PASSWORD=planted-1 next", "DB_PASSWORD=*** next"),
        ("PGPASSWORD=planted-1", "PGPASSWORD=***"),
        ("failed: {'token': 'planted-value-2'}", "failed: {'token': '***'}"),
        ("failed: {'secret': 'planted-value-2'}", "failed: {'secret': '***'}"),
        ('got {"github_token": "planted-value-2"}', 'got {"github_token": "***"}'),
        ("Cfg(token='planted-value-3', n=1)", "Cfg(token='***', n=1)"),
        ("github_token=planted3 DB", "github_token=*** DB"),
        ("Authorization: Token planted-value-4", "Authorization: Token ***"),
        ("authorization='Digest planted-value-4'", "authorization='Digest ***'"),
        ("aws_secret_access_key=planted/value+5", "aws_secret_access_key=***"),
        ("aws_secret_access_key: planted/value+5", "aws_secret_access_key: ***"),
        ("postgresql://h/db?sslpassword=planted-6", "postgresql://h/db?sslpassword=***"),
        ("https://h/cb?refresh_token=planted-6&x=1", "https://h/cb?refresh_token=***&x=1"),
        ("https://h/x?db_secret=planted-6", "https://h/x?db_secret=***"),
        (
            "git clone https://Zq8plantedValue42@github.com/o/r",
            "git clone https://***@github.com/o/r",
        ),
        ("https://u:p@planted7@host/x", "https://***@host/x"),
        ("ASIAABCDEFGHIJKLMNOP", REDACTED),
        ("jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl", "jwt ***"),
    ],
)
def test_more_secrets_written_into_text_are_masked(text: str, want: str) -> None:
    """Each of these was stored in clear (an error message, a note, a CLI error)."""
    assert redact_text(text) == want
    assert redact_text(want) == want  # masking twice changes nothing


@pytest.mark.parametrize(
    "text",
    [
        "stale fencing token=7",
        "UPDATE runs SET fencing_token=? WHERE run_id=?",
        "max_tokens=800 and tokens: 12",
        "Authorization: Bearer ***",
        "postgresql://postgres@127.0.0.1:5432/test",
        "git@github.com:o/r.git and https://john.doe@example.com/",
        "shipping to Asia and the token's scope",
        "{'tokens': 'many', 'secrets': 'none'}",
    ],
)
def test_ordinary_text_near_the_new_shapes_stays(text: str) -> None:
    assert redact_text(text) == text


@pytest.mark.parametrize(
    "text",
    [
        'server replied {"token": "s3cr3tVALUE9876"}',
        'config {"secret": "abcdEFGH12345678"} refused',
        '{"github_token": "abcdEFGH12345678"}',
        '{"app_secret": "abcdEFGH12345678"}',
        '{"id_token": "abcdEFGH12345678"}',
        '{"x-auth-token": "abcdEFGH12345678"}',
        '{"Token": "abcdEFGH12345678"}',
        "{'token': 'abcdEFGH12345678'}",
    ],
)
def test_a_string_in_a_structure_is_masked_as_the_same_string_alone(text: str) -> None:
    # From a review (helper-51): the fast path read the structure's JSON text, where a quote
    # inside a string is ``\"``: '{"token": …}' quoted in a message passed as clean.
    alone = redact_text(text)
    want = text.replace("s3cr3tVALUE9876", REDACTED).replace("abcdEFGH12345678", REDACTED)
    assert alone == want
    assert redact([text]) == [alone]
    assert redact({"finding": {"message": text}}) == {"finding": {"message": alone}}


def test_a_text_found_clean_is_checked_again_once_a_secret_is_known(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The clean scan remembers texts it found clean (a verdict repeats every cycle), but only
    under the secrets and field names it checked them against: a value registered, an
    environment secret set or a field name registered since makes it read the text again."""
    verdict = {"passed": False, "findings": [{"message": "still open zq81-wk44-pm07"}]}
    assert redact(verdict) is verdict  # clean: the same object back
    assert redact(verdict) is verdict  # remembered: still clean
    register_secret("zq81-wk44-pm07")
    assert redact(verdict)["findings"][0]["message"] == f"still open {REDACTED}"
    again = {"passed": False, "findings": [{"message": "still open vx33-hh21-kk90"}]}
    assert redact(again) is again
    monkeypatch.setenv("PAYMENT_API_KEY", "vx33-hh21-kk90")
    assert redact(again)["findings"][0]["message"] == f"still open {REDACTED}"
    keyed = {"passed": True, "evidence": {"pin_code": "4411-9982"}}
    assert redact(keyed) is keyed
    register_secret_field("pin_code")
    assert redact(keyed)["evidence"]["pin_code"] == REDACTED
    assert _redact._clean_texts  # the cache is what was exercised, not a fresh scan only


# Pieces the generated data is made of: every trigger, the shapes' markers, secret-named keys
# and their endings, the characters the clean scan gates on (z, j, x, ', backslash, quote),
# and ordinary record words.
_FRAGMENTS = (
    *_redact.TRIGGERS,
    *_redact.PREFILTER,
    *sorted(_redact.SECRET_FIELDS),
    *_redact.SECRET_SUFFIXES,
    *("token", "secret", "Bearer ", "Authorization: Basic ", "sk-", "ghp_", "AKIA", "eyJ"),
    *("aBcDeFgHiJkLmNoPqRsTuV0123456789", "user:pw@", "https://", "?api_key=", "="),
    *("z", "j", "x", "'", '"', "\\", '\\"', "\\'", " ", ":", "-", "_", "\t", "é", "İ", "Σ"),
    *("cycle", "score", "draft 18", "doc/body", "held_out", "tokens", "0.5", "6.7e-6"),
)


def _joined(parts: list[str]) -> str:
    return "".join(parts)


def _reference_triggered(low: str, passw: bool) -> bool:
    return any(w in low for w in _redact.TRIGGERS) or (passw and "passw" in low)


def test_triggered_is_exactly_a_trigger_being_in_the_text() -> None:
    from hypothesis import given, settings
    from hypothesis import strategies as st

    texts = st.lists(st.sampled_from(_FRAGMENTS) | st.text(max_size=3), max_size=8).map(_joined)

    @settings(max_examples=600, deadline=None)
    @given(texts, st.booleans())
    def check(text: str, passw: bool) -> None:
        low = text.lower()
        assert bool(_redact.triggered(low, passw=passw)) == _reference_triggered(low, passw)

    check()


def test_the_clean_scan_masks_exactly_what_the_walk_does() -> None:
    """``redact`` on generated JSON-like data built from the net's own patterns (triggers,
    secret-named keys, escapes, the characters the clean scan tests first) returns what the
    full walk returns: the clean scan passes nothing the walk would mask, and leaves clean
    data as it is (the same object)."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    text = st.lists(st.sampled_from(_FRAGMENTS) | st.text(max_size=3), max_size=6).map(_joined)
    leaf = text | st.integers() | st.floats(allow_nan=False) | st.booleans() | st.none()
    data = st.recursive(
        leaf,
        lambda kids: st.lists(kids, max_size=3) | st.dictionaries(text, kids, max_size=3),
        max_leaves=12,
    )

    @settings(max_examples=800, deadline=None)
    @given(data)
    def check(obj: object) -> None:
        values = _redact.secret_values()
        want = _redact._walk(obj, values, _redact.SECRET_FIELDS, False)
        got = redact(obj)
        assert got == want
        if want == obj and not isinstance(obj, str):
            assert got is obj or _redact._clean(obj, values, _redact.SECRET_FIELDS) is False

    _redact._clean_texts.clear()
    check()


class _Asked(str):
    """A text that notes every substring it is asked whether it holds."""

    asked: list[str]

    def __contains__(self, needle: object) -> bool:
        self.asked.append(str(needle))
        return str.__contains__(self, needle)  # type: ignore[operator]


def test_a_clean_record_is_not_searched_for_needles_whose_rare_character_it_lacks() -> None:
    """The clean scan's substring tests are one pass over the record each: the needles that
    hold a character the engine's records lack (``z``: ``aiza``, ``authorization``; ``j``:
    ``eyj``; ``x``: ``xox``; ``%``: ``%3a%2f%2f``) are searched only once a one-character test
    finds that character, and the triggers holding ``token`` are one search for the word."""
    record = json.dumps(
        {"cycle": 18, "decision": "revise", "findings": [{"message": "still open"}]},
        separators=(",", ":"),
    )
    low = _Asked(record.lower())
    low.asked = []
    assert not _redact.triggered(low, passw=True)
    for needle in ("aiza", "authorization", "eyj", "xox", "%3a%2f%2f", "token'", 'token"'):
        assert needle not in low.asked, needle
    assert {"z", "j", "x", "%"} <= set(low.asked)
    # a record with those characters is searched for them
    low = _Asked('{"z":"j","x":"%"}')
    low.asked = []
    assert not _redact.triggered(low, passw=True)
    assert {"aiza", "authorization", "eyj", "xox", "%3a%2f%2f"} <= set(low.asked)


@pytest.mark.parametrize(
    "name",
    sorted(
        {
            *_redact.SECRET_FIELDS,
            *(s[1:] for s in _redact.SECRET_SUFFIXES),
            *(s for s in _redact.SECRET_SUFFIXES),
        }
    ),
)
def test_every_secret_name_is_a_trigger_or_a_needle(name: str) -> None:
    """The clean scan skips the key pattern on a plain text (no escape, no space before a
    closing quote, ASCII) with no trigger and neither ``private`` nor ``session`` in it
    (``triggered`` answers False, not None): every secret field's name, as a key (``_`` or
    ``-``, any case, with a prefix), must then hold one or the other."""
    for spelled in (name, name.replace("_", "-"), "db_" + name, "X-" + name.upper()):
        low = json.dumps({spelled: "v"}, separators=(",", ":")).lower()
        assert _redact.triggered(low, passw=True) is not False, spelled


def test_a_clean_plain_record_is_not_searched_for_secret_keys(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A clean record written plainly (no escapes, ASCII) holds no trigger and none of the
    names no trigger stands for: the key pattern's pass over its reversed text is skipped
    (it was a quarter of the clean scan); one that holds such a name is still searched."""

    class _NoSearch:
        def search(self, text: str) -> None:
            raise AssertionError("the key pattern ran")

    pats = (_NoSearch(), _NoSearch())
    monkeypatch.setattr(_redact, "_key_patterns", {_redact.SECRET_FIELDS: pats})
    _redact._clean_texts.clear()
    record = {"cycle": 18, "decision": "revise", "findings": [{"message": "still open"}]}
    assert redact(record) is record
    with pytest.raises(AssertionError, match="key pattern ran"):
        redact({"cycle": 19, "session_note": "kept"})
    # a needle no trigger confirms (``private``, ``session``) sends it to the key pattern too
    _redact._clean_texts.clear()
    with pytest.raises(AssertionError, match="key pattern ran"):
        redact({"cycle": 20, "private_note": "kept"})


def test_a_dataclass_is_scanned_as_the_store_writes_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """The stores write a dataclass as its ``str()`` (``_json.dumps``), not as its fields: the
    clean scan read the fields' JSON (clean here) and let a ``__str__`` that prints the secret
    through unmasked."""
    import dataclasses
    import datetime

    from loopwright._json import dumps

    monkeypatch.setenv("MY_API_KEY", "supersecret123")

    @dataclasses.dataclass
    class Box:
        x: str = "plain"

        def __str__(self) -> str:
            return "key " + os.environ["MY_API_KEY"]

    rec = {"evidence": {"box": Box()}}
    stored = dumps(redact(rec))
    assert stored == '{"evidence":{"box":"key ***"}}', stored
    # a date needs no walk to be safe, but is still written as the stores write it
    when = {"at": datetime.datetime(2026, 12, 4, 18, 0)}
    assert dumps(redact(when)) == dumps(when) == '{"at":"2026-12-04 18:00:00"}'
    # plain data keeps the fast path: the very same object back
    plain = {"a": [1, "two", {"b": None}]}
    assert redact(plain) is plain


SPECIAL = "q\"uo\\te'Pass55"  # a quote of each kind and a backslash


@pytest.mark.parametrize(
    "written",
    [
        lambda v: str(RuntimeError(("connect", v))),  # exception args: a tuple's repr
        lambda v: str(RuntimeError({"dsn": {"user": "bob", "pw": v}})),
        lambda v: str(v.encode()),  # bytes
        lambda v: json.dumps({"detail": f"bad credentials {v}"}),  # an echoed error body
    ],
)
def test_a_known_secret_is_masked_as_it_is_escaped_in_printed_and_json_text(
    monkeypatch: pytest.MonkeyPatch, written: Callable[[str], str]
) -> None:
    """A registered or environment secret holding quotes or a backslash reads escaped inside
    a printed container or JSON text: it was stored as it read there."""
    register_secret(SPECIAL)
    monkeypatch.setenv("LEDGER_PASSWORD", 'env\\side"Pass77')
    for value in (SPECIAL, 'env\\side"Pass77'):
        text = written(value)
        assert value not in text  # escaped: the plain value is not in the text
        masked = redact_text(text)
        assert masked == written(REDACTED)  # the mask where the escaped value was
        assert redact({"error": text}) == {"error": masked}


@pytest.mark.parametrize(
    "written",
    [
        lambda v: str(v.encode()),  # UTF-8 bytes: b'p\xc3\xa4ss…'
        lambda v: json.dumps({"detail": f"bad credentials {v}"}),  # ASCII JSON: \u00e4
        lambda v: ascii(RuntimeError(v)),  # ascii(): \xe4
        lambda v: str(RuntimeError(("connect", v.encode()))),
    ],
)
def test_a_known_secret_beyond_ascii_is_masked_as_it_is_escaped(
    monkeypatch: pytest.MonkeyPatch, written: Callable[[str], str]
) -> None:
    """A registered or environment secret with a letter beyond ASCII (a password with an
    umlaut) reads escaped in bytes, in JSON that escapes non-ASCII (Python's default) and in
    ``ascii()``: it was stored in clear there."""
    register_secret("pässwort-Gëheim55")
    monkeypatch.setenv("VAULT_PASSWORD", "mot-de-passé-Secret77")
    for value in ("pässwort-Gëheim55", "mot-de-passé-Secret77"):
        text = written(value)
        assert value not in text
        masked = redact_text(text)
        assert masked == written(REDACTED)  # the mask where the escaped value was
        assert redact({"error": text}) == {"error": masked}


def test_every_key_is_masked_as_the_store_writes_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """A mapping key is stored as text (a non-text key as its ``str()``): the walk read only
    text keys, and none under a key named like a secret, so the secret in such a key was
    stored as it was."""
    from loopwright._json import dumps

    monkeypatch.setenv("MY_API_KEY", "supersecret123")

    class Tag:
        def __str__(self) -> str:
            return "tag supersecret123"

    for key, want in (
        (("x", "supersecret123"), "('x', '***')"),
        (Tag(), "tag ***"),
        (b"supersecret123", "b'***'"),
        (frozenset(["supersecret123"]), "frozenset({'***'})"),
    ):
        stored = dumps(redact({"evidence": {key: 1}}))
        assert json.loads(stored) == {"evidence": {want: 1}}, (key, stored)
    nested = {"password": {"supersecret123": 1, "sk-" + "a1" * 20: 2}, "n": {7: "x", None: 1}}
    stored = dumps(redact(nested))
    # keys masked alike are both kept, with what they held
    assert json.loads(stored) == {
        "password": {REDACTED: 1, f"{REDACTED}#2": 2},
        **json.loads(dumps({"n": {7: "x", None: 1}})),
    }


def test_a_key_whose_str_fails_is_read_as_the_store_writes_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A key whose ``__str__`` raises is written by ``_json`` as ``<TypeName>``; the walk
    called ``str()`` on it unguarded, so the user's exception escaped ``redact`` (and the
    engine's commit: the run crashed out of ``run_sync``, left running)."""
    from loopwright._json import dumps

    monkeypatch.setenv("MY_API_KEY", "supersecret123")

    class Odd:
        def __str__(self) -> str:
            raise RuntimeError("no text")

    key = Odd()
    out = redact({"evidence": {key: 1, "why": "supersecret123"}})
    assert out["evidence"][key] == 1
    assert json.loads(dumps(out)) == {"evidence": {"<Odd>": 1, "why": REDACTED}}


# A mapping printed inside a printed string (an exception whose message holds the text of
# another: ``repr`` escapes the inner quotes when the text holds both kinds) or JSON text
# inside a JSON string (an echoed error body) writes its quotes escaped; a key printed with a
# space in it; a PHP or Ruby mapping (``'password' => '…'``). Each was stored in clear.
_INNER = repr('a"b ' + repr({"password": "planted-9", "token": "planted-10"}))
_INNER_JSON = json.dumps(json.dumps({"password": "planted-9", "github_token": "planted-10"}))


@pytest.mark.parametrize(
    ("text", "want"),
    [
        (_INNER, _INNER.replace("planted-9", REDACTED).replace("planted-10", REDACTED)),
        (_INNER_JSON, _INNER_JSON.replace("planted-9", REDACTED).replace("planted-10", REDACTED)),
        ("{\\'secret\\': \\'planted-11\\'}", "{\\'secret\\': \\'***\\'}"),
        ("Cfg(token=\\'planted-12\\')", "Cfg(token=\\'***\\')"),
        ("{\\'client_secret\\': \\'planted-13\\'}", "{\\'client_secret\\': \\'***\\'}"),
        (
            "{\\'Authorization\\': \\'Basic cGxhbnRlZDE0\\'}",
            "{\\'Authorization\\': \\'Basic ***\\'}",
        ),
        ("{'Password ': 'planted-15'}", "{'Password ': '***'}"),
        ("{' api_key ': 'planted-15'}", "{' api_key ': '***'}"),
        ("'password' => 'planted-16',", "'password' => '***',"),
        ("password => planted-16", "password => ***"),
        ("password=C:\\dir\\planted-17 next", "password=*** next"),
    ],
)
def test_escaped_and_spaced_mappings_in_text_are_masked(text: str, want: str) -> None:
    assert redact_text(text) == want
    assert redact_text(want) == want  # masking twice changes nothing
    got = redact({"error": text})  # the clean scan does not pass it either
    assert got == {"error": want}


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("failed: {'iban': 'planted-18', 'n': 1}", "failed: {'iban': '***', 'n': 1}"),
        ("{\\'IBAN\\': \\'planted-18\\'}", "{\\'IBAN\\': \\'***\\'}"),  # escaped, any case
        ('{"x": "{\\"iban\\": \\"planted-18\\"}"}', '{"x": "{\\"iban\\": \\"***\\"}"}'),
        ("Account(iban='planted-18')", "Account(iban='***')"),
        ("{'pin-code ': 'planted-18'}", "{'pin-code ': '***'}"),
        ("{'pin_code': 1234}", "{'pin_code': 1234}"),  # a number is kept, as under the key
        ("the iban field is missing", "the iban field is missing"),
    ],
)
def test_a_declared_secret_field_written_into_text_is_masked(text: str, want: str) -> None:
    """A name declared secret (a spec's ``secret_fields``) masked its value under that key
    only: the same mapping printed into an exception's message (an effect's or actor's
    error) was stored in clear."""
    register_secret_field("iban")
    register_secret_field("pin_code")
    assert redact_text(text) == want
    assert redact_text(want) == want
    assert redact({"error": text}) == {"error": want}  # the clean scan does not pass it
    assert redact([text]) == [want]


_JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl"


@pytest.mark.parametrize(
    ("text", "want"),
    [
        (f"jwt {_JWT} end", "jwt *** end"),
        (f"abc.{_JWT}", "abc.***"),  # a run before a dot is no header of it
        (f"abcdefghij.{_JWT}", "abcdefghij.***"),
        (f"Bearer sk-x-{_JWT} ok", "Bearer *** ok"),  # glued to the token: masked with it
        (f"id_{_JWT}", f"id_{_JWT}"),  # no word's start: as before, not a token
        ("eyJabcd.eyJabcdef.sig", "eyJabcd.eyJabcdef.sig"),  # a header under 5 characters
        ("x-eyJ" * 4 + " " + _JWT, "x-eyJ" * 4 + " ***"),
    ],
)
def test_a_json_web_token_is_masked_with_what_it_is_glued_to(text: str, want: str) -> None:
    assert redact_text(text) == want
    assert redact({"e": text}) == {"e": want}


def test_a_text_of_many_token_starts_is_read_in_one_pass() -> None:
    """``x-eyJ`` repeated: each ``eyJ`` after a ``-`` starts a word, and the pattern of a JWT
    tried from each read the run to its end (100 KB took seconds, 200 KB four times as long;
    bench/RESULTS.md, stop 44, review44). The outcome is checked here, the time measured there:
    the run ending in a token is masked whole, one without a token is kept."""
    run = "x-eyJ" * 20_000
    assert redact_text(run) == run
    assert redact_text(f"{run} {_JWT}") == f"{run} ***"
    assert redact_text(f"{run}; {run}") == f"{run}; {run}"
    assert redact({"out": [run, f"{run}\n{_JWT}"]}) == {"out": [run, f"{run}\n***"]}


@pytest.mark.parametrize(
    ("text", "want"),
    [
        # a printed mapping under the other names of SECRET_FIELDS
        ("{'pwd': 'hunter2x'}", "{'pwd': '***'}"),
        ('{"PWD": "hunter2x"}', '{"PWD": "***"}'),
        ("{'cookie': 'sid=abc123; theme=dark'}", "{'cookie': '***'}"),
        ("headers {'Set-Cookie': 'sid=abc123; Path=/'}", "headers {'Set-Cookie': '***'}"),
        ("{'private_key': 'MIIEvQIBADANBgkq'}", "{'private_key': '***'}"),
        ("{\\'private-key\\': \\'MIIEvQIBADANBgkq\\'}", "{\\'private-key\\': \\'***\\'}"),
        ("{'passphrase': 'correct horse'}", "{'passphrase': '***'}"),
        ("{'credentials': 'u1:p2'}", "{'credentials': '***'}"),
        ("{'session_key': 'a1b2c3d4'}", "{'session_key': '***'}"),
        ("{'aws_access_key': 'a1b2c3d4'}", "{'aws_access_key': '***'}"),
        ("{'bearer': 'a1b2c3d4'}", "{'bearer': '***'}"),
        (
            "{'private_key': '-----BEGIN PRIVATE KEY-----\\nMIIEvQ\\n-----END PRIVATE KEY-----'}",
            "{'private_key': '***'}",
        ),
        (
            "key:\n-----BEGIN EC PRIVATE KEY-----\nMHcCAQ\n-----END EC PRIVATE KEY-----\n",
            "key:\n***\n",
        ),
        # a command line
        ("exec: psql --password hunter2 -h db", "exec: psql --password *** -h db"),
        ("cli --token ghx123def456 --verbose", "cli --token *** --verbose"),
        ("cli --github-token Zq8abcdefgh run", "cli --github-token *** run"),
        ("cli --api-key 'Abc-def-ghi'", "cli --api-key '***'"),
        ("mysql -password S3cretPass", "mysql -password ***"),
        ("cli --db-password my-secret-pw", "cli --db-password ***"),
        # log-like text
        ("auth ok token: abc123def456 for bob", "auth ok token: *** for bob"),
        ("GITHUB_TOKEN : Zq8abcdefgh1", "GITHUB_TOKEN : ***"),
        ("client secret: s3cr3tvalue99", "client secret: ***"),
        ("login password=x", "login password=***"),
        ("DB password: hunter2", "DB password: ***"),
        ("header bearer:abcdef123456", "header bearer:***"),
        ("header Bearer=abcdef123456", "header Bearer=***"),
        # URL-encoded
        (
            "cb?next=%2Flogin%3Fuser%3Dbob%26password%3Dhunter2%26x%3D1",
            "cb?next=%2Flogin%3Fuser%3Dbob%26password%3D***%26x%3D1",
        ),
        ("state=api_key%3DAbc123", "state=api_key%3D***"),
        (
            "r?to=https%3A%2F%2Fbob%3Ahunter2%40db.example%2Fx",
            "r?to=https%3A%2F%2F***%40db.example%2Fx",
        ),
        ("https://bob:p%40ss%40w0rd@host/x", "https://***@host/x"),
        ("https://bob%40mail.com:hunter2@host/x", "https://***@host/x"),
    ],
)
def test_secrets_in_command_lines_logs_and_encoded_text_are_masked(text: str, want: str) -> None:
    """Shapes that were stored in clear before stop 44: the other secret field names in a
    printed mapping, a command line's options, log lines, URL-encoded text."""
    assert redact_text(text) == want
    assert redact_text(want) == want  # masking twice changes nothing
    # in a record, through the clean scan, the same
    assert redact({"message": text}) == {"message": want}


@pytest.mark.parametrize(
    "text",
    [
        "The password is required; set a token for access and keep the secret safe.",
        "Use the --password option, or the --token flag.",
        "see --token docs and --password prompt",
        "Token: the unit of text a model reads",
        "token: 12345678 (a fencing counter)",
        "max_tokens: 800, tokens: 12",
        "Secret: the villain was the butler",
        "a cookie jar, private keys and a session key are words",
        "cd $PWD; echo pwd",
        "{'cookies': 3, 'pwd_len': 'eight'}",
        "the bearer of bad news",
        "percent%3Dsign and 50%3A50",
        "password reset: see https://example.com/reset",
    ],
)
def test_prose_about_passwords_and_tokens_stays_readable(text: str) -> None:
    assert redact_text(text) == text
    record = {"message": text}
    assert redact(record) == record


@pytest.mark.parametrize(
    ("unit", "per", "want"),
    [
        # (the unit repeated to about 100 KB, a whole number of times ``per``; what ``per``
        # units become, or with ``per`` 0 what the whole text becomes)
        ("--token ", 2, "--token *** "),  # the next option is the value
        (" --password aaaa", 1, " --password aaaa"),  # lower-case, then no option: prose
        ("token:", 1, "token:"),
        ("token: aaaa ", 1, "token: aaaa "),  # no digit
        ("password%3D", 0, "password%3D***"),  # the rest is one value
        ("token%3Da%", 0, "token%3D***"),
        ("a%3A%2F%2F", 1, "a%3A%2F%2F"),
        ("x%3A%2F%2Fu%3A", 1, "x%3A%2F%2Fu%3A"),
        ("'pwd': '", 1, "'pwd': '"),  # every value empty
        ("'a-a-", 1, "'a-a-"),
        ("bearer:", 1, "bearer:"),
        ("-----BEGIN RSA PRIVATE KEY-----", 0, REDACTED),  # cut before its END: to the end
        # stop 45's shapes
        ("--password hunter ", 1, "--password *** "),
        ("--token option ", 1, "--token option "),
        ("--token '", 2, "--token '***'"),
        ("'--token', '", 1, "'--token', '"),  # every value empty
        ("Cookie: a=", 0, "Cookie: ***"),  # one line
        ("set-cookie:", 1, "set-cookie:"),  # no ``name=`` after it
        ("pwd=", 0, "pwd=***"),
        ("PWD=/", 1, "PWD=/"),  # a path
        ('password: "', 2, 'password: "***"'),
        ('password: "a\\"', 2, 'password: "***"a\\"'),  # an escaped quote is inside
    ],
)
def test_adversarial_repetitions_of_the_shapes_are_masked_exactly(
    unit: str, per: int, want: str
) -> None:
    """100 KB of one shape's prefix (or near miss) repeated: a pattern that backtracked would
    take minutes (bench/redact_adversarial.py and bench/RESULTS.md have the timings); here the
    exact result is checked, on both paths."""
    n = 100_000 // len(unit)
    n -= n % max(per, 1)
    text = unit * n
    out = want if per == 0 else want * (n // per)
    assert redact_text(text) == out
    assert redact_text(out) == out
    assert redact({"m": text}) == {"m": out}


def test_an_option_after_many_dashes_is_masked() -> None:
    text = "--a-" * 25_000 + " --token Abc123456"
    assert redact_text(text) == "--a-" * 25_000 + " --token ***"


def test_a_long_text_is_triggered_as_before_its_needle_free_characters_were_deleted() -> None:
    """``triggered`` looks for the prefilter's needles in a long ASCII text with every
    character no needle holds deleted (cpu46c): each needle is still found whole, so its answer
    — True, None (``private``/``session`` for the clean scan) or False — is the one it gives on
    the text itself, next to a trigger or a needle at the joins of record-like filler too."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from loopwright import _redact_shapes

    needle_chars = set("".join(_redact_shapes.PREFILTER))
    assert not needle_chars & set(_redact_shapes._NOT_NEEDLE.decode())
    assert set(_redact_shapes._NOT_NEEDLE.decode()) | needle_chars >= set(map(chr, range(128)))
    filler = '{"cycle":18,"score":0.5,"digest":"5317fab56e5769734564ede5ba46bc6c","x":[1,2]}'
    texts = st.lists(st.sampled_from(_FRAGMENTS) | st.text(max_size=3), max_size=8).map(_joined)

    @settings(max_examples=800, deadline=None)
    @given(texts, texts, st.booleans())
    def check(a: str, b: str, passw: bool) -> None:
        low = f"{a}{filler * 3}{b}".lower()
        assert len(low) >= _redact_shapes._STRIP_MIN
        got = _redact_shapes.triggered(low, passw=passw)
        saved = _redact_shapes._STRIP_MIN
        try:
            _redact_shapes._STRIP_MIN = 10**9  # the text itself, as before the cut
            want = _redact_shapes.triggered(low, passw=passw)
        finally:
            _redact_shapes._STRIP_MIN = saved
        assert got == want, low
        assert bool(got) == _reference_triggered(low, passw), low

    check()


def test_a_text_longer_than_the_strip_bound_is_triggered_without_a_copy() -> None:
    """The deletion copies the text twice (its bytes and what is left): only a text of at most
    ``_STRIP_MAX`` characters is copied so, and a longer one (an eval case's text, which grows
    with the run) is read in place — transient memory stays bounded whatever the length (the
    uncapped cut was reverted at stop 46 for tests/integration/test_eval_case_memory.py)."""
    import tracemalloc

    from loopwright import _redact_shapes

    long = ('{"message":"still open","score":0.5,"findings":[1,2,3]},' * 4000).lower()
    assert len(long) > _redact_shapes._STRIP_MAX
    tracemalloc.start()
    try:
        assert _redact_shapes.triggered(long, passw=True) is False
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < len(long) // 10, (peak, len(long))
    short = long[: _redact_shapes._STRIP_MAX]
    assert _redact_shapes.triggered(short, passw=True) is False


def test_the_clean_scan_asks_for_no_value_pattern_when_no_secret_value_is_known(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No secret value known (none in the environment, none registered): the clean scan makes
    no call for a pattern of them (a call every commit), and still finds a secret by shape."""

    def no_call(values: tuple[str, ...]) -> None:
        raise AssertionError(f"asked for a pattern of {values}")

    monkeypatch.setattr(_redact, "_values_pattern", no_call)
    pats = _redact._key_patterns_of(_redact.SECRET_FIELDS)
    assert pats is not None
    text = '{"message":"still open","score":0.5}'
    assert _redact._clean_text(text, (), _redact.SECRET_FIELDS, pats) is True
    keyed = '{"m":"sk-proj-abcdefghijklmnop"}'
    assert _redact._clean_text(keyed, (), _redact.SECRET_FIELDS, pats) is False


@pytest.mark.parametrize(
    ("text", "masked"),
    [
        # the ``:`` a message puts after a URL is the message's (outside probe, stop 51)
        (
            "GET https://h.example/v1?api_key=sk12345678abcdef: [Errno 111] Connection refused",
            "GET https://h.example/v1?api_key=***: [Errno 111] Connection refused",
        ),
        ("https://h/x?token=abcdefgh12345678:\tnext", "https://h/x?token=***:\tnext"),
        ("https://h/x?sig=ab::cd:: x", "https://h/x?sig=***: x"),
        # a ``:`` inside the value, or ending the text, may be the value's: masked with it
        ("https://h/x?token=abc:def more", "https://h/x?token=*** more"),
        ("https://h/x?api_key=abcdefgh12345678:", "https://h/x?api_key=***"),
        ("https://h/x?secret=a:b:c&x=1", "https://h/x?secret=***&x=1"),
    ],
)
def test_a_query_value_is_masked_without_the_colon_after_it(text: str, masked: str) -> None:
    assert redact_text(text) == masked
    assert redact_text(masked) == masked  # masking again changes nothing
