"""redact() on a record of prose that holds ``account`` but no secret, and on one that holds
neither: the cost of the ``account`` prefilter needle (fixes52c, Azure's ``AccountKey`` as a
key). Prints microseconds per call (fresh texts each call: the clean-text cache not hit), best
of ``--repeat``. Run it with PYTHONPATH pointing at the tree to measure, base and new in one
session."""

from __future__ import annotations

import argparse
import time

from loopwright._redact import redact


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="200,5000")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--calls", type=int, default=2000)
    args = ap.parse_args()
    for n in (int(x) for x in args.sizes.split(",")):
        for name, word in (("account", "the account holder "), ("plain", "the other holder ")):
            best = min(_round(word, n, args.calls) for _ in range(args.repeat))
            print(f"{name:8} {n:>6} chars: {best * 1e6:8.2f} us/call")


def _round(word: str, n: int, calls: int) -> float:
    texts = [{"note": (f"{i} " + word * (n // len(word) + 1))[:n]} for i in range(calls)]
    t0 = time.perf_counter()
    for t in texts:
        redact(t)
    return (time.perf_counter() - t0) / calls


if __name__ == "__main__":
    main()
