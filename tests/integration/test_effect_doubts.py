"""Doubts about paying once and refunding once (money44), SQLite and PostgreSQL.

- A cycle's write-ahead an earlier release stored without its effects' keys: the resume asks
  the key function again, and one that raises now escalated nowhere, it escaped as a traceback.
"""

from __future__ import annotations

from typing import Any

import pytest
from doc_loop import TASK
from test_redo_keys import Crash, Provider, dying, paying

import loopwright as lw


def test_a_key_function_that_raises_on_resuming_an_old_write_ahead_escalates(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    provider = Provider()
    real = lw.Runtime._commit

    def keyless(self: Any, ex: Any, *args: Any, **kw: Any) -> bool:
        # the write-ahead as a release before the keys were stored wrote it
        if ex.state.pending and "keys" in ex.state.pending:
            ex.state.pending = {k: v for k, v in ex.state.pending.items() if k != "keys"}
        return real(self, ex, *args, **kw)

    with monkeypatch.context() as m:
        m.setattr(lw.Runtime, "_commit", keyless)
        crashed = dying(url, "before_effect_intent")
        with pytest.raises(Crash):
            crashed.run_sync(paying(provider), TASK, task_key="A")
        crashed.close()

    def broken(args: Any) -> str:
        raise KeyError("invoice")

    loop = paying(provider)
    loop.effects[0].key_fn = broken  # a deploy between the crash and the resume
    with lw.Runtime(url) as rt:
        run = rt.store.get_run("A")
        out = rt.resume_sync(run.run_id, loop)
        assert (out.status, out.stop_reason) == ("escalated", "escalated")
        assert out.packet is not None
        cause = out.packet["cause"]
        assert "the key function of effect pay raised KeyError" in cause, cause
        assert "write-ahead" in cause
        assert rt.store.journal(run.run_id, kind="effect") == []
    assert provider.asked == []  # nothing was paid
