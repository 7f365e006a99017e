"""The trivial loop (bench/cycle_phases.py's) run for N cycles, for valgrind to count its
instructions: a fixed series of run ids and the start-up's objects frozen out of the
collector, so that two runs of the same tree count the same within about 3 k a cycle.

Usage:  python bench/cycle_instructions.py N [--engine-only]

``(Ir(1050) - Ir(50)) / 1000`` is the instructions a cycle (bench/README.md, "Instructions,
not seconds"). ``--engine-only`` takes the store away as cycle_phases.py's last line does
("without the commit and the memory read"): the cycle's commit a no-op, the memory read
empty, so what is counted is the engine's own Python.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import itertools
import sys
import tempfile
import uuid
from typing import Any

from cycle_phases import TASK, make_loop

import loopwright as lw
from loopwright.store import _sql
from loopwright.store._base import CommitRequest

_ids = itertools.count(1)


def _fixed_uuid4() -> uuid.UUID:
    # the run's id (and its string's hash, which decides where dicts and sets put things) is
    # the same in every run
    return uuid.UUID(int=next(_ids) * 1_000_003)


def main(argv: list[str]) -> None:
    n = int(argv[0])
    engine_only = "--engine-only" in argv
    skipped = [0]
    if engine_only:
        commit = _sql.SQLStore.commit_request

        def no_commit(self: Any, it: CommitRequest) -> bool:
            if it.record is None or it.run.get("status") not in (None, "running"):
                return bool(commit(self, it))
            skipped[0] += 1
            return False

        _sql.SQLStore.commit_request = no_commit  # type: ignore[method-assign]
        _sql.SQLStore.memory_search = lambda self, s: [[] for _ in s]  # type: ignore[method-assign]
        # (a tree whose recall asks both sides in one call: the same, empty; ignored before)
        _sql.SQLStore.memory_recall = lambda self, r: [([], []) for _ in r]  # type: ignore[method-assign]
    uuid.uuid4 = _fixed_uuid4
    rt = lw.Runtime(f"sqlite:///{tempfile.mkdtemp()}/x.db?durability=process")
    gc.collect()
    gc.freeze()  # the start-up's objects: never traversed again (no full collection's noise)
    if not engine_only:
        assert asyncio.run(rt.run(make_loop(n), TASK, task_key="k")).cycles == n
        return
    # The cycles' commits were skipped, so the versions the result reads back were never
    # written: its read fails, at the same cost at every N. What is checked is that every
    # cycle but the last (an ending commit is real) reached its commit.
    with contextlib.suppress(LookupError):
        asyncio.run(rt.run(make_loop(n), TASK, task_key="k"))
    if skipped[0] != n - 1:
        raise SystemExit(f"engine-only: {skipped[0]} cycles reached the commit, not {n - 1}")
    print(f"engine-only: {n} cycles, {skipped[0]} commits skipped", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1:])
