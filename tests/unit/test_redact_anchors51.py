"""The shape search tried only where a shape can start (``_redact_anchors``, stop 51) masks
exactly what the search before it masked: ``SHAPES.sub(masked_shape, text)`` over the whole text
(kept as the oracle, and as the search of a text holding one of the four characters beyond
ASCII that ``(?i)`` reads as ASCII letters). The texts mix code (the LDB traces), prose (the
docs), every string of the redaction tests, the planted secrets of ``bench/redact_catch.py``,
the adversarial units of ``bench/redact_adversarial.py`` and strings generated from each
alternative of ``SHAPES`` itself."""

from __future__ import annotations

import ast
import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loopwright import _redact, _redact_anchors
from loopwright._redact import redact_text
from loopwright._redact_anchors import ANCHORED, KEY_HEADS, shapes_sub
from loopwright._redact_shapes import SHAPE_ALTERNATIVES, SHAPES
from loopwright._redact_substitutions import masked_shape

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"
LDB = ROOT / "tests" / "data" / "ldb" / "humaneval"


def _oracle(text: str) -> str:
    return SHAPES.sub(masked_shape, text)


def _bench(name: str) -> Any:
    sys.path.insert(0, str(BENCH))
    try:
        return __import__(name)
    finally:
        sys.path.remove(str(BENCH))


def _code() -> list[str]:
    """The programs of the LDB traces (the text an import masks)."""
    out: list[str] = []
    for path in sorted(LDB.glob("*/*.jsonl")):
        for line in path.read_text().splitlines():
            record = json.loads(line)
            out += [p for p in record.get("implementations", []) if isinstance(p, str)]
    return out


def _prose() -> list[str]:
    return [p.read_text() for p in sorted((ROOT / "docs").glob("*.md"))]


def _test_strings() -> list[str]:
    """Every string of three characters or more written in the redaction tests."""
    out: set[str] = set()
    for path in sorted((ROOT / "tests" / "unit").glob("test_redact*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                out.add(node.value)
    return sorted(t for t in out if len(t) >= 3)


def _bench_strings() -> list[str]:
    catch, adversarial = _bench("redact_catch"), _bench("redact_adversarial")
    out = [text for _, text, _ in catch.secrets()]
    out += list(adversarial.UNITS.values()) + list(adversarial.UNITS_KNOWN.values())
    return out


CODE = _code()
PROSE = _prose()
CORPUS = _test_strings() + _bench_strings()
# Hypothesis finds no string of these two through their lookaheads (the corpus holds them)
_UNGENERATED = ("hpair", "netrcfirst")


def test_every_alternative_of_the_shapes_has_an_anchor_rule() -> None:
    assert set(SHAPE_ALTERNATIVES) == ANCHORED
    assert "|".join(SHAPE_ALTERNATIVES.values()) == SHAPES.pattern


def test_no_keyword_of_the_scan_is_a_prefix_of_another() -> None:
    # (the scan finds one keyword at a place: a keyword that began another would be lost)
    keys = {*_redact_anchors._AT, *_redact_anchors._QKEY_WORDS, *_redact_anchors._FLAG_WORDS}
    keys |= {*KEY_HEADS, *_redact_anchors._SEPARATES}
    for a in sorted(keys):
        assert re.fullmatch(_redact_anchors.WORDS, a)
        assert not [b for b in keys if b != a and b.startswith(a)], a


def test_code_and_prose_are_masked_as_the_whole_text_search_masks_them() -> None:
    code, prose = "\n".join(CODE), "\n".join(PROSE)
    assert shapes_sub(code, code.lower()) == _oracle(code)
    masked = shapes_sub(prose, prose.lower())
    assert masked == _oracle(prose)
    assert masked != prose  # (the docs show secrets' shapes: some are masked)


def test_every_corpus_string_is_masked_as_the_whole_text_search_masks_it() -> None:
    changed = 0
    for text in CORPUS:
        for variant in (text, text.upper(), text.title(), f"x{text}\\n{text}'"):
            want = _oracle(variant)
            assert shapes_sub(variant, variant.lower()) == want, variant
            changed += want != variant
    assert changed > 500  # (the corpus is mostly secrets)


@pytest.mark.parametrize("unit", sorted({*_bench("redact_adversarial").UNITS.values()}))
def test_an_adversarial_repetition_is_masked_as_the_whole_text_search_masks_it(unit: str) -> None:
    text = unit * (3000 // len(unit))
    assert shapes_sub(text, text.lower()) == _oracle(text)


_SEPARATORS = (
    *("", " ", "\n", "\\n", "\t", "=", ": ", "'", '"', ", ", "(", "-", "--", "_", "?", "&"),
    *(";", "://", "%3D", "\\", "\\'", "@", "/", ")", "\u017f", "\u212a", "\u0130", "\u0131"),
    "é",
)
_CASES = (str, str.upper, str.lower, str.title, str.swapcase)


def _generated() -> st.SearchStrategy[str]:
    return st.one_of(
        *(
            st.from_regex(pattern, fullmatch=True)
            for name, pattern in SHAPE_ALTERNATIVES.items()
            if name not in _UNGENERATED
        )
    )


def _slice(pool: list[str]) -> st.SearchStrategy[str]:
    """A piece of one of ``pool``'s texts, up to 300 characters."""
    return st.tuples(st.sampled_from(pool), st.integers(0, 10**6), st.integers(1, 300)).map(
        lambda t: t[0][t[1] % max(len(t[0]), 1) :][: t[2]]
    )


_FRAGMENT = st.tuples(
    st.one_of(
        _slice(CODE), _slice(PROSE), st.sampled_from(CORPUS), _generated(), st.text(max_size=12)
    ),
    st.sampled_from(_CASES),
).map(lambda t: t[1](t[0]))
_TEXT = st.lists(st.tuples(_FRAGMENT, st.sampled_from(_SEPARATORS)), max_size=10).map(
    lambda parts: "".join(f + sep for f, sep in parts)
)


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(_TEXT)
def test_mixed_text_is_masked_as_the_whole_text_search_masks_it(text: str) -> None:
    assert shapes_sub(text, text.lower()) == _oracle(text)


@settings(max_examples=100, suppress_health_check=[HealthCheck.too_slow])
@given(_TEXT)
def test_redact_text_masks_as_it_did_with_the_whole_text_search(
    text: str,
) -> None:
    # the whole net (``curl -u``, Docker's ``auth``, Twilio's token change the text before
    # the shapes are searched: the lower-cased copy must follow), against the net with the
    # search before this one
    fast = redact_text(text)
    saved = _redact.shapes_sub
    _redact.shapes_sub = lambda s, low: _oracle(s)  # type: ignore[assignment]
    try:
        assert fast == redact_text(text)
    finally:
        _redact.shapes_sub = saved


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(st.from_regex(SHAPE_ALTERNATIVES["keys"], fullmatch=True))
def test_every_key_starts_with_a_head_the_scan_looks_for(key: str) -> None:
    assert key.lower().startswith(KEY_HEADS) or (
        key[:2] in ("SK", "AC") and key[2] in "0123456789abcdef"
    )
    assert (0, ("keys",)) in _redact_anchors._places(key, key.lower())


@pytest.mark.parametrize(
    "text",
    [
        "pa\u017f\u017fword=hunter2 token=abc",  # ſ: an ``s`` to ``(?i)``
        "\u212aEY? api_\u212aey=hunter2",  # K (Kelvin): a ``k``
        "\u0130 \u0131 --token Abc12345",  # İ lowers to two characters
        "x\u0130'\u017fecret_token': 'v' \u0130 \u017f--token Abc12345 a\u017f-token:A1b2c3d4",
        "\u0130" * 3 + "https://u:p@h Pa\u017f\u017fWORD=x \u212a:--a-pwd ab1234",
    ],
)
def test_a_text_with_a_letter_that_case_folds_to_ascii_is_masked_as_before(text: str) -> None:
    assert shapes_sub(text, text.lower()) == _oracle(text) != text


def test_a_code_text_is_not_searched_character_by_character() -> None:
    """The defect (stop 51): once a text passed the pre-check (code does: it holds ``=``),
    ``SHAPES`` was tried at each of its characters, about 2 µs each (an LDB import spent
    95 % of its time there). Now the expression runs only where a secret is: on the LDB
    programs with one secret at the end, once."""
    calls: list[str] = []

    class Counting:
        def __getattr__(self, name: str) -> Any:
            calls.append(name)
            return getattr(SHAPES, name)

    code = "\n".join(CODE[:200]) + "\npassword = 'hunter2'\n"
    assert "=" in code
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_redact, "SHAPES", Counting(), raising=False)
        mp.setattr(_redact_anchors, "SHAPES", Counting(), raising=False)
        out = redact_text(code)
    assert out.endswith("\npassword = '***'\n")
    assert calls == ["match"]
