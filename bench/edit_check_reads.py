"""What the check-only cycle reads to say which effects ran with what a person's edit replaced
(``_edit_check.effects_behind``), at two run lengths.

Usage:  python bench/edit_check_reads.py [--cycles 200,2000] [--repeat 7]

For each size N, a run of N cycles on a fresh SQLite store, each cycle writing a new version
of ``doc/body`` and running one effect (``requires_success=False``: N done effects in the
journal); the run stops on its cycle cap, a person edits ``doc/body``. Then, on the same store,
side by side, best of ``--repeat`` (each on a freshly loaded state, so no version is held from
the previous call):

* **before** — the polish52 walk (kept here as it was): every version of the part, the whole
  effects journal and the run's ``edited`` events;
* **after** — ``effects_behind`` as it is now: the replaced version and the done effects from
  its cycle on (the journal's ``(run_id, kind, cycle)`` index).

It prints ms per call and how many effects each names (before: every one that ran with a value
unlike the edit's; after: those that ran with the version the edit replaced).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import loopwright as lw
from loopwright._edit_check import effects_behind
from loopwright._state import TaskState, same_value
from loopwright.store import Store


def _loop(cycles: int) -> lw.Loop:
    @lw.effect("publish", name="publish", key=lambda a: f"pub:{a['text']}", requires_success=False)
    def publish(text: str) -> dict[str, Any]:
        return {"published": text}

    def actor(ctx: lw.Context) -> lw.Proposal:
        text = f"draft {ctx.cycle}"
        edits = lw.Proposal.edit("doc", {"body": text}).edits
        return lw.Proposal(edits=edits, effects=(publish.call(text=text),))

    def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(passed=True, score=0.5)

    return lw.Loop(
        name="edits",
        actor=actor,
        verifiers=[lw.Check(fn=check, name="c")],
        effects=[publish],
        approvals=lw.ApprovalPolicy((lw.PolicyRule(kind="publish", action="allow"),)),
        contract=lw.Contract(
            success=lw.Success(accept_parts="on_success"), budget=lw.Budget(max_cycles=cycles)
        ),
    )


def before(store: Store, run_id: str, state: TaskState, parts: list[str]) -> list[Any]:
    """polish52's ``effects_behind``, as it was."""
    done = [e for e in store.journal(run_id, kind="effect") if e.status == "done"]
    if not done or not parts:
        return []
    by_people = {
        (str(e.data.get("part")), e.data.get("version"))
        for e in store.events_of_kinds(run_id, ("edited",))
    }
    out: list[Any] = []
    for ref in parts:
        part = state.part(ref)
        if part is None:
            continue
        now, versions = part.current, part.versions
        for entry in done:
            there = [
                v
                for v in versions
                if v.cycle < entry.cycle or (v.cycle == entry.cycle and (ref, v.n) not in by_people)
            ]
            if not there or there[-1].n == now.n or same_value(there[-1].value, now.value):
                continue
            out.append((entry.key, there[-1].n, now.n))
    return out


def _best(fn: Any, repeat: int, fresh: Any) -> tuple[float, int]:
    """``fn(fresh())``'s best time of ``repeat`` (``fresh()`` not timed) and its count."""
    times, found = [], 0
    for _ in range(repeat):
        state = fresh()
        t0 = time.perf_counter()
        found = len(fn(state))
        times.append(time.perf_counter() - t0)
    return min(times) * 1e3, found


def measure(n: int, folder: Path, repeat: int) -> tuple[float, int, float, int]:
    path = folder / f"edits-{n}.db"
    with lw.Runtime(path) as rt:
        r = rt.run_sync(_loop(n), {"artifacts": {"doc": {"body": ""}}}, task_key=f"e{n}")
        if r.cycles != n:
            raise RuntimeError(f"benchmark run ended unexpectedly: {r.to_dict()}")
        rt.edit(r.run_id, "doc/body", "by hand", by="ann")
        st = rt.store

        def state() -> TaskState:
            return st.latest_checkpoint(r.run_id).task_state()

        pending = state().pending or {}
        parts = [str(p) for p in pending.get("parts") or ()]
        replaced = dict(pending.get("replaced") or {})
        # (a fresh state each call: the loaded versions are not carried from one to the next)
        b_ms, b_n = _best(lambda s: before(st, r.run_id, s, parts), repeat, state)
        a_ms, a_n = _best(lambda s: effects_behind(st, r.run_id, s, parts, replaced), repeat, state)
    return b_ms, b_n, a_ms, a_n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cycles", default="200,2000")
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    sizes = [int(s) for s in args.cycles.split(",")]
    print("| cycles | before ms | named | after ms | named | before ÷ after |")
    print("|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            b_ms, b_n, a_ms, a_n = measure(n, Path(tmp), args.repeat)
            ratio = b_ms / a_ms if a_ms > 0 else float("inf")
            print(f"| {n:,} | {b_ms:.2f} | {b_n:,} | {a_ms:.3f} | {a_n} | {ratio:.0f}× |")


if __name__ == "__main__":
    main()
