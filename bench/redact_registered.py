"""The redaction net's cost per record with a registered API key (``register_secret``, as the
model adapters do): a trivial cycle's commit text (``net_pieces.TEXT``, 819 characters) and
the same record with a part's value of prose making it about 10 KB; ``redact_unique`` (the
commit's call), ``redact_text`` on the prose, and ``Proposal.unregistered`` (an edit's value
taken in, where the tree has it). Best of ``--repeat`` runs of ``--number`` calls, in µs a call.

Usage:  PYTHONPATH=<tree>/src python bench/redact_registered.py   (run it on both trees, one
sitting: stop 52)
        PYTHONPATH=<tree>/src python bench/redact_registered.py --calls N PIECE [--no-key]
        (PIECE N times, for valgrind to count: ``(Ir(1000) - Ir(0)) / 1000`` is a call's
        instructions, as ``net_pieces.py``; timings on a shared machine are too noisy)
"""

from __future__ import annotations

import argparse
import sys
import timeit
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).parent))
from net_pieces import PROSE, TEXT

import loopwright as lw
from loopwright import _redact

KEY = "sk-proj-Q7vX2mK9pL4wR8tY3nB6cF1hJ5dS0aZe"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--number", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--calls", type=int, default=None)
    ap.add_argument("--no-key", action="store_true")
    ap.add_argument("piece", nargs="?", choices=("small", "big", "prose", "edit"))
    args = ap.parse_args()
    small = orjson.loads(TEXT)
    big = orjson.loads(TEXT)
    big[0]["proposal"]["edits"][0]["value"] = PROSE * 6
    if args.calls is not None:
        if not args.no_key:
            _redact.register_secret(KEY)
        p = lw.Proposal.edit("doc", {"body": PROSE})
        call = {
            "small": lambda: _redact.redact_unique(small),
            "big": lambda: _redact.redact_unique(big),
            "prose": lambda: _redact.redact_text(PROSE),
            "edit": getattr(p, "unregistered", lambda: p),
        }[args.piece]
        call()  # (compiled patterns and caches made before the count)
        for _ in range(args.calls):
            call()
        return
    for keyed in (False, True):
        if keyed:
            _redact.register_secret(KEY)
        for name, rec in (("819 B", small), (f"{len(orjson.dumps(big)) // 1000} KB", big)):
            t = min(
                timeit.repeat(
                    lambda r=rec: _redact.redact_unique(r), number=args.number, repeat=args.repeat
                )
            )
            print(f"key={keyed!s:5} redact_unique {name:>6}: {t / args.number * 1e6:7.2f} µs")
        t = min(timeit.repeat(lambda: _redact.redact_text(PROSE), number=args.number, repeat=5))
        print(f"key={keyed!s:5} redact_text 1.5 KB prose: {t / args.number * 1e6:7.2f} µs")
        p = lw.Proposal.edit("doc", {"body": PROSE})
        if hasattr(p, "unregistered"):
            t = min(timeit.repeat(p.unregistered, number=args.number, repeat=args.repeat))
            print(f"key={keyed!s:5} unregistered 1.5 KB edit: {t / args.number * 1e6:7.2f} µs")


if __name__ == "__main__":
    main()
