"""polish55: an escalation's stop cause is clipped to a list row's sentence (``CAUSE_LIMIT``),
and the cause of an effect left in doubt ends with what to do: the command that settles it,
or who settled it. A long failure message cut that end off in `runs`, `show`, the dashboard and
the run-end webhook, all of which show the stop cause: the words before it are clipped now."""

from __future__ import annotations

import json

import pytest
from doc_loop import TASK
from test_keyless_effect_failures import _paying

import loopwright as lw
from loopwright._hints import carry_store, hint_flag
from loopwright._packet import CAUSE_LIMIT
from loopwright.cli import main


class _Long(lw.TransientError):
    def __init__(self, message: str) -> None:
        super().__init__(f"{message}; the gateway answered: " + "upstream timeout " * 20)


def test_the_settle_command_survives_a_long_cause(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with lw.Runtime(url) as rt:
        a = rt.run_sync(_paying([], _Long), TASK)
    assert a.status == "escalated" and a.packet is not None
    run = a.run_id[:12]
    settle = f"`loopwright settle {run} pay:I6 --done` if it happened (or `--not-done`)"
    cause = a.packet["stop_cause"]
    assert len(cause) <= CAUSE_LIMIT and "…" in cause, cause  # (clipped: the test means it)
    assert settle in cause and cause.endswith("then roll the run back and resume it"), cause
    assert cause.startswith("escalated before its first cycle concluded: pay (pay:I6)"), cause
    capsys.readouterr()
    assert main(["runs", "--json", "--store", url]) == 0
    [row] = json.loads(capsys.readouterr().out)
    # (the same words, its commands naming the store given: notify56)
    assert row["stop_cause"] == carry_store(cause, hint_flag(url))
    with lw.Runtime(url) as rt:
        rt.settle_effect(a.run_id, "pay:I6", done=False, by="ops")
        now = rt.store.get_run(a.run_id)
    assert now.packet is not None
    settled = now.packet["stop_cause"]
    assert len(settled) <= CAUSE_LIMIT and settle not in settled, settled
    assert settled.endswith(
        "; pay (pay:I6) was settled not done by ops: roll the run back to before cycle 1 and "
        "resume it"
    ), settled
