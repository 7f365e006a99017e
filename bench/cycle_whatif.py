"""What a piece of the engine's cycle costs: ``cycle_instructions.py --engine-only`` with named
pieces of the engine taken away, for valgrind to count what is left.

Usage:  python bench/cycle_whatif.py N [--without PIECE,PIECE...] [--time]

``(Ir(1050) - Ir(50)) / 1000`` with and without a piece is what the piece costs a cycle
(bench/README.md, "What a piece of the cycle costs"). The pieces (``--list`` prints them) are
stubbed out, so a run without one is *not* a working engine: its figures are what-ifs, an upper
bound on what any change to that piece could save, never something to ship.

``--time`` prints ``engine_us_per_cycle=``: the CPU time of the thread that runs the loop
(``asyncio.run`` of the run: its start and its end commit included, the ``Runtime``'s creation
not) divided by N, for the same what-ifs in seconds (noisy: take 2,000 cycles or more and
alternate the runs).
"""

from __future__ import annotations

import asyncio
import sys
import time
import types
from collections.abc import Callable
from typing import Any

import cycle_instructions

from loopwright import _checkpoint, _cycle, _engine, _redact
from loopwright import _state_codec as codec


def _same(obj: Any, **_: Any) -> Any:
    return obj


def _no_redact() -> None:
    _checkpoint.redact = _same  # type: ignore[assignment]
    _cycle.redact = _same  # type: ignore[assignment]


def _no_commit_redact() -> None:
    _checkpoint.redact = _same  # type: ignore[assignment]


def _no_verdict_redact() -> None:
    _cycle.redact = _same  # type: ignore[assignment]


def _no_env() -> None:
    _redact._env_secrets = lambda: ()


def _no_yield() -> None:
    # the cycle boundary's ``await asyncio.sleep(0)``: a turn of the event loop
    async def sleep(_delay: float) -> None:
        return None

    _engine.asyncio = types.SimpleNamespace(  # type: ignore[assignment]
        **{k: getattr(asyncio, k) for k in dir(asyncio) if not k.startswith("__")}
    )
    _engine.asyncio.sleep = sleep  # type: ignore[attr-defined]


def _no_copies() -> None:
    # the verifier judges the candidate and the proposal themselves
    _cycle._copies = lambda c, _loader, p, _light: (c, p)  # type: ignore[assignment]


def _no_detach() -> None:
    _cycle._copies = lambda c, _loader, p, _light: (c, p.owned())  # type: ignore[assignment]


def _no_calls() -> None:
    # call_with_retry and call_user (retry journal, sinks, deadlines) for a plain call
    async def direct(_store: Any, _ex: Any, *, fn: Any, args: Any, **_: Any) -> Any:
        t0 = time.perf_counter()
        return fn(*args), time.perf_counter() - t0

    _cycle.call_with_retry = direct  # type: ignore[assignment]


def _no_recall() -> None:
    async def recall(_self: Any, _ex: Any) -> tuple[()]:
        return ()

    _cycle.Cycle._recall = recall  # type: ignore[method-assign]


def _no_head() -> None:
    # the checkpoint's head and delta (the previous head kept, an empty delta)
    head = codec.head

    def same_head(state: Any, prev: Any = None, changed: Any = None, steps: Any = None) -> Any:
        return head(state) if prev is None else prev

    _checkpoint.codec = types.SimpleNamespace(  # type: ignore[assignment]
        **{k: getattr(codec, k) for k in dir(codec) if not k.startswith("__")}
    )
    _checkpoint.codec.head = same_head  # type: ignore[attr-defined]
    _checkpoint.codec.delta = lambda _prev, _new, _hints=None: {}  # type: ignore[attr-defined]
    # (since stop 44 a checkpoint makes both in one pass, ``advance``)
    _checkpoint.codec.advance = lambda _s, prev, _changed, _steps=None: (prev, {})  # type: ignore[attr-defined]


PIECES: dict[str, tuple[Callable[[], None], str]] = {
    "redact": (_no_redact, "the redaction net: the commit's and the verdicts'"),
    "commit-redact": (_no_commit_redact, "the commit's redaction (record, events, run columns)"),
    "verdict-redact": (_no_verdict_redact, "each verdict's redaction"),
    "env": (_no_env, "the environment check of every redaction"),
    "yield": (_no_yield, "the cycle boundary's turn of the event loop (asyncio.sleep(0))"),
    "copies": (_no_copies, "the verifier's copies (detached state, owned proposal)"),
    "detach": (_no_detach, "the verifier's detached state only"),
    "calls": (_no_calls, "call_with_retry and call_user around the actor and the verifier"),
    "recall": (_no_recall, "the feedback memory's query and ranking (the read is a no-op)"),
    "head": (_no_head, "the checkpoint's head and delta"),
}


def main(argv: list[str]) -> None:
    if "--list" in argv:
        for name, (_, what) in PIECES.items():
            print(f"{name:15} {what}")
        return
    without: list[str] = []
    if "--without" in argv:
        without = [w for w in argv[argv.index("--without") + 1].split(",") if w]
    unknown = [w for w in without if w not in PIECES]
    if unknown:
        raise SystemExit(f"unknown piece(s) {unknown}; known: {', '.join(PIECES)}")
    for w in without:
        PIECES[w][0]()
    if "--time" in argv:
        run = asyncio.run
        spent = [0.0]

        def timed(main: Any) -> Any:
            t0 = time.thread_time()
            try:
                return run(main)
            finally:
                spent[0] += time.thread_time() - t0

        cycle_instructions.asyncio = types.SimpleNamespace(run=timed)  # type: ignore[assignment]
    cycle_instructions.main([argv[0], "--engine-only"])
    if "--time" in argv:
        print(f"engine_us_per_cycle={spent[0] / int(argv[0]) * 1e6:.1f}")


if __name__ == "__main__":
    main(sys.argv[1:])
