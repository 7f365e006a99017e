"""A one-cycle loop whose held-out check is a sandboxed ``CommandVerifier`` reading the task's
``held_out.tests``: the loop of the self-reported held-out tests (stop 54's ``show`` and run
page, stop 55's counts, metrics and lists)."""

from __future__ import annotations

from collections.abc import Callable

import loopwright as lw
from loopwright.verifiers import CommandVerifier


def held_out_loop(
    actor: Callable[[lw.Context], lw.Proposal],
    visible: Callable[[lw.TaskState, lw.Proposal], lw.Verdict],
    *,
    judged_only: bool = False,
) -> lw.Loop:
    return lw.Loop(
        name="held",
        actor=actor,
        verifiers=[
            lw.Check(fn=visible, name="visible"),
            lw.Check(
                fn=CommandVerifier(tests_key="held_out.tests", judged_only=judged_only),
                name="hidden_tests",
                held_out=True,
            ),
        ],
        contract=lw.Contract(budget=lw.Budget(max_cycles=1)),
    )
