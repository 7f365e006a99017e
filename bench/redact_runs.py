"""redact_text on adversarial texts: ``x-eyJ`` repeated (every ``eyJ`` after a ``-`` starts
a word, where a JSON Web Token may start), and a text of the same size without one. Prints
the size and the seconds of one call, best of ``--repeat``. Run it with PYTHONPATH pointing
at the tree to measure (review44, stop 44)."""

from __future__ import annotations

import argparse
import time

from loopwright._redact import redact_text


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="25000,100000")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    for n in (int(x) for x in args.sizes.split(",")):
        for name, text in (("x-eyJ", ("x-eyJ" * n)[:n]), ("plain", ("lorem ipsum " * n)[:n])):
            best = min(_once(text) for _ in range(args.repeat))
            print(f"{name:6} {n:>8} chars: {best * 1000:9.1f} ms")


def _once(text: str) -> float:
    t0 = time.perf_counter()
    redact_text(text)
    return time.perf_counter() - t0


if __name__ == "__main__":
    main()
