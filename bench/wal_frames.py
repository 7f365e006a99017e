"""How many pages does one cycle's commit write on SQLite, and whose are they? (issue 14)

Usage:  python bench/wal_frames.py [--cycles 10,1000,10000] [--sizes 0,50,2000,20000]
                                   [--dir DIR] [--skip-over 100000000]

In WAL mode every page a transaction changes is appended to the ``-wal`` file once per commit
(a frame: a 24-byte header and the page), and later copied into the database by a checkpoint.
So the frames a cycle's commit appends are what it costs the disk, twice (log, then database),
and what the frame checksums cost the CPU. For each number of cycles N and part value size S
(characters of text; 0 is ``bench/cycle_phases.py``'s trivial loop, whose value is
``"draft <cycle>"``; others ``bench/value_bytes.py``'s loop of S-character drafts), one
``Runtime.run`` of N cycles on a fresh embedded SQLite store (``synchronous=FULL``), with the
store's automatic checkpoint turned off: after each cycle's commit (``commit_request``) the new
frames of the ``-wal`` are read (their page numbers), and a checkpoint empties the log when it
passes 64 MB. At the end each page number is named by its owner through SQLite's ``dbstat``
(the table or index whose b-tree holds it; ``+ovfl``: an overflow page of a row too large for
its leaf; ``page1``: the file header and schema; ``free``: a page on the free list).

Per (N, S) it prints the frames of a cycle's commit (mean over every cycle), the database's
growth a cycle (bytes, after a checkpoint), and per owner the frames a cycle. ``--page-size P``: each store made on
a file of that page size (SQLite's default, and a store's, is 4096). ``--older``: the run measured is created before
another (not the store's newest run). ``--skip-over``: leave out a pair whose N × S is over this many characters.
The last line is

    wal_frames_per_cycle=<float>    trivial loop (S = 0), the largest N measured
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import struct
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import loopwright as lw
from loopwright.store import _sql

sys.path.insert(0, str(Path(__file__).parent))
import cycle_phases
import value_bytes

_WAL_HEADER = 32
_FRAME_HEADER = 24
_TRUNCATE_AT = 64 << 20


class WalReader:
    """The frames appended to a ``-wal`` since the last read: their page numbers, and how many
    transactions they closed (a frame whose header carries the database size is a commit's
    last)."""

    def __init__(self, wal: Path, page_size: int) -> None:
        self.wal, self.page_size, self.offset = wal, page_size, _WAL_HEADER
        self.pages: Counter[int] = Counter()

    def read(self) -> tuple[int, int]:
        """(frames, commits) appended since the last call; their pages counted."""
        step = _FRAME_HEADER + self.page_size
        frames = commits = 0
        try:
            with self.wal.open("rb") as f:
                f.seek(0, 2)
                end = f.tell()
                if end < self.offset:  # truncated by a checkpoint: a new log
                    self.offset = _WAL_HEADER
                while self.offset + step <= end:
                    f.seek(self.offset)
                    pgno, size = struct.unpack(">II", f.read(8))
                    self.pages[pgno] += 1
                    frames += 1
                    commits += size != 0
                    self.offset += step
        except FileNotFoundError:
            pass
        return frames, commits

    def restart(self) -> None:
        self.offset = _WAL_HEADER


def owners(db: Any) -> dict[int, str]:
    """Each page number's owner, by ``dbstat`` (and the free list's trunk and leaves)."""
    out: dict[int, str] = {1: "page1"}
    for name, pageno, kind in db.execute("SELECT name, pageno, pagetype FROM dbstat"):
        if pageno != 1:
            out[pageno] = f"{name}+ovfl" if kind == "overflow" else name
    trunk = db.execute("PRAGMA freelist_count").fetchone()[0] and _first_trunk(db)
    page_size = db.execute("PRAGMA page_size").fetchone()[0]
    while trunk:
        out[trunk] = "free"
        raw = db.execute("SELECT data FROM sqlite_dbpage WHERE pgno=?", (trunk,)).fetchone()
        if raw is None:
            break
        data = raw[0][:page_size]
        nxt, count = struct.unpack(">II", data[:8])
        for i in range(count):
            out[struct.unpack(">I", data[8 + 4 * i : 12 + 4 * i])[0]] = "free"
        trunk = nxt
    return out


def _first_trunk(db: Any) -> int:
    try:
        raw = db.execute("SELECT data FROM sqlite_dbpage WHERE pgno=1").fetchone()
    except Exception:  # a build without sqlite_dbpage: free pages go unnamed ("?")
        return 0
    return int(struct.unpack(">I", raw[0][32:36])[0])


def new_store_file(path: Path, page_size: int | None) -> None:
    """An empty database file with ``page_size`` (a store made on it keeps that size: SQLite
    fixes it when the first table is written). None: the store makes its own (4096)."""
    if page_size is None:
        return
    db = sqlite3.connect(path)
    db.execute(f"PRAGMA page_size = {int(page_size)}")
    db.execute("PRAGMA journal_mode = WAL")  # writes the header: the size is kept
    db.close()


def one(
    cycles: int, size: int, folder: Path, page_size: int | None = None, older: bool = False
) -> dict[str, Any]:
    path = folder / f"frames-{cycles}-{size}.db"
    new_store_file(path, page_size)
    if size:
        loop, task = value_bytes.make_loop(cycles, size), value_bytes.TASK
    else:
        loop, task = cycle_phases.make_loop(cycles), cycle_phases.TASK
    per_commit: list[int] = []
    with lw.Runtime(path) as rt:
        store: Any = rt.store
        if older:  # the run measured is created first: not the store's newest
            rt.create(loop, task, task_key="run")
        rt.create(loop, {"goal": "warm"}, task_key="warm")  # the schema, the first pages
        with store._conn() as db:
            db.execute("PRAGMA wal_autocheckpoint = 0")
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            page_size = db.execute("PRAGMA page_size").fetchone()[0]
        empty = path.stat().st_size
        wal = WalReader(path.with_name(path.name + "-wal"), page_size)
        inner = _sql.SQLStore.commit_request

        def counted(self: Any, it: Any) -> bool:
            wal.read()  # anything written since the last commit (leases, events) apart
            ok = inner(self, it)
            frames, _commits = wal.read()
            per_commit.append(frames)
            if wal.offset > _TRUNCATE_AT:
                with self._conn() as db:
                    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                wal.restart()
            return ok

        _sql.SQLStore.commit_request = counted  # type: ignore[method-assign]
        try:
            r = asyncio.run(rt.run(loop, task, task_key="run"))
        finally:
            _sql.SQLStore.commit_request = inner  # type: ignore[method-assign]
        if (r.cycles, r.stop_reason) != (cycles, "budget_cycles"):
            raise RuntimeError(f"benchmark run ended unexpectedly: {r.to_dict()}")
        wal.read()
        with store._conn() as db:
            named = owners(db)
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        grown = path.stat().st_size - empty
    cycle_pages: Counter[str] = Counter()
    for pgno, n in wal.pages.items():
        cycle_pages[named.get(pgno, "?")] += n
    for p in folder.glob(path.name + "*"):
        p.unlink()
    commits = per_commit[:cycles]  # (the last commit, a run's finish, is not a cycle's)
    return {
        "per_cycle": sum(commits) / len(commits),
        "wal_bytes": sum(commits) / len(commits) * (page_size + _FRAME_HEADER),
        "all_per_cycle": sum(wal.pages.values()) / cycles,
        "db_bytes": grown / cycles,
        "owners": {k: v / cycles for k, v in cycle_pages.most_common()},
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--cycles", default="10,1000,10000")
    ap.add_argument("--sizes", default="0,50,2000,20000")
    ap.add_argument("--dir", help="folder for the databases (default: a temp folder)")
    ap.add_argument("--skip-over", type=int, default=100_000_000)
    ap.add_argument("--page-size", type=int, help="make each store on a file of this page size")
    ap.add_argument("--older", action="store_true", help="another run is created after it")
    args = ap.parse_args(argv)
    counts = [int(x) for x in args.cycles.split(",")]
    sizes = [int(x) for x in args.sizes.split(",")]
    last: float | None = None
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        for n in counts:
            for size in sizes:
                if n * size > args.skip_over:
                    print(f"N={n:>6} S={size:>6}: skipped (N x S over --skip-over)")
                    continue
                got = one(n, size, Path(tmp), args.page_size, args.older)
                parts = ", ".join(f"{k} {v:.2f}" for k, v in got["owners"].items())
                print(
                    f"N={n:>6} S={size:>6}: {got['per_cycle']:.2f} frames a cycle's commit "
                    f"({got['all_per_cycle']:.2f} a cycle, all writes; {got['wal_bytes']:.0f} B), db {got['db_bytes']:.0f} B "
                    f"a cycle; by owner: {parts}",
                    flush=True,
                )
                if size == 0:
                    last = got["per_cycle"]
    if last is not None:
        print(f"wal_frames_per_cycle={last:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
