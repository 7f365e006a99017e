"""A cycle's record as the engine builds it (``Concluding._conclude``), for tests of how a
record is packed, masked and stored."""

from __future__ import annotations

from typing import Any

import loopwright as lw


def cycle_record(note: str = "") -> dict[str, Any]:
    """One trivial cycle's record: an edit (with ``note``), a failed visible verdict, no
    held-out checks, effects or memory, two free calls."""
    proposal = lw.Proposal(edits=(lw.Edit("doc", "body", "v"),), note=note)
    return {
        "cycle": 1,
        "proposal": proposal.to_dict(),
        "digest": "d",
        "duplicate": False,
        "visible": {"check": lw.Verdict(passed=False, score=0.5).to_dict()},
        "held_out": {},
        "score": 0.5,
        "improved": True,
        "decision": "revise",
        "effects": [],
        "memory": [],
        "calls": [{"who": "actor", "cost_usd": 0.0, "tokens": 0}],
        "usage": {"cost_usd": 0.0, "tokens": 0, "seconds": 0.25},
    }
