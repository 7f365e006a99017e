"""`loopwright worker`: claim and drive runnable runs from a (shared) store until stopped."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Annotated

import typer

from .._errors import ConfigError
from ._app import JsonOpt, StoreOpt, app, print_json
from ._notify_opts import (
    NotifyEndsOpt,
    NotifyEveryOpt,
    NotifyOpt,
    NotifyRoundsOpt,
    NotifySecretOpt,
    notify_config,
    notify_line,
)
from ._options import store_flag
from ._stores import creatable_store, existing_store

if TYPE_CHECKING:
    from .._engine import RunResult, Runtime
    from .._errors import LoopwrightError
    from ..web._notify import NotifyConfig

__all__ = ["worker"]

NOTIFY_GRACE_S = 15.0  # at exit, time left to deliver the webhooks still queued


LEASE_TTL_RANGE = (1.0, 7 * 24 * 3600.0)  # --lease-ttl, seconds
POLL_MAX = 3600.0  # --poll, seconds
# statuses a run handed back by the worker has when a stop drained it (its cycle in flight
# committed, its lease released): not an end
UNFINISHED = frozenset({"pending", "running"})


@app.command(short_help="Claim runnable runs and drive them until stopped.")
def worker(
    store: StoreOpt = None,
    concurrency: Annotated[int, typer.Option("--concurrency", help="Runs driven at once.")] = 8,
    once: Annotated[
        bool, typer.Option("--once", help="Exit when nothing is runnable and all runs are done.")
    ] = False,
    poll: Annotated[float, typer.Option("--poll", help="Seconds between claims when idle.")] = 0.5,
    lease_ttl: Annotated[
        float,
        typer.Option("--lease-ttl", help="Seconds a dead worker's runs stay locked."),
    ] = 30.0,
    max_runs: Annotated[
        int | None, typer.Option("--max-runs", help="Claim at most this many runs.")
    ] = None,
    as_json: JsonOpt = False,
    notify: NotifyOpt = None,
    notify_secret: NotifySecretOpt = None,
    notify_run_ends: NotifyEndsOpt = False,
    notify_every: NotifyEveryOpt = 1.0,
    notify_rounds: NotifyRoundsOpt = 10,
    dashboard_url: Annotated[
        str | None,
        typer.Option(
            "--dashboard-url",
            metavar="URL",
            help="The dashboard's URL (`loopwright ui`), for the links in notifications.",
        ),
    ] = None,
) -> None:
    """Claim runnable runs (new, interrupted, approved) and drive them.

    On SIGTERM or Ctrl-C each run finishes its cycle in flight, checkpoints and releases its
    lease, then the worker exits.

    Exit codes: 0 once it stops (SIGTERM, Ctrl-C, --once idle, --max-runs done), whatever the
    runs it drove ended in (the summary, or --json, counts them: ended, skipped, errors);
    2 bad input or, with --once, no store at --store; 1 internal error.
    """
    # A SIGTERM while the worker starts (a slow start under load, its modules loading) must
    # stop it gracefully too, not kill it: noted until the event loop's handler replaces this
    # one (``main`` installs it before the CLI's own modules load).
    from . import EARLY_TERM, note_term

    note_term()
    import asyncio
    import signal

    from .._engine import Runtime
    from .._worker import Worker
    from . import one_line
    from ._say import console, say, say_ended

    if concurrency < 1:
        raise ConfigError("must be at least 1", field="--concurrency")
    if max_runs is not None and max_runs < 1:
        raise ConfigError("must be at least 1", field="--max-runs")
    # A lease shorter than a heartbeat's round trip passes runs back and forth between
    # workers; one of years locks a dead worker's runs for ever: both are typos, not choices.
    if not LEASE_TTL_RANGE[0] <= lease_ttl <= LEASE_TTL_RANGE[1]:
        raise ConfigError(
            f"must be from {LEASE_TTL_RANGE[0]:g} to {LEASE_TTL_RANGE[1]:g} seconds (a week), "
            f"got {lease_ttl:g}",
            field="--lease-ttl",
        )
    if not 0 < poll <= POLL_MAX:
        raise ConfigError(f"must be more than 0 and at most {POLL_MAX:g} seconds", field="--poll")
    notify_cfg = notify_config(
        notify,
        notify_secret,
        notify_run_ends,
        dashboard_url,
        "--dashboard-url",
        every_s=notify_every,
        rounds=notify_rounds,
    )
    # A store that does not exist has no run to claim: `--once` would create an empty one and
    # report "0 claimed" (a typo in --store). Refused as the read commands refuse it; a worker
    # without --once may start a store and wait for runs to be queued, in a folder that
    # exists (one that does not is a typo's, as for `run`).
    store = existing_store(store) if once else creatable_store(store)
    out = console(stderr=as_json)

    def report(r: RunResult) -> None:
        if r.status in UNFINISHED:  # drained by a stop: "running (-)" told no one what next
            say(
                f"run {r.run_id[:12]} ({r.task_key}): drained after cycle {r.cycles}, "
                f"not ended; the next worker continues it, or `loopwright resume {r.run_id[:12]}{store_flag()}`",
                out=out,
            )
            return
        say_ended(r, r.task_key, out)

    def skipped(run_id: str, why: LoopwrightError) -> None:
        # as `resume --all` says it: the count at the end told no one why
        say(f"skipped {run_id[:12]}: {one_line(why)}", out=out, style="yellow")

    with Runtime(store, lease_ttl_s=lease_ttl) as rt, _notifying(rt, notify_cfg) as said:
        if said:
            say(said, out=out)
        w = Worker(rt, concurrency=concurrency, poll_s=poll, on_result=report, on_skip=skipped)
        stopping = False

        def stop() -> None:
            nonlocal stopping
            if not stopping:
                stopping = True
                say(f"worker {rt.owner}: stopping; runs finish their cycle in flight", out=out)
            w.stop()

        async def main() -> None:
            loop = asyncio.get_running_loop()
            # Handlers before the ready line: whoever waits for it may signal at once.
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, stop)
            say(
                f"worker {rt.owner} on {rt.store.url}: claiming up to {concurrency} run(s)"
                + (" (until idle)" if once else "; SIGTERM or Ctrl-C to stop gracefully"),
                out=out,
            )
            if EARLY_TERM:  # (before any claim: ``stop`` first, then ``w.run`` claims nothing)
                EARLY_TERM.clear()
                stop()
            await w.run(once=once, max_runs=max_runs)

        asyncio.run(main())
    if as_json:
        print_json(w.stats.to_dict())
    else:
        s = w.stats
        drained = sum(v for k, v in s.ended.items() if k in UNFINISHED)
        ended = (
            ", ".join(f"{k} {v}" for k, v in sorted(s.ended.items()) if k not in UNFINISHED)
            or "none"
        )
        # (a drained run is counted apart: "ended: running 4" said the opposite of what held)
        left = (
            f"; drained {drained} (not ended: the next worker continues them, or "
            f"`loopwright resume --all{store_flag()}`)"
            if drained
            else ""
        )
        say(
            f"worker done: {s.claimed} claimed; ended: {ended}{left}; skipped {s.skipped}; "
            f"lost {s.lost}; errors {s.errors}",
            out=out,
        )


@contextlib.contextmanager
def _notifying(rt: Runtime, cfg: NotifyConfig | None) -> Iterator[str]:
    """The store poller and webhook notifier (``--notify``) beside the worker's runs, on
    threads of their own; yields the line to print (empty without ``--notify``)."""
    if cfg is None:
        yield ""
        return
    from ..web._feed import Feed
    from ..web._notify import Notifier

    feed, notifier = Feed(rt.store), Notifier(rt.store, cfg)
    feed.listen(notifier)
    notifier.start()
    feed.start()
    try:
        yield notify_line(cfg)
    finally:
        feed.stop()
        try:
            feed.poll()  # one last look: requests raised as the last runs parked
        finally:
            notifier.stop(grace_s=NOTIFY_GRACE_S)
