"""polish54: the escalation packet of a run whose own effect is left in doubt advised only
`loopwright rollback RUN --to-cycle 0 --by NAME`, then `resume`: the rollback's redo is
refused until the effect is settled (its stop cause said so, its advice did not), and the
`--by NAME` it printed is refused as typed (exit 2). The advice names `loopwright settle`
with the exact key first, and each command it names works when copied. SQLite and PostgreSQL."""

from __future__ import annotations

import re
import shlex

import pytest
from doc_loop import TASK
from test_keyless_effect_failures import _paying

import loopwright as lw
from loopwright.cli import main


def _commands(advice: str) -> list[list[str]]:
    return [shlex.split(c) for c in re.findall(r"`(loopwright [^`]+)`", advice)]


def test_a_transient_error_after_acting_is_settled_before_the_rollback(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    charges: list[str] = []
    with lw.Runtime(url) as rt:
        a = rt.run_sync(_paying(charges, lw.TransientError), TASK)
    assert a.status == "escalated" and a.packet is not None
    run = a.run_id[:12]
    advice = a.packet["recommended_action"]
    settle = f"`loopwright settle {run} pay:I6 --not-done`"
    rollback = f"`loopwright rollback {run} --to-cycle 0`"
    assert settle in advice and rollback in advice, advice
    assert advice.index(settle) < advice.index(rollback), advice  # settled first
    assert f"`loopwright settle {run} pay:I6 --done` if it happened" in advice, advice  # polish55
    assert "NAME" not in advice, advice
    # `loopwright show` prints it
    capsys.readouterr()
    assert main(["show", a.run_id, "--store", url]) == 0
    shown = " ".join(capsys.readouterr().out.replace("│", " ").split())  # (a panel's sides)
    assert f"loopwright settle {run} pay:I6 --not-done" in shown, shown
    # typed as printed (the person found nothing charged): settled, rolled back; the resume
    # pays once more, now that nothing fails
    for cmd in _commands(advice):
        if (cmd[1] == "settle" and "--done" in cmd) or cmd[1] == "resume":
            continue
        assert main([*cmd[1:], "--store", url]) == 0, (cmd, capsys.readouterr())
    with lw.Runtime(url) as rt:
        settled = [e for e in rt.store.events(a.run_id) if e.kind == "effect_settled"]
        assert [e.data["done"] for e in settled] == [False]
        again = rt.resume_sync(a.run_id, _paying(charges, None))
    assert again.status == "accepted", again.packet
    assert charges == ["I6", "I6"]
