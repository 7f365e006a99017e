"""A fork or rollback first asks whether the target's version numbers were written again by a
later cycle (``_concluded.refuse_rewritten``, after a rollback the run went on from). It asked by
reading, and decoding, every version of each part up to the target's count: a fork or rollback
to a late cycle made 4,490 Python calls at 100 cycles and 6,524 at 1,000 (an outside probe:
43,000 at 3,000). ``Store.written_after`` answers from the rows' numbers and cycles."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support.long_loops import rejecting_loop
from test_metrics_streaming import _long_loop

import loopwright as lw
from loopwright._errors import ConfigError
from loopwright._state import Version
from loopwright.store import Store, _protocol_checkpoints, _sql_reads


def test_a_late_fork_or_rollback_decodes_no_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Versions the store decodes for a fork and a rollback to the run's last cycle but one:
    24 and 204 each at 100 and 1,000 cycles before (every version up to the target's count),
    none now. (Counted, not timed; Python calls move with the run ids' digits.)"""
    built = [0]

    class Counted(Version):
        __slots__ = ()

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            built[0] += 1
            super().__init__(*args, **kwargs)

    for cycles in (100, 1000):
        url = f"sqlite:///{tmp_path / f'r{cycles}.db'}?durability=process"
        with lw.Runtime(url) as rt:
            r = rt.run_sync(_long_loop(cycles), {"artifacts": {"doc": {}}}, task_key="w")
            assert r.cycles == cycles
            with monkeypatch.context() as m:
                m.setattr(_protocol_checkpoints, "Version", Counted)
                m.setattr(_sql_reads, "Version", Counted)
                built[0] = 0
                rt.fork(r.run_id, at_cycle=cycles - 1, task_key="f")
                assert built[0] == 0, (cycles, "fork", built[0])
                rt.rollback(r.run_id, cycles - 1, by="dave")
                assert built[0] == 0, (cycles, "rollback", built[0])


def test_written_after_answers_as_the_protocol_default(url: str) -> None:
    """The SQL stores' query against the protocol's walk over ``iter_versions``, for every
    bound, on a run rolled back and gone on: its numbers written again by later cycles."""
    down = {12}  # the model is down once at cycle 12: the run escalates there, budget left

    def edit(n: int) -> dict[str, str]:
        if n in down:
            down.discard(n)
            raise ValueError("the model is down")  # permanent: the run escalates
        return {f"p{n % 3}": f"{n:06d}"}

    loop = rejecting_loop(24, edit)
    with lw.Runtime(url) as rt:
        r = rt.run_sync(loop, {"artifacts": {"doc": {}}}, task_key="w")
        assert (r.status, r.cycles) == ("escalated", 11)
        rt.rollback(r.run_id, 4, by="dave")
        again = rt.resume_sync(r.run_id, loop)  # cycles 5.. write their numbers again
        assert again.cycles == 24
        store = rt.store
        found = 0
        for ref in ("doc/p0", "doc/p1", "doc/p2", "doc/none"):
            top = max((v.n for v in store.iter_versions(r.run_id, ref)), default=0)
            for upto in range(top + 2):
                for cycle in (0, 3, 4, 9, 11, 17, 24):
                    for limit in (1, 5):
                        got = store.written_after(
                            r.run_id, ref, upto=upto, cycle=cycle, limit=limit
                        )
                        want = Store.written_after(
                            store, r.run_id, ref, upto=upto, cycle=cycle, limit=limit
                        )
                        assert got == want, (ref, upto, cycle, limit)
                        found += bool(got)
        assert found > 0
        # an abandoned cycle read through numbers written again is refused, naming them
        with pytest.raises(ConfigError, match=r"abandoned by a rollback.*versions \[\d"):
            rt.fork(r.run_id, at_cycle=9)
