"""``web._views.held_or_stored``: the one rule by which the run page's newest versions,
``GET .../versions`` and the streamed ``/api/runs/{id}`` merge a part's held and stored
versions (held ones are the newer truth; a rollback's abandoned versions, above the count,
are never given; the store is read only when a wanted version is not held, and no further
than the last one wanted)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

pytest.importorskip("fastapi", reason="the dashboard extra is not installed")

from loopwright._state import Part, Version
from loopwright.web._views import held_or_stored


def _part(count: int, held: set[int]) -> Part:
    return Part("p", [Version(n, f"held {n}", n, "accepted") for n in held], count=count)


def _stored(numbers: list[int]) -> list[Version]:
    return [Version(n, f"stored {n}", n, "rejected") for n in numbers]


@given(
    count=st.integers(0, 9),
    extra=st.integers(0, 3),
    held_bits=st.integers(0, 2**9 - 1),
    stored_bits=st.integers(0, 2**12 - 1),
    after=st.integers(0, 11),
    last=st.none() | st.integers(0, 12),
    from_after=st.booleans(),
)
def test_the_versions_wanted_held_first_then_stored_in_order(
    count: int,
    extra: int,
    held_bits: int,
    stored_bits: int,
    after: int,
    last: int | None,
    from_after: bool,
) -> None:
    held = {n for n in range(1, count + 1) if held_bits >> (n - 1) & 1}
    stored = _stored(
        [n for n in range(1, count + extra + 1) if stored_bits >> (n - 1) & 1 or n > count]
    )
    part = _part(count, held)
    # a page read from ``after`` (versions_page) or every stored version (iter_versions)
    reader = [v for v in stored if v.n > after] if from_after else stored
    end = count if last is None else min(last, count)
    by_n = {v.n: v for v in stored}
    want = [
        part.known[n] if n in held else by_n[n]
        for n in range(after + 1, end + 1)
        if n in held or n in by_n
    ]
    reads: list[int] = []

    def read() -> Iterator[Version]:
        reads.append(1)
        beyond = False
        for v in reader:
            assert not beyond  # not read on past the first version beyond the last wanted
            yield v
            beyond = v.n > end

    got = list(held_or_stored(part, read, after, last))
    assert got == want
    every_held = all(n in held for n in range(after + 1, end + 1))
    assert reads == ([] if every_held else [1])  # read once, only when one is not held


def test_a_rollbacks_abandoned_versions_are_not_read_beyond() -> None:
    """Versions above the count (a rollback's) end the read: the reader is not asked for more."""
    part = _part(3, {3})

    def read() -> Iterator[Version]:
        yield from _stored([1, 2, 3, 4])
        raise AssertionError("read past the part's count")

    assert [(v.n, v.value) for v in held_or_stored(part, read)] == [
        (1, "stored 1"),
        (2, "stored 2"),
        (3, "held 3"),
    ]


def test_nothing_is_read_until_the_versions_are() -> None:
    """A generator: the store is read when the first version is taken, not when asked."""
    calls: list[int] = []

    def read() -> list[Version]:
        calls.append(1)
        return _stored([1, 2])

    versions = held_or_stored(_part(2, set()), read)
    assert calls == []
    assert [v.n for v in versions] == [1, 2] and calls == [1]
