"""The chat adapters' reply check (``parse_reply``: JSON, schema, nesting, lone surrogates) on
large replies, two trees side by side.

Usage:  python bench/parse_reply.py --before /path/to/old/checkout/src [--after src]

Each tree runs in a fresh subprocess, ABBA order, best of 5 per size (a collection before each,
only the reply's text held); a reply is either one
edit whose value is a string of N characters (ASCII, or with one non-ASCII character at its
end) or edits of ~40 characters each adding up to N. Prints milliseconds and after/before.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

CHILD = """
import gc, json, sys, time
sys.path.insert(0, {src!r})
from loopwright.adapters._schema import PROPOSAL_SCHEMA, parse_reply
out = {{}}
for n in (10_000, 1_000_000, 5_000_000):
    shapes = {{
        "one ASCII string": lambda: {{"edits": [{{"artifact": "d", "part": "t", "value": "y" * n}}]}},
        "one string, one é": lambda: {{"edits": [{{"artifact": "d", "part": "t", "value": "y" * n + "é"}}]}},
        "edits of 40 chars": lambda: {{"edits": [{{"artifact": "d", "part": f"p{{i}}", "value": [1, "x"]}}
                                                for i in range(n // 40)]}},
    }}
    for shape, make in shapes.items():
        # only the text is kept (an adapter holds the reply's text, not a parsed copy of it: a
        # copy held would be walked by every collection the parse triggers, the same cost on
        # both sides, and the noise of it)
        text = json.dumps(make(), ensure_ascii=False)
        best = float("inf")
        for _ in range(5):
            gc.collect()
            t0 = time.perf_counter()
            parse_reply(text, PROPOSAL_SCHEMA)
            best = min(best, time.perf_counter() - t0)
        out[f"{{n:>9,}} {{shape}}"] = best * 1000
print(json.dumps(out))
"""


def _run(src: str) -> dict[str, float]:
    got = subprocess.run(
        [sys.executable, "-c", CHILD.format(src=src)], capture_output=True, text=True, check=True
    )
    return dict(json.loads(got.stdout))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", required=True)
    ap.add_argument("--after", default=str(Path(__file__).resolve().parent.parent / "src"))
    ap.add_argument("--rounds", type=int, default=1, help="ABBA rounds (a noisy machine: more)")
    args = ap.parse_args()
    runs = {"before": [], "after": []}  # type: dict[str, list[dict[str, float]]]
    for who in ("before", "after", "after", "before") * max(args.rounds, 1):
        runs[who].append(_run(getattr(args, who)))
    print(f"{'reply':<32} {'before ms':>10} {'after ms':>10} {'ratio':>6}")
    for key in runs["before"][0]:
        b = min(r[key] for r in runs["before"])
        a = min(r[key] for r in runs["after"])
        print(f"{key:<32} {b:>10.2f} {a:>10.2f} {a / b:>6.2f}")


if __name__ == "__main__":
    main()
