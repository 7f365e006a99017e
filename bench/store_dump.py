"""A store's every table, sorted, after a fixed 25-cycle run: to show that a change of the
engine's CPU changes nothing it writes (compare the dumps of two trees byte for byte).

Usage:  PYTHONHASHSEED=0 PYTHONPATH=<tree>/src python bench/store_dump.py OUT

The run: an actor writing a text part (with the value of a secret environment variable in
its note every fifth cycle), two checks (one required that rejects with findings holding a
secret and a token shape, one not required, and the first again held out), ``MY_API_KEY=supersecret123`` in the
environment, a plateau rule that ends it at cycle 24; then a person's edit of another part (a secret in its note) and
the resume after it, to cycle 25. Run ids, owner and clocks are fixed (``uuid4``, ``time``,
``perf_counter`` return series), so two runs of one tree write the same bytes. Nothing here
is a test (tests/unit/test_cycle_builds.py and the redaction tests are).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import sqlite3
import sys
import tempfile
import time
import uuid
from typing import Any

_ids = itertools.count(1)
_clock = itertools.count(1)
_perf = itertools.count(1)


def _fixed() -> None:
    os.environ["MY_API_KEY"] = "supersecret123"
    uuid.uuid4 = lambda: uuid.UUID(int=next(_ids) * 1_000_003)  # type: ignore[assignment]
    time.time = lambda: 1_800_000_000.0 + next(_clock) * 0.25  # type: ignore[assignment]
    time.perf_counter = lambda: next(_perf) * 0.001  # type: ignore[assignment]


def _loop(cycles: int) -> Any:
    import loopwright as lw

    def actor(ctx: lw.Context) -> lw.Proposal:
        note = f"used key {os.environ['MY_API_KEY']}" if ctx.cycle % 5 == 0 else ""
        return lw.Proposal.edit("doc", {"body": f"draft {ctx.cycle}"}, note=note)

    def strict(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(
            passed=False,
            score=0.4,
            findings=(
                lw.Finding("still open: token=abcdef123456", "doc", "body", "text"),
                lw.Finding("saw supersecret123 in the log", "doc", "body", "style", "warning"),
            ),
            evidence={"log": "Authorization: Bearer abcdefghijkl"},
        )

    def lenient(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(passed=True, score=1.0)

    return lw.Loop(
        name="dump",
        actor=actor,
        verifiers=[
            lw.Check(fn=strict, name="strict"),
            lw.Check(fn=lenient, name="lenient", required=False),
            lw.Check(fn=strict, name="hidden", held_out=True),
        ],
        # a plateau ends the first run at cycle 24; the edit reopens it: the check-only cycle
        # that judges it, and one more
        contract=lw.Contract(
            no_progress=lw.NoProgress(cycles=23), budget=lw.Budget(max_cycles=cycles)
        ),
    )


def dump(db: str, owner: str) -> str:
    con = sqlite3.connect(db)
    out: list[str] = []
    tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")]
    for t in sorted(tables):
        rows = sorted(con.execute(f"SELECT * FROM {t}").fetchall(), key=repr)
        out.append(f"== {t} ({len(rows)})")
        out.extend(repr(r) for r in rows)
    con.close()
    return "\n".join(out).replace(owner, "<owner>") + "\n"


def main(argv: list[str]) -> None:
    _fixed()
    import loopwright as lw

    db = os.path.join(tempfile.mkdtemp(), "x.db")
    with lw.Runtime(db, owner="dump-owner") as rt:
        r = asyncio.run(
            rt.run(_loop(30), {"goal": "g", "artifacts": {"doc": {"body": "", "title": ""}}})
        )
        assert (r.stop_reason, r.cycles) == ("no_progress", 24), r.to_dict()
        rt.edit(r.run_id, "doc/title", "a title", by="ann", note="with key supersecret123 in it")
        r = rt.resume_sync(r.run_id, _loop(30))
        # cycle 25 judges the edit (check-only, not a cycle without progress); 26 is the actor's
        assert (r.stop_reason, r.cycles) == ("no_progress", 26), r.to_dict()
        owner = rt.owner
    with open(argv[0], "w") as f:
        f.write(dump(db, owner))


if __name__ == "__main__":
    main(sys.argv[1:])
