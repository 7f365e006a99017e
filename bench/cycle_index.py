"""What an index on ``checkpoints(run_id, cycle)`` would cost every cycle, and what it saves.

Usage:  python bench/cycle_index.py long {no,idx} [bench/long_runs.py's options]
        python bench/cycle_index.py write N {no,idx}
        python bench/cycle_index.py saves DB N

``long``: ``bench/long_runs.py`` with (``idx``) the index in every fresh database (appended
to the last migration step, so the schema version is unchanged): its database bytes and bytes
written (``/proc/self/io``) a cycle. ``write``: ``N`` cycles of ``cycle_phases``' trivial loop
on a fresh store, with or without the index; prints the database's bytes after a WAL
checkpoint — run under valgrind for instructions a cycle (README, "Instructions, not
seconds"). ``saves``: on a copy of ``DB`` (``bench/people_reads.py``'s store of ``N``
cycles), the milliseconds (median of 21) of the two scans of a run's checkpoints by cycle —
``_cycle_marks`` (a fork's or rollback's target) and ``records_naming_versions`` (a rollback)
— without and with the index, and the first with ``INDEXED BY``.
"""

from __future__ import annotations

import asyncio
import os
import runpy
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

INDEX = "CREATE INDEX IF NOT EXISTS checkpoints_cycle ON checkpoints(run_id, cycle)"
MARKS = (
    "SELECT seq, COALESCE(base, seq) FROM checkpoints WHERE run_id=? AND (cycle=? OR "
    "seq=(SELECT min(seq) FROM checkpoints WHERE run_id=?)) ORDER BY seq"
)
NAMING = (
    "SELECT seq, record FROM checkpoints WHERE run_id=? AND cycle>? AND CAST(record AS TEXT) LIKE ?"
)
FORCED = (
    "SELECT seq, COALESCE(base, seq) FROM checkpoints INDEXED BY checkpoints_cycle "
    "WHERE run_id=? AND cycle=?"
)


def long(idx: bool, args: list[str]) -> None:
    from loopwright.store import _schema

    if idx:
        _schema.SQLITE_MIGRATIONS[-1].append(INDEX)
    here = Path(__file__).resolve().parent
    sys.argv = [str(here / "long_runs.py"), *args]
    runpy.run_path(str(here / "long_runs.py"), run_name="__main__")


def write(n: int, idx: bool) -> None:
    import loopwright as lw

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from cycle_phases import TASK, make_loop

    db = f"{tempfile.mkdtemp()}/x.db"
    rt = lw.Runtime(f"sqlite:///{db}?durability=process")
    rt.store.list_runs(limit=1)  # the schema made
    if idx:
        with sqlite3.connect(db) as c:
            c.execute(INDEX)
    assert asyncio.run(rt.run(make_loop(n), TASK, task_key="k")).cycles == n
    rt.close()
    c = sqlite3.connect(db)
    c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    c.close()
    print(f"bytes {n} {'idx' if idx else 'no'} {os.path.getsize(db)}")


def saves(src: str, n: int) -> None:
    db = f"{tempfile.mkdtemp()}/saves.db"
    shutil.copyfile(src, db)
    c = sqlite3.connect(db)
    rid = c.execute("SELECT run_id FROM runs WHERE task_key=?", (f"pay-{n}",)).fetchone()[0]

    def ms(q: str, args: tuple[Any, ...]) -> float:
        out = []
        for _ in range(21):
            t = time.perf_counter()
            c.execute(q, args).fetchall()
            out.append(time.perf_counter() - t)
        return statistics.median(out) * 1000

    for label in ("no index", "index"):
        if label == "index":
            c.execute(INDEX)
            c.commit()
        marks = ms(MARKS, (rid, 3, rid))
        naming = ms(NAMING, (rid, n - 2, "%version%"))
        print(f"{label}: cycle_marks {marks:.3f} ms; records_naming_versions {naming:.3f} ms")
    print(f"index, cycle_marks' rows of the cycle INDEXED BY: {ms(FORCED, (rid, 3)):.3f} ms")


def main() -> None:
    what, rest = sys.argv[1], sys.argv[2:]
    if what == "long":
        long(rest[0] == "idx", rest[1:])
    elif what == "write":
        write(int(rest[0]), rest[1] == "idx")
    elif what == "saves":
        saves(rest[0], int(rest[1]))
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main()
