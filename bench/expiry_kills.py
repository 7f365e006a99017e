"""Expiry, reuse and lease-release kill trials, many (kill49): every trial of
``tests/integration/expirykill/expiry_trial.py`` (``all_trials``: each scenario at each kill point),
``--rounds`` times, on a store (a fresh SQLite file or PostgreSQL schema per trial), ``--jobs``
trials at once; prints each trial and the counts (trials, processes killed, trials broken),
and exits 1 on any broken rule.
``python bench/expiry_kills.py [--pg URL] [--rounds N] [--jobs N] [--only SCENARIO,...]``."""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import sys
import tempfile
import uuid
from collections import Counter
from pathlib import Path

sys.path.insert(
    0, str(Path(__file__).resolve().parents[1] / "tests" / "integration" / "expirykill")
)

from expiry_trial import all_trials, run_trial

from loopwright.store import open_store


def _drop(url: str, schema: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def one(pg: str, scenario: str, kills: tuple[str, ...]) -> tuple[int, list[str], dict[str, str]]:
    work = Path(tempfile.mkdtemp(prefix="xk-"))
    schema = f"xk_{uuid.uuid4().hex[:12]}"
    db = f"{pg}{'&' if '?' in pg else '?'}schema={schema}" if pg else f"sqlite:///{work / 's.db'}"
    if pg:  # (Runtime refuses a ?schema= that does not exist; the store's own layer makes it)
        open_store(db).close()
    try:
        t = run_trial(work, db, scenario, kills)
    finally:
        if pg:
            _drop(pg, schema)
    return t.killed, t.broken, t.ends


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pg", default="", help="a PostgreSQL URL (default: SQLite files)")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--jobs", type=int, default=4)
    ap.add_argument("--only", default="", help="scenarios, comma-separated (default: all)")
    args = ap.parse_args()
    only = set(args.only.split(",")) if args.only else None
    trials = [t for t in all_trials() if only is None or t[0] in only] * args.rounds
    killed = 0
    broken: list[str] = []
    counts: Counter[str] = Counter()
    with cf.ThreadPoolExecutor(args.jobs) as pool:
        futures = {pool.submit(one, args.pg, sc, ks): (sc, ks) for sc, ks in trials}
        for fut in cf.as_completed(futures):
            sc, ks = futures[fut]
            n, bad, ends = fut.result()
            for status in ends.values():
                counts[status] += 1
            killed += n
            broken += [f"{sc} {ks}: {b}" for b in bad]
            print(sc, ks, ends, "killed", n, bad or "", flush=True)
    print(f"trials {len(trials)} killed {killed} broken {len(broken)} ends {dict(counts)}")
    for b in broken:
        print("BROKEN", b)
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
