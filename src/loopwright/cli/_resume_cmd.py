"""`loopwright resume`, and what continuing a run needs: its loop, loaded from its spec, and
the hint saying how to continue it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from .._errors import ConfigError, ConflictError
from ._options import JsonOpt, StoreOpt, TokenOpt, print_json, run_ref, store_flag
from ._root_app import app
from ._stores import existing_store

if TYPE_CHECKING:
    from collections.abc import Sequence

    from rich.console import Console

    from .._engine import RunResult, Runtime
    from .._loop import Loop
    from ..store import RunRecord, Store


def loop_for(rec: RunRecord) -> Loop:
    from .._spec import loop_of_run

    return loop_of_run(rec)


def loop_or_none(rec: RunRecord) -> Loop | None:
    """The run's loop when its spec can be loaded (to offer compensations), else None."""
    if not rec.spec_ref:
        return None
    try:
        return loop_for(rec)
    except ConfigError as exc:
        from ._say import say

        say(f"compensations not offered: {exc}", stderr=True, style="yellow")
        return None


def continue_hint(rec: RunRecord, verb: str = "continue it") -> str:
    """How to go on with ``rec``: ``loopwright resume`` for a run started from a spec; one
    started from Python is resumed there, with its loop (``loopwright resume`` refuses it,
    having no loop to load)."""
    if rec.spec_ref:
        return f"{verb} with: loopwright resume {rec.run_id[:12]}{store_flag()}"
    return f"{verb} from Python, with its loop: Runtime.resume({rec.run_id[:12]!r}, loop)"


@app.command(short_help="Continue an interrupted or decided run.")
def resume(
    run_id: Annotated[
        str | None,
        typer.Argument(
            metavar="RUN",
            help="Run id (or a unique prefix, or its task key); or give --all.",
            callback=run_ref,
        ),
    ] = None,
    all_: Annotated[
        bool,
        typer.Option(
            "--all",
            help="Every interrupted run, every run a batch left unstarted, and every parked "
            "run whose approval has been decided; a fork never started is left to its maker.",
        ),
    ] = False,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
    token: TokenOpt = None,
) -> None:
    """Continue an interrupted or parked-and-decided run from its last checkpoint."""
    if (run_id is None) == (not all_):
        raise ConfigError("give a RUN or --all (not both)", field="RUN")
    from .._authority import operate
    from .._engine import Runtime
    from ._interrupt import run_async
    from ._people_cmd import acting_as
    from ._tasks import exit_code_for

    with Runtime(existing_store(store)) as rt:
        if rt.store.has_users():  # an open store keeps resume as it was: no record per run
            target = f"run {run_id or '--all'}"
            who = acting_as(rt.store, None, token, action="resume", target=target)
            operate(rt.store, who, "resume", target, origin="cli")
        forks: list[RunRecord] = []
        if run_id is not None:
            targets = [rt.store.get_run(run_id)]
        else:
            targets = [r for r in rt.store.list_runs() if _resumable(rt.store, r)]
            # A fork never started is its maker's to start (after an edit, say): not driven
            # here, said below (polish52). A batch's runs `run` had not reached still are.
            # (marked so by the store, ``maker_starts``: one paused and unpaused before its
            # start is parked, not pending; a store without the mark: pending forks, as before)
            marked = _keeps_the_mark(rt.store)
            forks = [r for r in targets if _maker_starts(r, marked)]
            targets = [r for r in targets if not _maker_starts(r, marked)]
        results: list[RunResult] = []
        from ._say import console, say, say_ended

        out = console(stderr=as_json)
        skipped: list[str] = []  # not resumed here: exit 0 would read as "all accepted"
        for rec in targets:
            named = f"{rec.run_id[:12]} ({rec.task_key})"
            try:
                loop = loop_for(rec)
            except ConfigError as exc:
                if run_id is not None:
                    raise
                # the message alone: "skipped X: spec: the run's spec ..." read as a raw error
                say(f"skipped {named}: {exc.message}", out=out, style="yellow")
                skipped.append(named)
                continue
            try:
                res = run_async(
                    rt.resume(rec.run_id, loop), [rec.run_id] if run_id is not None else []
                )
            except ConflictError as exc:
                now = rt.store.get_run(rec.run_id)  # (read once: the hint and the line)
                hint = _held_elsewhere(rt, now)
                if run_id is not None:
                    if hint:
                        raise ConflictError(f"{exc}; {hint}") from exc
                    raise
                say(f"skipped {named}: {_held_text(rt, now) or exc}" + (f"; {hint}" if hint else ""),
                    out=out, style="yellow")  # fmt: skip
                skipped.append(named)
                continue
            results.append(res)
            say_ended(res, rec.task_key, out)
        if not targets:
            say("nothing to resume", out=out)
        if run_id is None and forks:
            _forks_left(forks, out)
        for line in next_steps(results):
            say(line, out=out)
    if as_json:
        from .._hints import carry_store_in

        print_json([carry_store_in(r.to_dict(), store_flag()) for r in results])
    code = exit_code_for([r.status for r in results])
    if skipped and code != 1:
        raise ConfigError(
            f"{len(skipped)} of {len(targets)} run(s) were skipped, not resumed (why: above): "
            + ", ".join(skipped),
            field="--all",
        )
    raise typer.Exit(code)


def _held_elsewhere(rt: Runtime, now: RunRecord) -> str | None:
    """What to do when another executor (a worker, another `loopwright run`) holds the run
    (``now``: as the store holds it after the refusal), else None: its id and lease time
    alone left the person asking what next."""
    held = now.lease_owner
    if held is not None and held != rt.owner:
        return (
            "another process is driving it: follow it with "
            f"`loopwright show {now.run_id[:12]}{store_flag()}` (or `Runtime.events`)"
        )
    return None


def _held_text(rt: Runtime, now: RunRecord) -> str | None:
    """Who holds the run (``now``: read after the refusal) and for how long, said once (the
    store's refusal repeated the whole run id the line starts with); None when no other holder
    is recorded."""
    from .._owners import holder_text

    if now.lease_owner is None or now.lease_owner == rt.owner or now.lease_expires_at is None:
        return None
    left = max(0.0, now.lease_expires_at - rt.store.clock())  # the lease's own clock
    return f"held by {holder_text(now.lease_owner)} (lease for {left:.0f} s more)"


def next_steps(results: Sequence[RunResult]) -> list[str]:
    """What to do after ``run`` or ``resume`` drove ``results``: decide what a parked run
    waits for; read why one that ended unaccepted stopped. A run's own id when one is meant,
    ``RUN`` for several; none for accepted runs."""
    flag = store_flag()
    waiting = [r for r in results if r.status == "awaiting_approval"]
    ended = [r for r in results if r.status in ("stopped", "escalated", "failed", "cancelled")]

    def ref(rs: list[RunResult]) -> str:
        return rs[0].run_id[:12] if len(rs) == 1 else "RUN"

    lines = []
    if waiting:
        lines.append(
            f"next: {len(waiting)} run(s) wait for a person: `loopwright approvals{flag}` says "
            f"what each asks; `loopwright approve {ref(waiting)} --resume{flag}` (or `deny`, "
            "`answer`) decides it and goes on"
        )
    if ended:
        lines.append(
            f"next: why {'it' if len(ended) == 1 else 'each'} stopped, with the best candidate "
            f"and the recommended action: `loopwright show {ref(ended)}{flag}`"
        )
    return lines


def _forks_left(forks: list[RunRecord], out: Console) -> None:
    """Say which forks ``resume --all`` left unstarted and how to start each."""
    from ._say import say

    say(
        f"left {len(forks)} fork(s) never started (a fork is started by whoever made it, "
        "after any edit it waits for):",
        out=out,
        style="yellow",
    )
    for rec in forks[:5]:
        say(f"  {rec.run_id[:12]} ({rec.task_key}): " + continue_hint(rec, "start it"), out=out)
    if len(forks) > 5:
        say(f"  and {len(forks) - 5} more: loopwright runs --status pending{store_flag()}", out=out)


def _maker_starts(rec: RunRecord, marked: bool) -> bool:
    """A fork nobody has started: its maker's to start, not ``resume --all``'s. On a store
    that keeps the mark (``marked``), the mark alone: a fork that ran, ended and was reopened
    by an edit is ``pending`` with ``forked_from``, and was left, "never started" (crash54).
    A store without it: a pending fork, as before the mark."""
    if marked:
        return rec.maker_starts
    return rec.status == "pending" and rec.forked_from is not None


def _keeps_the_mark(store: Store) -> bool:
    """Whether ``store`` keeps ``RunRecord.maker_starts``: it clears it (``mark_started``;
    the built-in stores do), where the protocol's default has none to clear."""
    from ..store import Store as _Protocol

    return type(store).mark_started is not _Protocol.mark_started


def _resumable(store: Store, rec: RunRecord) -> bool:
    from .._contract import TERMINAL_STATUSES

    if rec.status in TERMINAL_STATUSES:
        # An ended run is resumable only to run its decided compensations.
        pending = store.latest_checkpoint(rec.run_id).state.get("pending") or {}
        if pending.get("stage") != "compensations":
            return False
        return not store.approvals(run_id=rec.run_id, status="pending")
    if rec.status == "awaiting_approval":
        return not store.approvals(run_id=rec.run_id, status="pending")
    return True
