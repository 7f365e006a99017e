"""``concurrent_runs.py``'s loop (async actor and verifier) as one run whose task has a part of
SIZE characters, for valgrind to count what that part costs a cycle (stop 49, digest49).

Usage:  python bench/part_size_instructions.py CYCLES SIZE [--changing]

The actor sends the part every cycle: the same text (a new ``str`` object each time, as
``concurrent_runs.py``'s ``PAYLOAD[:1500]``), or with ``--changing`` a text whose first
characters name the cycle (a document being edited: a new version each cycle). The text is
prose (ASCII words, spaces, newlines, quotes). ``(Ir(60) - Ir(10)) / 50`` is a cycle's
instructions; store ``durability=process`` as ``cycle_instructions.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import tempfile

import loopwright as lw

_WORDS = 'the loop keeps a "draft" of each section and\nrevises it until the checks pass; '


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("cycles", type=int)
    ap.add_argument("size", type=int)
    ap.add_argument("--changing", action="store_true")
    a = ap.parse_args()
    text = (_WORDS * (a.size // len(_WORDS) + 1))[: a.size]

    async def actor(ctx: lw.Context) -> lw.Proposal:
        body = f"rev {ctx.cycle:06d} " + text[11:] if a.changing else text[: a.size]
        return lw.Proposal.edit("doc", {"p1": f"value {ctx.cycle}", "pad": body})

    async def verifier(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(
            passed=False, score=0.5, findings=(lw.Finding("still wrong", "doc", "p1", "value"),)
        )

    loop = lw.Loop(
        name="bench-part-size",
        actor=actor,
        verifiers=[verifier],
        contract=lw.Contract(budget=lw.Budget(max_cycles=a.cycles)),
    )
    url = f"sqlite:///{tempfile.mkdtemp()}/x.db?durability=process"
    with lw.Runtime(url) as rt:
        gc.collect()
        gc.freeze()
        r = asyncio.run(rt.run_many(loop, [{"artifacts": {"doc": {"p1": "", "pad": ""}}}]))
    if r[0].cycles != a.cycles:
        raise SystemExit(f"ran {r[0].cycles} cycles, not {a.cycles}")


if __name__ == "__main__":
    main()
