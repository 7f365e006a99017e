"""Read paths of a long run read a window, not the whole run (bench/read_paths.py measures
them; these tests count what is read, never time)."""

from __future__ import annotations

import random
from typing import Any

import pytest

from loopwright.trace import _exports


def _cand(i: int, rank: int | None, digest: str) -> Any:
    # (``before`` in trees before a cycle kept the actor's context instead of the state)
    ctx = "context" if "context" in _exports.Cycle.__dataclass_fields__ else "before"
    cyc = _exports.Cycle(  # type: ignore[call-arg]
        cycle=i,
        proposal={},
        digest=digest,
        decision="accepted" if rank == 2 else "revise",
        concluded=rank is not None,
        record={"improved": rank == 1},
        visible={},
        held_out={},
        **{ctx: {}},
        # (trees after stop 38 also carry the context's id)
        **(
            {"context_id": f"ctx{i}"} if "context_id" in _exports.Cycle.__dataclass_fields__ else {}
        ),
        after=None,
    )
    return _exports._Candidate(None, cyc, {}, f"ctx{i}", rank)  # type: ignore[arg-type]


def _naive(cands: list[Any]) -> list[tuple[int, int]]:
    """The rule as docs/trace.md states it: each candidate, the first later one preferred."""
    out = []
    for i, rj in enumerate(cands):
        for j in range(i + 1, len(cands)):
            if _exports._prefers(cands[j], rj):
                out.append((i, j))
                break
    return out


@pytest.mark.parametrize("seed", range(20))
def test_hindsight_pairs_are_the_first_later_better_proposal(seed: int) -> None:
    rnd = random.Random(seed)
    cands = [
        _cand(i, rnd.choice([None, 0, 0, 0, 1, 2]), rnd.choice("abc"))
        for i in range(rnd.randint(0, 60))
    ]
    index = {id(c): i for i, c in enumerate(cands)}
    got = [(index[id(a)], index[id(b)]) for a, b in _exports._next_better(cands)]
    assert got == _naive(cands)


def test_hindsight_pairs_of_a_run_that_stopped_improving_are_not_quadratic(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A long run improves early, then revises for thousands of cycles: each rejected cycle
    looked at every later one (n²/2 comparisons, 45 s at 20,000 cycles)."""
    calls = [0]
    prefers = _exports._prefers

    def counting(a: Any, b: Any) -> bool:
        calls[0] += 1
        return prefers(a, b)

    n = 2_000
    cands = [_cand(0, 1, "first"), *(_cand(i, 0, f"d{i}") for i in range(1, n))]
    monkeypatch.setattr(_exports, "_prefers", counting)
    monkeypatch.setattr(_exports, "_candidates", lambda store, runs: [cands])
    monkeypatch.setattr(_exports, "ended_runs", lambda *a: [])
    assert _exports.preference_pairs(None, match="hindsight") == []  # type: ignore[arg-type]
    assert calls[0] <= n  # was n * (n - 1) / 2
