"""What a piece of the engine's cycle costs: ``cycle_instructions.py --engine-only`` with named
pieces of the engine taken away, for valgrind to count what is left.

Usage:  python bench/cycle_whatif.py N [--without PIECE,PIECE...] [--time]
        python bench/cycle_whatif.py --compare SRC_A SRC_B [--sizes 200,2000] [--rounds 8]
                                     [--cpu 1] [--without PIECE,...] [--b-without PIECE,...]
        python bench/cycle_whatif.py N --sample [--runs 40]

``(Ir(1050) - Ir(50)) / 1000`` with and without a piece is what the piece costs a cycle
(bench/README.md, "What a piece of the cycle costs"). The pieces (``--list`` prints them) are
stubbed out, so a run without one is *not* a working engine: its figures are what-ifs, an upper
bound on what any change to that piece could save, never something to ship.

``--time`` prints ``engine_us_per_cycle=``: the CPU time of the thread that runs the loop
(``asyncio.run`` of the run: its start and its end commit included, the ``Runtime``'s creation
not) divided by N, for the same what-ifs in seconds (noisy: take 2,000 cycles or more and
alternate the runs), and ``steady_us_per_cycle=``: the process's CPU time from the actor's call
at the end of the run's first tenth to its last call, divided by the cycles between (no start,
no end, no first cycles' warm-up).

``--compare`` runs ``N --time`` as child processes, ``PYTHONPATH`` set to each ``src`` folder
in turn, ABBA (A B B A B A A B ...) for ``--rounds`` rounds at each of ``--sizes``, each child
pinned to ``--cpu`` by ``taskset`` when given; per tree and size it prints the minimum and the
median of both figures, then B − A (``--b-without`` takes pieces away in B's runs only: with
the same tree twice, what they cost in seconds). ``--sample`` runs ``--runs`` runs of N cycles
in one process and samples the Python stack on the process's CPU clock (``ITIMER_PROF``, over
cycles N/10 to N of each run): the share of samples by module and by function, each sample
given to the innermost Python frame (a C call's time lands on the Python code that called it,
at the next point the interpreter checks for signals). The minimum is the figure least blurred by a noisy
neighbour (noise only adds CPU time: cache misses, a descheduled core's cold caches).
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
import types
from collections.abc import Callable
from typing import Any

import cycle_instructions

from loopwright import _checkpoint, _cycle, _engine, _redact
from loopwright import _state_codec as codec

try:  # the loop of cycles, ``_drive``: in ``_driving`` since stop 54, ``_engine`` before
    from loopwright import _driving as _drive_home
except ImportError:
    _drive_home = _engine  # type: ignore[assignment]


def _same(obj: Any, **_: Any) -> Any:
    return obj


def _no_redact() -> None:
    _no_commit_redact()
    _cycle.redact = _same  # type: ignore[assignment]


def _no_commit_redact() -> None:
    _checkpoint.redact = _same  # type: ignore[assignment]
    # (since stop 46 a commit with a record is scanned by ``redact_unique``)
    if hasattr(_checkpoint, "redact_unique"):
        _checkpoint.redact_unique = _same  # type: ignore[attr-defined]


def _no_verdict_redact() -> None:
    _cycle.redact = _same  # type: ignore[assignment]


def _no_env() -> None:
    _redact.env_secrets = lambda: ()
    # Since split55b the registry's own ``_values`` (``redact_text``, and ``redact`` once a
    # secret is registered) reads it where it now lives: stubbed in ``_redact`` alone, those
    # calls kept the check (review55b).
    try:
        from loopwright import _redact_registry
    except ImportError:  # (a tree from before the split: ``_redact`` is its home)
        return
    _redact_registry.env_secrets = lambda: ()


def _no_yield() -> None:
    # the cycle boundary's ``await asyncio.sleep(0)``: a turn of the event loop
    async def sleep(_delay: float) -> None:
        return None

    _drive_home.asyncio = types.SimpleNamespace(  # type: ignore[assignment]
        **{k: getattr(asyncio, k) for k in dir(asyncio) if not k.startswith("__")}
    )
    _drive_home.asyncio.sleep = sleep  # type: ignore[attr-defined]


def _set_copies(fn: Any) -> None:
    # the name the cycle reads: ``verifier_copies`` since stop 54 (``_copies`` before, where
    # setting it now measured nothing)
    setattr(_cycle, "verifier_copies" if hasattr(_cycle, "verifier_copies") else "_copies", fn)


def _no_copies() -> None:
    # the verifier judges the candidate and the proposal themselves
    _set_copies(lambda c, _loader, p, *_: (c, p))


def _no_detach() -> None:
    # (``settled``: the proposal known to be its own copy; a tree before it had no such flag)
    def copies(c: Any, _loader: Any, p: Any, _light: bool, settled: bool = False) -> Any:
        return c, p if settled else p.owned()

    _set_copies(copies)


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
    if hasattr(_cycle.Cycle, "_recall_now"):  # (a tree whose cycle asks it first, no coroutine)
        _cycle.Cycle._recall_now = lambda _self, _ex: ()  # type: ignore[method-assign]


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


def _steady(stamps: list[float]) -> None:
    # the trivial loop's actor, reading the process's CPU time at the call that ends the run's
    # first tenth and at the last (two reads only: one costs ≈ 1.2 µs, a system call)
    make = cycle_instructions.make_loop

    def make_loop(n: int) -> Any:
        loop = make(n)
        actor = loop.actor
        first, calls = n // 10, [0]

        def stamped(ctx: Any) -> Any:
            calls[0] += 1
            if calls[0] == first or calls[0] == n:
                stamps.append(time.process_time())
                stamps.append(calls[0])
            return actor(ctx)

        return dataclasses.replace(loop, actor=stamped)

    cycle_instructions.make_loop = make_loop  # type: ignore[assignment]


def sample(argv: list[str]) -> None:
    """CPU-clock samples of the running frame, over the steady part of ``--runs`` runs."""
    n = int(argv[0])
    runs = int(argv[argv.index("--runs") + 1]) if "--runs" in argv else 40
    by_module: collections.Counter[str] = collections.Counter()
    by_function: collections.Counter[str] = collections.Counter()

    def tick(_sig: int, frame: Any) -> None:
        code = frame.f_code
        name = os.path.basename(code.co_filename)
        by_module[name] += 1
        by_function[f"{name}:{code.co_name}"] += 1

    signal.signal(signal.SIGPROF, tick)
    make = cycle_instructions.make_loop

    def make_loop(k: int) -> Any:
        loop = make(k)
        actor, calls = loop.actor, [0]

        def sampled(ctx: Any) -> Any:
            calls[0] += 1
            if calls[0] == k // 10:
                signal.setitimer(signal.ITIMER_PROF, 0.001, 0.001)
            elif calls[0] == k:
                signal.setitimer(signal.ITIMER_PROF, 0, 0)
            return actor(ctx)

        return dataclasses.replace(loop, actor=sampled)

    cycle_instructions.make_loop = make_loop  # type: ignore[assignment]
    for _ in range(runs):
        cycle_instructions.main([str(n), "--engine-only"])
    total = sum(by_module.values()) or 1
    print(f"samples={total}")
    for title, counts in (("module", by_module), ("function", by_function)):
        print(f"--- self share by {title}")
        for key, c in counts.most_common(40):
            print(f"{100 * c / total:6.1f}%  {key}")


def _order(rounds: int) -> list[int]:
    # ABBA BAAB ...: each tree as often first as second, in every pair of rounds
    return [[0, 1, 1, 0, 1, 0, 0, 1][i % 8] for i in range(rounds * 2)]


def compare(argv: list[str]) -> None:
    """Both trees' ``--time`` figures, ABBA, each run a child process."""
    i = argv.index("--compare")
    trees = [os.path.abspath(argv[i + 1]), os.path.abspath(argv[i + 2])]

    def opt(name: str, default: str) -> str:
        return argv[argv.index(name) + 1] if name in argv else default

    sizes = [int(s) for s in opt("--sizes", "200,2000").split(",")]
    rounds = int(opt("--rounds", "8"))
    pin = ["taskset", "-c", opt("--cpu", "")] if "--cpu" in argv and shutil.which("taskset") else []
    extra = ["--without", opt("--without", "")] if "--without" in argv else []
    # B may be the same tree with pieces taken away: what they cost, in seconds
    extras = [extra, ["--without", opt("--b-without", "")] if "--b-without" in argv else extra]
    script = os.path.abspath(__file__)
    got: dict[tuple[int, int], dict[str, list[float]]] = {}
    for n in sizes:
        for t in _order(rounds):
            env = dict(os.environ, PYTHONPATH=trees[t], PYTHONHASHSEED="0")
            cmd = [*pin, sys.executable, script, str(n), "--time", *extras[t]]
            out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
            row = got.setdefault((t, n), {})
            for line in out.splitlines():
                if "_us_per_cycle=" in line:
                    k, v = line.split("=")
                    row.setdefault(k, []).append(float(v))
    print(
        f"A = {trees[0]} {' '.join(extras[0])}\nB = {trees[1]} {' '.join(extras[1])}\n"
        f"{rounds} rounds ABBA{' on CPU ' + pin[2] if pin else ''}"
    )
    print(f"{'tree':4} {'N':>6} {'figure':22} {'min':>7} {'median':>7}  runs")
    for n in sizes:
        for k in ("engine_us_per_cycle", "steady_us_per_cycle"):
            mins = []
            for t in (0, 1):
                xs = got[(t, n)][k]
                mins.append((min(xs), statistics.median(xs)))
                runs = " ".join(f"{x:.1f}" for x in xs)
                print(
                    f"{'AB'[t]:4} {n:>6} {k:22} {min(xs):7.1f} {statistics.median(xs):7.1f}  {runs}"
                )
            print(
                f"{'B-A':4} {n:>6} {k:22} {mins[1][0] - mins[0][0]:+7.1f} "
                f"{mins[1][1] - mins[0][1]:+7.1f}"
            )


def main(argv: list[str]) -> None:
    if "--compare" in argv:
        compare(argv)
        return
    if "--sample" in argv:
        sample(argv)
        return
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
        stamps: list[float] = []
        _steady(stamps)
    cycle_instructions.main([argv[0], "--engine-only"])
    if "--time" in argv:
        print(f"engine_us_per_cycle={spent[0] / int(argv[0]) * 1e6:.1f}")
        t0, c0, t1, c1 = stamps
        steady = (t1 - t0) / (c1 - c0)
        print(f"steady_us_per_cycle={steady * 1e6:.1f}")


if __name__ == "__main__":
    main(sys.argv[1:])
