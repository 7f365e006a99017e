"""The proposal digest's bytes do not change: approvals are bound to a digest of the exact
action and stored digests are compared after upgrades (stop 49, digest49: the text edits'
canonical text is built in one pass, ``_digest_text.escaped_twice``). The digests below were
computed by the tree before that change."""

from __future__ import annotations

import hashlib
import random
from json.encoder import encode_basestring_ascii as ascii_json

import pytest

import loopwright as lw
from loopwright import Edit, Proposal, _digest_text
from loopwright._calls import _async_functions, _inspect_async, _is_async
from loopwright._effects import canon

_BIG = 'The quick brown fox said "hi" \\ and left.\n\t' * 120
_UNI = "café — “quoted” 😀 \u2028 line\x7f end " * 60

PINNED = {
    "449b83e2d8d38e79f651cd579ea932f5": Proposal.edit("doc", {"p1": "value 3"}),
    "c725a1693df8b46dbff6600a73fa5d64": Proposal.edit("doc", {"pad": "x" * 1500, "p1": "value 1"}),
    "370905811c1676dbe6520a058fbdc031": Proposal.edit(
        "doc", {"q": 'a"b\\c\n\r\t\x00\x1f\x7f/</script>'}
    ),
    "ce136700d31058b2292ce0721a148e9d": Proposal.edit("doc", {"u": "naïve café 😀 \u2028 日本語"}),
    "919fbc34a0aae6241a9b6bffaf450cf3": Proposal.edit("doc", {"body": _BIG}),
    "4746a8ecdb408444ced835246a10d07e": Proposal.edit("doc", {"body": _UNI, "title": "T"}),
    "19ad7db3ea8f4a90070f924ba9f2970b": Proposal(
        edits=(Edit("a", "p", 'z"'), Edit("a", "p", "z!"), Edit("a", "p", "é"))
    ),
    "417dda590cd7f314f9a7865eeafd9089": Proposal(
        edits=(Edit("zeta", "b", "1"), Edit("alpha", "c", "2"), Edit("alpha", "a", "3"))
    ),
    "36432801bdd3d1c8a91bb663a04b9a12": Proposal.edit(
        "doc", {"cfg": {"b": [1, 2.5, {"z": None, "a": True}], "a": "é\n"}}
    ),
    "95ebfc0168e216e00aa80d333e7d9702": Proposal.edit(
        "doc", {"f": 0.1, "g": 1e16, "h": -0.0, "i": 1.5e-7, "j": 3.0}
    ),
    "31202176d2035e39f74fabb776f2a828": Proposal.edit(
        "doc", {"n": 2**70, "m": -(2**64) - 1, "k": 12345678901234567890}
    ),
    "ac85ee1b8b3a74b87a9fb73ecba33936": Proposal.edit("doc", {"t": "text", "n": 5}),
    "051bfd755f53bb3e453189c3c4e237fe": Proposal(
        replace={"doc": {"a": "x" * 2000, "b": {"c": "é"}}}
    ),
    "15badb6db7698f76aa470d9b05d40752": Proposal(
        edits=(Edit("doc", "p", "v"),), plan={"s2": "done", "s1": "active"}
    ),
    "ea9df6b8fc9c9767b275285a997235c4": Proposal(
        edits=(Edit("doc", "p", "v" * 3000),),
        effects=(lw.EffectCall("pay", {"amount": 120.5, "memo": 'é "x"'}, key="k1"),),
    ),
    "4ef730470765c68a9ae6d17396032613": Proposal.edit("doc", {"p": ""}),
}


@pytest.mark.parametrize("digest", list(PINNED))
def test_known_digests_are_unchanged(digest: str) -> None:
    p = PINNED[digest]
    assert p.digest() == digest
    assert p.digest() == digest  # again: a large value's bytes from the cache


def _reference(p: Proposal) -> str:
    """The digest as the generic body writes it (what the text-edit path stands for)."""
    body = {
        "edits": sorted((e.artifact, e.part, canon(e.value)) for e in p.edits),
        "replace": None,
        "plan": [],
        "new_steps": [],
    }
    return hashlib.sha256(canon(body).encode()).hexdigest()[:32]


def _text(r: random.Random, n: int) -> str:
    pool = ["a", "Z", " ", '"', "\\", "\n", "\x00", "\x1f", "\x7f", "~", "é", "😀", "\u2028"]
    ascii_only = r.random() < 0.5
    out = []
    for _ in range(n):
        c = r.choice(pool[:10]) if ascii_only else r.choice(pool)
        out.append(c)
    return "".join(out)


def test_text_edits_digest_as_the_generic_body_does() -> None:
    r = random.Random(49)
    for _ in range(300):
        edits = []
        for _ in range(r.randint(1, 4)):
            n = r.choice([0, 5, 200, 1023, 1024, 3000])
            edits.append(Edit(r.choice(["doc", "b"]), r.choice(["p", "q", "é"]), _text(r, n)))
        p = Proposal(edits=tuple(edits))
        assert p.digest() == _reference(p)
        # an equal text that is another object: the cached bytes are the same bytes
        again = Proposal(edits=tuple(Edit(e.artifact, e.part, "".join(e.value)) for e in edits))
        assert again.digest() == p.digest()


def test_escaped_twice_is_the_escaper_twice_and_a_cache_hit_is_the_same_value() -> None:
    a, b = "x" * 2000, "y" * 2000  # one length: one cache slot
    assert _digest_text.escaped_twice(a) == ascii_json(ascii_json(a)).encode()
    assert _digest_text.escaped_twice(b) == ascii_json(ascii_json(b)).encode()
    assert _digest_text.escaped_twice(a) == ascii_json(ascii_json(a)).encode()
    lone = "\ud800" + "q" * 1500  # not UTF-8: the escaper's path
    assert _digest_text.escaped_twice(lone) == ascii_json(ascii_json(lone)).encode()


def test_is_async_remembers_functions_and_methods_and_answers_as_inspect() -> None:
    async def coro() -> None:
        return None

    def plain() -> None:
        return None

    class Obj:
        async def m(self) -> None:
            return None

        def n(self) -> None:
            return None

        async def __call__(self) -> None:
            return None

    o = Obj()
    for fn in (coro, plain, o.m, o.n, o, Obj.m, Obj.n):
        assert _is_async(fn) is _inspect_async(fn)
        assert _is_async(fn) is _inspect_async(fn)
    assert _async_functions.get(coro) is True
    assert _async_functions.get(plain) is False
    assert _async_functions.get(Obj.m) is True  # a bound method answers by its function
    n = len(_async_functions)
    del coro, plain
    import gc

    gc.collect()
    assert len(_async_functions) <= n - 2  # a function that dies leaves the cache


def test_escaped_twice_is_the_escaper_twice_for_every_code_point() -> None:
    # review50a: each of the first 2,048 characters alone (every ASCII one on orjson's path,
    # DEL on the escaper's), every other one in a run of 64 (surrogates included), and texts
    # long enough to be remembered, read twice
    texts = [chr(c) for c in range(0x800)]
    texts += ["".join(map(chr, range(c, c + 64))) for c in range(0x800, 0x110000, 64)]
    for t in texts:
        assert _digest_text.escaped_twice(t) == ascii_json(ascii_json(t)).encode(), ascii(t)
    for ch in ["\x00", "\x1f", '"', "\\", "/", "\x7f", "\u2028", "\ud83d", "\U0001f600"]:
        v = "a" * 1100 + ch * 3
        want = ascii_json(ascii_json(v)).encode()
        assert _digest_text.escaped_twice(v) == want
        assert _digest_text.escaped_twice("".join([v[:7], v[7:]])) == want  # remembered


def test_the_digest_cache_counts_what_it_holds_and_keeps_to_its_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """stop 50: the bound counted characters of the values alone (text outside the BMP held
    ≈ 18 bytes a character, its ``str`` and escaping), and a value replacing one of the same
    length was counted again, its predecessor never taken off."""
    import sys

    bound = 1 << 18
    monkeypatch.setattr(_digest_text, "_REMEMBERED_CHARS", bound, raising=False)
    monkeypatch.setattr(_digest_text, "_REMEMBERED_BYTES", bound, raising=False)
    monkeypatch.setattr(_digest_text, "_known", {})
    name = "_known_bytes" if hasattr(_digest_text, "_known_bytes") else "_known_chars"
    counted = [0]
    monkeypatch.setattr(_digest_text, name, counted)

    def held() -> int:
        return sum(sys.getsizeof(v) + sys.getsizeof(b) for v, b in _digest_text._known.values())

    for i in range(40):  # 5,000 characters outside the BMP each: 20 KB, escaped 70 KB
        v = chr(0x1F600 + i) * (5_000 + i % 4)  # (four lengths: replaced ten times each)
        assert _digest_text.escaped_twice(v) == ascii_json(ascii_json(v)).encode()
        assert held() <= bound, f"{held()} bytes held past a bound of {bound}"
    for i in range(8):  # ASCII of one length, each replacing the one before
        _digest_text.escaped_twice(chr(ord("a") + i) * 3_000)
        assert held() <= bound
    assert counted[0] == held(), "the count is not what the cache holds"
