"""Proposals and verdicts: digests, kinds, serialisation, validation."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

import loopwright as lw


def test_digest_ignores_note_and_usage_and_edit_order() -> None:
    a = lw.Proposal(edits=(lw.Edit("d", "x", 1), lw.Edit("d", "y", 2)), note="a", usage=lw.Usage(1))
    b = lw.Proposal(edits=(lw.Edit("d", "y", 2), lw.Edit("d", "x", 1)), note="b")
    assert a.digest() == b.digest()
    assert a.digest() != lw.Proposal.edit("d", {"x": 1, "y": 3}).digest()


def test_replace_is_a_distinct_visible_kind() -> None:
    p = lw.Proposal(replace={"d": {"x": 1}})
    assert p.kind == "replace"
    assert p.digest() != lw.Proposal.edit("d", {"x": 1}).digest()
    assert [e.ref for e in p.changes()] == ["d/x"]
    assert lw.Proposal().kind == "noop"
    assert lw.Proposal(plan={"s": "done"}).kind == "plan"


@given(
    st.dictionaries(
        st.text(min_size=1, max_size=4), st.integers() | st.text(max_size=4), max_size=4
    )
)
def test_proposal_round_trip(parts: dict[str, object]) -> None:
    p = lw.Proposal.edit("doc", parts, note="n", usage=lw.Usage(0.5, 3, 1.0))
    back = lw.Proposal.from_dict(p.to_dict())
    assert back.digest() == p.digest()
    assert back.to_dict() == p.to_dict()


@pytest.mark.parametrize("score", [-0.1, 1.5, math.nan])
def test_verdict_score_is_validated(score: float) -> None:
    with pytest.raises(ValueError, match="score"):
        lw.Verdict(passed=True, score=score)


def test_verdict_value_and_round_trip() -> None:
    assert lw.Verdict(passed=True).value == 1.0
    assert lw.Verdict(passed=False).value == 0.0
    v = lw.Verdict(
        passed=False,
        score=0.4,
        findings=(lw.Finding("m", "d", "x"),),
        evidence={"e": 1},
        usage=lw.Usage(0.1),
        checked=("d/x",),
    )
    assert lw.Verdict.from_dict(v.to_dict()) == v


def test_owned_shares_only_what_cannot_change_or_be_stored_otherwise() -> None:
    """The engine's copy of a proposal: a proposal of immutable values that a store gives back
    as they are is its own copy; anything else is copied as the store will read it back."""
    plain = lw.Proposal(edits=(lw.Edit("doc", "a", "text"), lw.Edit("doc", "b", 3)), note="n")
    assert plain.owned() is plain
    listed = lw.Proposal.edit("doc", {"lines": [1, 2]})
    copy = listed.owned()
    assert copy is not listed and copy == listed
    assert copy.edits[0].value is not listed.edits[0].value
    odd = lw.Proposal.edit("doc", {"x": float("nan"), "t": "a\ud83db", "n": 10**30})
    stored = odd.owned()
    assert stored is not odd
    assert {e.part: e.value for e in stored.edits} == {"x": None, "t": "a\ufffdb", "n": 10**30}
    # its plan is shared only while it is the immutable default: an empty dict of the actor's
    # own (which it, or a verifier handed the proposal, could still fill) is copied
    with pytest.raises(TypeError):
        plain.plan["s1"] = "done"  # type: ignore[index]
    mine: dict[str, str] = {}
    planless = lw.Proposal(edits=(lw.Edit("doc", "a", "text"),), plan=mine)
    assert planless.owned() is not planless and planless.owned().plan is not mine
    back = lw.Proposal.from_dict(plain.to_dict())
    assert back.owned() is back and back == plain


def _reference_digest(p: lw.Proposal) -> str:
    """The digest as it was defined before text edits got their own path: the canonical JSON
    (sorted keys, compact, ASCII) of what the proposal changes, hashed."""
    import hashlib
    import json

    def canon(v: object) -> str:
        return json.dumps(v, sort_keys=True, separators=(",", ":"), default=str)

    body: dict[str, object] = {
        "edits": sorted((e.artifact, e.part, canon(e.value)) for e in p.edits),
        "replace": canon(p.replace) if p.replace else None,
        "plan": sorted(p.plan.items()) if p.plan else [],
        "new_steps": [s.to_dict() for s in p.new_steps],
    }
    if p.effects:
        body["effects"] = [c.canonical() for c in p.effects]
    return hashlib.sha256(canon(body).encode()).hexdigest()[:32]


_names = st.text(
    st.characters(min_codepoint=33, max_codepoint=126, blacklist_characters="/"),
    min_size=1,
    max_size=6,
)
_texts = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12) | st.sampled_from(
    ['"', "\\", "\x00", "\u2028", "é", "😀", "\ud800"]
)


@given(
    st.lists(st.tuples(_names, _names, _texts | st.integers() | st.none()), max_size=4),
)
def test_digest_of_text_edits_is_the_canonical_json_hash(
    rows: list[tuple[str, str, object]],
) -> None:
    """Text edits (the common proposal) are hashed without building the canonical body: the
    digest is the same as the canonical JSON's (stored digests, and so duplicate detection
    across a resume, do not change), for any names and text, escapes included."""
    p = lw.Proposal(edits=tuple(lw.Edit(a, b, v) for a, b, v in rows))
    assert p.digest() == _reference_digest(p)


def test_digest_of_text_edits_builds_no_json(monkeypatch: pytest.MonkeyPatch) -> None:
    """A proposal of text edits is hashed without the JSON encoder (which cost a twentieth of
    a trivial cycle), to the digest earlier versions stored."""
    from loopwright import _effects

    class _NoEncoder:
        def encode(self, value: object) -> str:
            raise AssertionError(f"the JSON encoder ran on {value!r}")

    monkeypatch.setattr(_effects, "_CANON", _NoEncoder())
    assert (
        lw.Proposal.edit("doc", {"body": "draft 18"}).digest() == "4a700ad40d3f8a0b93d006a8226a2137"
    )
    two = lw.Proposal(edits=(lw.Edit("b", "z", 'é"x'), lw.Edit("a", "y", "q")))
    assert two.digest() == "0ffec659d2f9239d72a1c91526a25075"
