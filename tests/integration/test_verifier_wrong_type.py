"""A verifier returning something other than a ``Verdict`` escalates saying so (api49): the
packet's summary was "escalated to a person — verifier <lambda> failed", naming no fault, and
its error's ``where`` was ``verifier <lambda>`` where a raising verifier's is
``verifier:<lambda>``. Now as the actor's: "returned the wrong type (returned bool, …)"."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import loopwright as lw


def test_a_verifier_returning_the_wrong_type_is_named_in_the_packet(tmp_path: Path) -> None:
    def says_yes(state: lw.TaskState, proposal: lw.Proposal) -> Any:
        return True

    loop = lw.Loop(
        name="wrong-type",
        actor=lambda ctx: lw.Proposal.edit("doc", {"title": "Hello"}),
        verifiers=[lw.Check(fn=says_yes)],
        contract=lw.Contract(budget=lw.Budget(max_cycles=2)),
    )
    with lw.Runtime(tmp_path / "s.db") as rt:
        result = rt.run_sync(loop, {"artifacts": {"doc": {"title": "Helo"}}})
    assert result.status == "escalated"
    packet = result.packet or {}
    assert "verifier says_yes returned the wrong type" in packet["summary"]
    assert "returned bool, expected Verdict" in packet["summary"]
    assert packet["error"]["where"] == "verifier:says_yes"
    assert packet["error"]["type"] == "TypeError"
