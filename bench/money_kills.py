"""Money-kill trials, many: every scenario of ``tests/integration/moneykill/trial.py`` at every
kill point, with and without reconcile hooks, ``--rounds`` times, on a store (a fresh SQLite file
or PostgreSQL schema per trial); prints each trial's ends and the counts, and exits 1 on any
broken rule. ``python bench/money_kills.py [--pg URL] [--rounds N] [--askers N]``."""

from __future__ import annotations

import argparse
import itertools
import sys
import tempfile
import uuid
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "integration" / "moneykill"))

from trial import KILLS, SCENARIOS, run_trial

from loopwright.store import open_store


def _drop(url: str, schema: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pg", default="", help="a PostgreSQL URL (default: SQLite files)")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--askers", type=int, default=2)
    ap.add_argument("--only", default="", help="scenarios, comma-separated (default: all)")
    args = ap.parse_args()
    counts: Counter[str] = Counter()
    broken: list[str] = []
    for _ in range(args.rounds):
        names = args.only.split(",") if args.only else list(SCENARIOS)
        for sc, kill, hooks in itertools.product(names, KILLS, ("both", "none")):
            work = Path(tempfile.mkdtemp(prefix="mk-"))
            if args.pg:
                sep = "&" if "?" in args.pg else "?"
                db = f"{args.pg}{sep}schema=mk_{uuid.uuid4().hex[:12]}"
                open_store(db).close()  # (Runtime refuses a ?schema= not there)
            else:
                db = f"sqlite:///{work / 's.db'}"
            kw = {"askers": args.askers} if "askers" in sc or "racing" in sc else {}
            try:
                t, ends, bad = run_trial(work, db, sc, kill, hooks, **kw)
            finally:
                if args.pg:
                    _drop(args.pg, db.rpartition("schema=")[2])
            counts["trials"] += 1
            counts["killed"] += t.killed
            counts["refunded_after_acceptance"] += len(t.refunded_later)
            counts["accepted_invoice_left_unpaid"] += len(t.unpaid_accepted)
            for status in ends.values():
                counts[status] += 1
            broken += [f"{sc} {kill} {hooks}: {b}" for b in bad]
            later = f"refunded later: {t.refunded_later}" if t.refunded_later else ""
            print(sc, kill, hooks, ends, "killed", t.killed, later, bad or "", flush=True)
    print(dict(counts), "broken:", len(broken))
    for b in broken:
        print("BROKEN", b)
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
