"""What ``build_spans`` costs over a synthetic log of C cycles of five events (no store).

Usage:  python bench/span_segment.py [--cycles 2000] [--calls 2]

Deterministic with valgrind (instructions, not seconds: the VM is shared):

    valgrind --tool=callgrind --callgrind-out-file=/dev/null python bench/span_segment.py --calls 0
    valgrind --tool=callgrind --callgrind-out-file=/dev/null python bench/span_segment.py --calls 2

(the difference of the two ``refs`` over ``--calls`` is one ``build_spans``).
"""

from __future__ import annotations

import argparse

from loopwright.store import Event, RunRecord
from loopwright.trace import build_spans

_KINDS = ("cycle_started", "model_call", "effect_started", "effect_finished", "decision")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cycles", type=int, default=2000)
    ap.add_argument("--calls", type=int, default=2)
    args = ap.parse_args()
    run = RunRecord(
        "r", "k", "loop", "p", "running", None, args.cycles, None, 0.0, 0, 0.0, None, None,
        {}, {}, None, 0.0, 0.0, None, False, None, None, 0, 0,
    )  # fmt: skip
    events = [
        Event(i, "r", c, kind, float(i), {})
        for i, (c, kind) in enumerate(
            ((c, k) for c in range(1, args.cycles + 1) for k in _KINDS), start=1
        )
    ]
    for _ in range(args.calls):
        build_spans(run, events, [], [])


if __name__ == "__main__":
    main()
