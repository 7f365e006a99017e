"""An operator's action under a name that is no person's is refused (web50b).

``cancel``, ``rollback``, ``edit`` and ``fork`` with ``by="loopwright"`` (or ``policy:…``, or a
name holding an ESC or a bidirectional override) were accepted in a store without users: the
engine's ``operate`` never held ``by`` to the rule a decision's is held to (``check_person``),
so a person could act under the engine's own name in the audit log and the run's events. Now
each is a ``ConfigError`` naming ``by``, before anything is written; the engine's own records
under ``loopwright`` (an expiry) are untouched."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from support.modules import load_sibling

import loopwright as lw

NAMES = ["loopwright", "LoopWright", "policy:earned", "x\x1b[2Jy", "a\u202eb"]

_ACTIONS: dict[str, Callable[[lw.Runtime, str, str], Any]] = {
    "cancel": lambda rt, run, by: rt.cancel(run, by=by),
    "rollback": lambda rt, run, by: rt.rollback(run, 0, by=by),
    "edit": lambda rt, run, by: rt.edit(run, "doc/a", 5, by=by),
    "fork": lambda rt, run, by: rt.fork(run, 0, by=by),
}


def _web() -> ModuleType:
    return load_sibling(__file__, "test_web.py", "_web_helpers_operate_names")


@pytest.mark.parametrize("action", sorted(_ACTIONS))
@pytest.mark.parametrize("name", NAMES)
def test_an_operator_action_under_the_engine_s_name_is_refused(
    tmp_path: Path, action: str, name: str
) -> None:
    store, run_id = _web().make_parked_run(tmp_path)
    with lw.Runtime(store) as rt:
        assert not rt.store.has_users()
        before = (len(rt.store.audit()), len(rt.store.events(run_id)), len(rt.store.list_runs()))
        with pytest.raises(lw.ConfigError) as e:
            _ACTIONS[action](rt, run_id, name)
        assert e.value.field == "by"
        after = (len(rt.store.audit()), len(rt.store.events(run_id)), len(rt.store.list_runs()))
        assert after == before  # nothing recorded, nothing changed
        assert rt.store.get_run(run_id).status == "awaiting_approval"
        # a person's name still acts
        _ACTIONS[action](rt, run_id, "ana")
        assert [a.actor for a in rt.store.audit()][-1] == "ana"
