"""The redaction net's clean case as one automaton pass (``_redact_any``, ratio55): where it
finds none of its words the prefilter it stands in front of answers "nothing triggered" too,
so the net masks, and the stores keep, exactly what they did without it."""

from __future__ import annotations

import random

import pytest

from loopwright import _redact, _redact_any, _redact_shapes

pytest.importorskip("ahocorasick_rs")

_WORDS = _redact_any.WORDS
# every word, cut at each place, and what sits around them in the engine's JSON records
_PIECES = (
    *_WORDS,
    *(w[:k] for w in _WORDS for k in range(1, len(w))),
    *(w[k:] for w in _WORDS for k in range(1, len(w))),
    *('"', "\\", ":", " ", "_", "-", "%", "'", "e-6", "tokens", "cost_usd", "held_out", "é"),
)


def test_the_automaton_is_built() -> None:
    # a core dependency: the fast path is the one the engine runs
    assert _redact_any._AUTOMATON is not None


def test_every_word_is_found_wherever_it_sits() -> None:
    around = '{"cycle":3,"usage":{"cost_usd":0.0,"tokens":0,"seconds":7.1e-06}}é'
    assert _redact_any.surely_untriggered(around)
    for w in _WORDS:
        for text in (w, around + w, w + around, around[:20] + w + around[20:]):
            assert not _redact_any.surely_untriggered(text), (w, text)


def test_untriggered_by_the_automaton_is_untriggered_by_the_prefilter() -> None:
    r = random.Random(55)
    seen_clean = seen_hit = 0
    for _ in range(30_000):
        low = "".join(r.choice(_PIECES) for _ in range(r.randint(0, 8)))
        hit = _redact_shapes.triggered(low, passw=True)
        if _redact_any.surely_untriggered(low):
            seen_clean += 1
            assert hit is False, low
        else:
            seen_hit += 1
            # (and the automaton reads no word into a text that has none)
            assert any(w in low for w in _WORDS), low
    assert seen_clean > 1_000 and seen_hit > 1_000  # both sides were exercised


@pytest.mark.parametrize(
    "data",
    [
        {"note": "the api_key is sk-abcdefghijklmnopqrstuvwx1234"},
        {"password": "hunter2"},
        {"x": "postgres://user:pw@host/db"},
        {"private_key": "x"},
        {"session": "abc"},
        {"cycle": 3, "value": "draft 3", "usage": {"tokens": 0, "seconds": 7.1e-06}},
        {"message": 'said {\\"token\\": \\"abc\\"}'},
        {"k": "Bearer abcdefghijklmnop"},
    ],
)
def test_the_net_masks_the_same_with_and_without_the_automaton(
    data: dict[str, object], monkeypatch: pytest.MonkeyPatch
) -> None:
    with_it = _redact.redact_unique([data])
    monkeypatch.setattr(_redact_any, "_AUTOMATON", None)
    assert _redact.redact_unique([data]) == with_it


def test_a_trivial_cycles_record_takes_the_one_pass() -> None:
    # (the text the commit's net scans on the trivial loop, lower-cased: no word in it, so the
    # prefilter's thirty tests are not run; a word added to the automaton that every record
    # holds would turn this off without changing an answer)
    text = (
        '[{"cycle":39,"proposal":{"kind":"edit","edits":[{"artifact":"doc","part":"body",'
        '"value":"draft 39"}]},"digest":"9e450669948224b9e6e4992d526e11cb","visible":{"check":'
        '{"passed":false,"score":0.5,"findings":[{"message":"still open","artifact":"doc",'
        '"part":"body","dimension":"text"}]}},"score":0.5,"improved":false,"decision":"revise",'
        '"calls":[{"who":"actor"},{"who":"verifier:check"}],"usage":{"seconds":0.00013}},'
        '[{},{"kind":"edit","parts":["doc/body"],"effects":[],"usage":{"cost_usd":0.0,'
        '"tokens":0,"seconds":0.0},"seconds":7.08e-6},{"verifier":"check","held_out":false,'
        '"passed":false,"score":0.5,"findings":1},{"decision":"revise","best_score":0.5,'
        '"duplicate":false,"lease":1}],null]'
    )
    assert _redact_any.surely_untriggered(text.lower())
