"""Where one governed cycle's CPU goes, phase by phase (the trivial loop, one run).

Usage:  python bench/cycle_phases.py [--cycles 2000] [--durability process|full] [--dir DIR]

One run of a trivial loop (the actor writes one part, the verifier rejects it with one finding:
every cycle takes the whole path) on the embedded SQLite store. The engine's phase functions
are wrapped with ``time.thread_time_ns`` (CPU of this thread: waiting for the disk is not
counted), each phase's time *exclusive* of the phases it calls; what no wrapper covers (the
cycle's own glue: events, the proposal's digest, the usage arithmetic, the event loop's turn)
is the "rest". The wrappers themselves cost a little (≈ 0.3 µs each, 14 a cycle), so the
total is a few µs above an unwrapped run's, which is printed beside it (same process, same
store, run before the wrapped one).

Then two more unwrapped runs take the store away piece by piece, to show the engine's own
Python apart from SQLite: the cycle's commit replaced by a no-op, then also the memory read.
The last line is ``engine_cpu_us_per_cycle=<float>`` (the unwrapped run).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import inspect
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import loopwright as lw
from loopwright import _checkpoint, _cycle, _engine
from loopwright import _state_codec as codec
from loopwright.store import _sql
from loopwright.store._base import CommitRequest

TASK = {"goal": "a long loop", "artifacts": {"doc": {"body": "", "title": "a title"}}}


def make_loop(cycles: int) -> lw.Loop:
    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal.edit("doc", {"body": f"draft {ctx.cycle}"})

    def verifier(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(
            passed=False, score=0.5, findings=(lw.Finding("still open", "doc", "body", "text"),)
        )

    return lw.Loop(
        name="phases",
        actor=actor,
        verifiers=[lw.Check(fn=verifier, name="check")],
        contract=lw.Contract(budget=lw.Budget(max_cycles=cycles)),
    )


class Phases:
    """Exclusive CPU per phase: a phase's time less that of the phases it called."""

    def __init__(self) -> None:
        self.cpu: Counter[str] = Counter()
        self.stack: list[int] = []  # children's time of each open phase
        self.patched: list[tuple[Any, str, Any]] = []

    def wrap(self, owner: Any, name: str, label: Callable[..., str] | str) -> None:
        fn = getattr(owner, name)
        clock = time.thread_time_ns
        cpu, stack = self.cpu, self.stack

        def name_of(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
            return label if isinstance(label, str) else label(*args, **kwargs)

        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def awrapped(*args: Any, **kwargs: Any) -> Any:
                stack.append(0)
                t0 = clock()
                try:
                    return await fn(*args, **kwargs)
                finally:
                    spent = clock() - t0
                    children = stack.pop()
                    cpu[name_of(args, kwargs)] += spent - children
                    if stack:
                        stack[-1] += spent

            setattr(owner, name, awrapped)
        else:

            @functools.wraps(fn)
            def wrapped(*args: Any, **kwargs: Any) -> Any:
                stack.append(0)
                t0 = clock()
                try:
                    return fn(*args, **kwargs)
                finally:
                    spent = clock() - t0
                    children = stack.pop()
                    cpu[name_of(args, kwargs)] += spent - children
                    if stack:
                        stack[-1] += spent

            setattr(owner, name, wrapped)
        self.patched.append((owner, name, fn))

    def undo(self) -> None:
        for owner, name, fn in reversed(self.patched):
            setattr(owner, name, fn)
        self.patched.clear()


PHASES = [
    ("context (state → Context)", "context"),
    ("memory read (store probe)", "memory"),
    ("actor call (retry wrapper, dispatch)", "actor"),
    ("candidate state (fork, apply)", "candidate"),
    ("verifier call (retry wrapper, dispatch)", "verifier"),
    ("verdict masking (redact)", "verdict_redact"),
    ("decide (contract rules, record)", "decide"),
    ("state codec (head, delta, versions)", "codec"),
    ("record/events masking (redact)", "masked"),
    ("stage + commit glue (engine)", "commit_glue"),
    ("SQLite commit (store: rows, SQL)", "sql"),
    ("after commit (trim, hooks)", "committed"),
]


def instrument(ph: Phases) -> None:
    rt = _engine.Runtime
    ph.wrap(rt, "_context", "context")
    ph.wrap(_sql.SQLStore, "memory_recall", "memory")
    ph.wrap(
        _cycle,
        "call_with_retry",
        lambda *a, **k: "actor" if k.get("scope") == "actor" else "verifier",
    )
    ph.wrap(_cycle, "_candidate", "candidate")
    ph.wrap(_cycle, "redact", "verdict_redact")
    ph.wrap(rt, "_conclude", "decide")
    for fn in ("head", "delta", "unwritten_versions"):
        ph.wrap(codec, fn, "codec")
    ph.wrap(_checkpoint, "_masked", "masked")
    ph.wrap(rt, "_commit", "commit_glue")
    ph.wrap(rt, "_stage", "commit_glue")
    ph.wrap(_sql.SQLStore, "commit_request", "sql")
    ph.wrap(_sql.SQLStore, "commit_many", "sql")
    ph.wrap(rt, "_committed", "committed")


def cpu_per_cycle(rt: lw.Runtime, cycles: int, key: str, *, stored: bool = True) -> float:
    t0 = time.thread_time_ns()
    try:
        result = asyncio.run(rt.run(make_loop(cycles), TASK, task_key=key))
    except LookupError:
        # Without the cycle commits the store lacks the versions the result would load.
        if stored:
            raise
        return (time.thread_time_ns() - t0) / cycles / 1000
    spent = time.thread_time_ns() - t0
    if result.cycles != cycles:
        raise RuntimeError(f"the run ended early: {result.to_dict()}")
    return spent / cycles / 1000


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--cycles", type=int, default=2000)
    ap.add_argument("--durability", choices=("process", "full"), default="process")
    ap.add_argument("--dir", default=None, help="folder for the database (default: temp)")
    args = ap.parse_args(argv)
    folder = Path(tempfile.mkdtemp(prefix="lw-phases-", dir=args.dir))
    url = f"sqlite:///{folder / 'phases.db'}"
    if args.durability == "process":
        url += "?durability=process"
    rt = lw.Runtime(url)
    try:
        cpu_per_cycle(rt, 50, "warm-up")
        plain = cpu_per_cycle(rt, args.cycles, "plain")
        ph = Phases()
        instrument(ph)
        try:
            wrapped = cpu_per_cycle(rt, args.cycles, "wrapped")
        finally:
            ph.undo()
        # The store taken away piece by piece (unwrapped): the cycle's commit, then the memory
        # read. The run's first and last commits (no cycle record) still go to the store.
        commit, search = _sql.SQLStore.commit_request, _sql.SQLStore.memory_search
        recall = _sql.SQLStore.memory_recall

        def no_commit(self: Any, it: CommitRequest) -> bool:
            if it.record is None or it.run.get("status") not in (None, "running"):
                return bool(commit(self, it))
            return False

        try:
            _sql.SQLStore.commit_request = no_commit  # type: ignore[method-assign]
            without_commit = cpu_per_cycle(rt, args.cycles, "no-commit", stored=False)
            _sql.SQLStore.memory_search = lambda self, s: [[] for _ in s]  # type: ignore[method-assign]
            _sql.SQLStore.memory_recall = lambda self, r: [([], []) for _ in r]  # type: ignore[method-assign]
            without_store = cpu_per_cycle(rt, args.cycles, "no-store", stored=False)
        finally:
            _sql.SQLStore.commit_request = commit  # type: ignore[method-assign]
            _sql.SQLStore.memory_search = search  # type: ignore[method-assign]
            _sql.SQLStore.memory_recall = recall  # type: ignore[method-assign]
    finally:
        rt.close()
    n = args.cycles
    rows = [(title, ph.cpu[key] / n / 1000) for title, key in PHASES]
    covered = sum(us for _, us in rows)
    print(f"# {n} cycles, durability={args.durability}; CPU of the event loop's thread, µs/cycle")
    print(f"{'phase':<42}{'µs/cycle':>10}{'share':>8}")
    for title, us in rows:
        print(f"{title:<42}{us:>10.1f}{100 * us / wrapped:>7.0f}%")
    rest = wrapped - covered
    print(
        f"{'rest (cycle glue, events, event loop)':<42}{rest:>10.1f}{100 * rest / wrapped:>7.0f}%"
    )
    print(f"{'total, wrapped':<42}{wrapped:>10.1f}")
    print(f"{'total, unwrapped':<42}{plain:>10.1f}")
    print(f"{'  without the cycle commit':<42}{without_commit:>10.1f}")
    print(f"{'  without the commit and the memory read':<42}{without_store:>10.1f}")
    print(f"engine_cpu_us_per_cycle={plain:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
