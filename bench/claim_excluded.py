"""SQL statements one SQLite ``claim_runs`` runs with its write lock held, when a worker
excludes many runs (those it skipped a moment ago, each the oldest): review49c passes a
worker's skipped runs as ``exclude``, read 16 at a time before.

    PYTHONPATH=src python bench/claim_excluded.py [RUNS] [EXCLUDED]
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import loopwright as lw


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    excluded = int(sys.argv[2]) if len(sys.argv) > 2 else runs - 10
    loop = lw.Loop(
        name="bench",
        actor=lambda ctx: lw.Proposal(),
        verifiers=[lw.Check(fn=lambda s, p: lw.Verdict(passed=True), name="c")],
        contract=lw.Contract(budget=lw.Budget(max_cycles=1)),
    )
    with tempfile.TemporaryDirectory() as tmp, lw.Runtime(str(Path(tmp) / "s.db")) as rt:
        ids = [rt.create(loop, {"artifacts": {}}, task_key=f"t{i}")[0].run_id for i in range(runs)]
        ordered = [r.run_id for r in rt.store.list_runs(limit=runs)]
        skip = set(ordered[-excluded:]) if excluded else set()  # (list_runs: newest first)
        assert len(ids) == runs
        said: list[str] = []
        db = rt.store._db  # type: ignore[attr-defined]
        db.set_trace_callback(said.append)
        taken = rt.store.claim_runs("bench", 60.0, limit=8, exclude=skip)
        db.set_trace_callback(None)
        selects = [s for s in said if s.lstrip().upper().startswith("SELECT")]
        print(
            f"runs={runs} excluded={len(skip)} claimed={len(taken)} statements={len(said)} "
            f"selects={len(selects)}"
        )


if __name__ == "__main__":
    main()
