"""Rows one PostgreSQL ``claim_runs`` reads (EXPLAIN ANALYZE of its own statements, rolled
back) with N forks waiting for their makers, each older than the one runnable run: fork54 keeps
them out of ``runs_claimable`` (``maker_starts`` in its WHERE), so a claim passes over none.

    LOOPWRIGHT_TEST_PG=postgresql://… PYTHONPATH=src python bench/claim_held_forks.py [N ...]
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "integration"))
from test_pg_claim_scale import _claim_cost, _create

from loopwright.store import open_store


def main() -> None:
    base = os.environ["LOOPWRIGHT_TEST_PG"]
    for n in [int(a) for a in sys.argv[1:]] or [10, 400, 4000]:
        schema = f"bench_held_forks_{n}"
        with psycopg.connect(base, autocommit=True) as c:
            c.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
            c.execute(f'CREATE SCHEMA "{schema}"')
        try:
            with open_store(f"{base}?schema={schema}") as s:
                origin = _create(s, "o")
                with s._tx() as conn:  # type: ignore[attr-defined]  # the rows create_run writes
                    conn.execute(
                        "INSERT INTO runs(run_id, task_key, loop_name, project, status, contract, "
                        "task, created_at, updated_at, forked_from, forked_at, maker_starts) "
                        "SELECT 'f'||i, 'f'||i, 'l', 'p', 'pending', '{}', '{}', i, i, %s, 0, 1 "
                        "FROM generate_series(1, %s) i",
                        (origin, n),
                    )
                got, read, names = _claim_cost(s)
                assert got == [origin], got
                print(f"{n:>6} held forks: claimed {got}, rows read {read}, by {sorted(names)}")
        finally:
            with psycopg.connect(base, autocommit=True) as c:
                c.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


if __name__ == "__main__":
    main()
