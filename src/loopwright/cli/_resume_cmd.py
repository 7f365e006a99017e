"""`loopwright resume`, and what continuing a run needs: its loop, loaded from its spec, and
the hint saying how to continue it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from .._errors import ConfigError, ConflictError
from ._options import JsonOpt, StoreOpt, TokenOpt, _print_json, run_ref, store_flag
from ._root_app import app
from ._stores import existing_store

if TYPE_CHECKING:
    from rich.console import Console

    from .._engine import RunResult, Runtime
    from .._loop import Loop
    from ..store import RunRecord, Store


def _loop_for(rec: RunRecord) -> Loop:
    from .._spec import loop_of_run

    return loop_of_run(rec)


def _loop_or_none(rec: RunRecord) -> Loop | None:
    """The run's loop when its spec can be loaded (to offer compensations), else None."""
    if not rec.spec_ref:
        return None
    try:
        return _loop_for(rec)
    except ConfigError as exc:
        from ._render import say

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
            marks = _keeps_the_mark(rt.store)
            forks = [r for r in targets if _maker_starts(r, marks)]
            targets = [r for r in targets if not _maker_starts(r, marks)]
        results: list[RunResult] = []
        from ._render import console, say, say_ended

        out = console(stderr=as_json)
        skipped: list[str] = []  # not resumed here: exit 0 would read as "all accepted"
        for rec in targets:
            try:
                loop = _loop_for(rec)
            except ConfigError as exc:
                if run_id is not None:
                    raise
                say(f"skipped {rec.run_id[:12]}: {exc}", out=out, style="yellow")
                skipped.append(f"{rec.run_id[:12]} ({rec.task_key})")
                continue
            try:
                res = run_async(rt.resume(rec.run_id, loop))
            except ConflictError as exc:
                hint = _held_elsewhere(rt, rec)
                if run_id is not None:
                    if hint:
                        raise ConflictError(f"{exc}; {hint}") from exc
                    raise
                say(f"skipped {rec.run_id[:12]}: {exc}" + (f"; {hint}" if hint else ""),
                    out=out, style="yellow")  # fmt: skip
                skipped.append(f"{rec.run_id[:12]} ({rec.task_key})")
                continue
            results.append(res)
            say_ended(res, rec.task_key, out)
        if not targets:
            say("nothing to resume", out=out)
        if run_id is None and forks:
            _forks_left(forks, out)
    if as_json:
        _print_json([r.to_dict() for r in results])
    code = exit_code_for([r.status for r in results])
    if skipped and code != 1:
        raise ConfigError(
            f"{len(skipped)} of {len(targets)} run(s) were skipped, not resumed (why: above): "
            + ", ".join(skipped),
            field="--all",
        )
    raise typer.Exit(code)


def _held_elsewhere(rt: Runtime, rec: RunRecord) -> str | None:
    """What to do when another executor (a worker) holds the run's lease, else None: its id
    and lease time alone left the person asking what next."""
    held = rt.store.get_run(rec.run_id).lease_owner
    if held is not None and held != rt.owner:
        return (
            "a worker is driving it: follow it with "
            f"`loopwright show {rec.run_id[:12]}{store_flag()}` (or `Runtime.events`)"
        )
    return None


def _forks_left(forks: list[RunRecord], out: Console) -> None:
    """Say which forks ``resume --all`` left unstarted and how to start each."""
    from ._render import say

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


def _maker_starts(rec: RunRecord, marks: bool) -> bool:
    """A fork nobody has started: its maker's to start, not ``resume --all``'s. ``marks``:
    the store keeps the mark (``maker_starts``), so a fork queued for the pool (``fork
    --queue``) is any run, resumed here too (every pending fork was left, as if its maker's);
    a store without it: every pending fork, as before the mark."""
    if marks:
        return rec.maker_starts
    return rec.status == "pending" and rec.forked_from is not None


def _keeps_the_mark(store: Store) -> bool:
    """Whether ``store`` keeps ``maker_starts`` (it clears it: ``Store.mark_started``, whose
    default does nothing)."""
    from ..store import Store as Base

    return type(store).mark_started is not Base.mark_started


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
