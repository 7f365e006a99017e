"""``Digests``: the digests of a run's rejected proposals, answering ``in`` at a bounded cost.

The newest ``REJECTED_WINDOW`` are held in memory; older ones are in the store, asked about
only where a fixed-size filter says the store may hold them (invariant 8).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

__all__ = ["REJECTED_WINDOW", "Digests"]


REJECTED_WINDOW = 128
"""The newest rejected digests a live state holds in memory (at most twice this many, trimmed
in one step); older ones are asked about from the store, one indexed read each."""

_FILTER_BITS = 1 << 17  # 16 KiB: under 2 % of misses asked about at 10,000 digests let go
_FILTER_MASK = _FILTER_BITS - 1


def _filter_bits(digest: str) -> tuple[int, int]:
    """The two bits of the digest filter that stand for ``digest`` (set and tested alike)."""
    h = hash(digest)
    return h & _FILTER_MASK, (h >> 17) & _FILTER_MASK


class Digests(list[str]):
    """The digests of rejected proposals: a list (in order) that answers ``in`` from a set,
    so the duplicate check costs the same at cycle 5,000 as at cycle 5. Memory stays bounded
    too (invariant 8): once ``lookup`` (an indexed read of the store) is attached, the digests
    the store holds (``durable``) beyond the newest ``REJECTED_WINDOW`` leave memory. ``in``
    asks ``lookup`` about a digest not held only where the store may have it: a digest that
    left memory sets two bits of a fixed-size filter (a Bloom filter, 16 KiB), and one whose
    bits are not both set never left it; a state loaded from a store (``stored``: it holds
    only the digests added since) asks about every one. The list holds the digests from
    ``gone`` on; ``since(n)``: those added after the first ``n``."""

    # (class defaults: most states never let a digest go; a verifier's copy is made a cycle)
    gone = 0  # how many of the first digests left memory (the store holds them)
    _filter: bytearray | None = None  # those digests' bits (none left: None)

    def __init__(
        self,
        items: Iterable[str] = (),
        lookup: Callable[[str], bool] | None = None,
        *,
        stored: bool = True,
    ) -> None:
        list.__init__(self, items)  # (not ``super()``: a super object built a cycle)
        self._set = set(self)
        self.lookup = lookup
        # What a digest not held needs: 0 nothing (no store, or none let go of), 1 the
        # filter's bits, 2 the store's answer (it may hold digests this process never added).
        self._mode = 0 if lookup is None else 2 if stored else 0

    def append(self, item: str) -> None:
        list.append(self, item)
        self._set.add(item)

    def __contains__(self, item: object) -> bool:
        if item in self._set:
            return True
        mode = self._mode
        if not mode or not isinstance(item, str):
            return False
        if mode == 1:
            # (a process's own string hash: the filter never leaves the process)
            f = self._filter
            assert f is not None  # (mode 1: some digests left memory)
            a, b = _filter_bits(item)
            if not (f[a >> 3] >> (a & 7)) & 1 or not (f[b >> 3] >> (b & 7)) & 1:
                return False  # never let go of: not rejected
        lookup = self.lookup
        assert lookup is not None  # (modes 1 and 2 have one)
        return lookup(item)

    def since(self, n: int) -> tuple[list[str], int]:
        """The digests added after the first ``n`` (never ones that left memory: only digests
        the store holds leave it, and ``n`` counts those written), and how many were added."""
        gone = self.gone
        return self[n - gone :], gone + len(self)

    def durable(self, n: int) -> None:
        """The store holds the first ``n`` digests: past twice the window (the caller asks),
        those of them older than the newest ``REJECTED_WINDOW`` leave memory (a step per
        ``REJECTED_WINDOW`` appends, so O(1) a digest), their bits set in the filter."""
        if self.lookup is None:
            return
        drop = min(n - self.gone, len(self) - REJECTED_WINDOW)
        if drop <= 0:
            return
        if self._mode != 2:  # (mode 2 asks the store of every digest not held: no filter)
            f = self._filter
            if f is None:
                f = self._filter = bytearray(_FILTER_BITS >> 3)
            for d in self[:drop]:
                a, b = _filter_bits(d)
                f[a >> 3] |= 1 << (a & 7)
                f[b >> 3] |= 1 << (b & 7)
            self._mode = 1
        del self[:drop]
        self._set = set(self)
        self.gone += drop
