"""`loopwright run`: a loop on one or many tasks, driven in this process or on a Ray cluster."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from .._errors import ConfigError, ConflictError, check_choice
from . import runs_may_exist
from ._options import JsonOpt, StoreOpt, TokenOpt, print_json, store_flag
from ._root_app import app
from ._stores import creatable_store, existing_store

if TYPE_CHECKING:
    from .._engine import RunResult, Runtime
    from .._loop import Loop
    from ..store import RunRecord


@app.command()
def run(
    spec: Annotated[Path, typer.Argument(metavar="SPEC", help="The loop spec (TOML).")],
    task: Annotated[Path | None, typer.Option("--task", help="One task, a JSON file.")] = None,
    tasks: Annotated[Path | None, typer.Option("--tasks", help="Many tasks, JSON lines.")] = None,
    key: Annotated[
        str | None,
        typer.Option(
            "--task-key",
            help="Task key for a single task (starting the same key again continues that run).",
        ),
    ] = None,
    concurrency: Annotated[
        int | None,
        typer.Option(
            help="Runs at once in this process (default 8; --executor local without --queue only).",
            show_default=False,
        ),
    ] = None,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
    executor: Annotated[
        str, typer.Option("--executor", help="local (this process) or ray (a Ray cluster).")
    ] = "local",
    ray_address: Annotated[
        str | None,
        typer.Option("--ray-address", help="Join this Ray cluster ('auto'); default: start one."),
    ] = None,
    token: TokenOpt = None,
    queue: Annotated[
        bool,
        typer.Option(
            "--queue",
            help="Create the runs and drive none here: `loopwright worker` processes claim "
            "them (exit 0 once they are in the store).",
        ),
    ] = False,
) -> None:
    """Run a loop on one or many tasks.

    Exit code (the most serious outcome wins): 0 all accepted, 3 stopped, 4 awaiting approval,
    5 escalated, 2 bad input, 1 internal error. With --queue: 0 once the runs are created.
    """
    from .._keys import check_key
    from .._spec import load_spec
    from ._tasks import check_tasks, exit_code_for, load_tasks, task_keys

    runs_may_exist(False)
    loop = load_spec(spec)
    items = load_tasks(task, tasks, loop.options.get("tasks"))
    if key is not None and len(items) != 1:
        # (the spec's own task file is read when no --task is given: say which file, and how)
        raise ConfigError(
            f"names one task, but {items.where} {items.path} holds {len(items)}: give one "
            "task with --task FILE, or leave --task-key out (a task file's lines are keyed by "
            "their task_key or id)",
            field="--task-key",
        )
    if concurrency is not None and concurrency < 1:
        raise ConfigError("must be at least 1", field="--concurrency")
    keys = [check_key(key, "--task-key")] if key is not None else task_keys(loop.name, items)
    check_tasks(loop, items, keys)  # as Runtime.create checks each, before the first run
    check_choice(executor, ("local", "ray"), "--executor")
    if ray_address is not None and executor != "ray":
        raise ConfigError("only applies with --executor ray", field="--ray-address")
    if queue and executor != "local":
        raise ConfigError(
            "creates the runs for `loopwright worker` to drive; --executor ray drives them "
            "here: give one or the other",
            field="--queue",
        )
    if concurrency is not None and (queue or executor != "local"):
        # (it was ignored: a default of 8 and an explicit value looked the same)
        raise ConfigError(
            "sets how many runs this process drives at once; --queue drives none here (give "
            "it to `loopwright worker --concurrency N`)"
            if queue
            else "sets how many runs this process drives at once; --executor ray leaves that "
            "to the Ray cluster",
            field="--concurrency",
        )
    # a new store in a folder that does not exist is a typo's: every task would run again,
    # its effects paid again (refused before any is run, nothing created)
    store = creatable_store(store)
    if queue:
        _queue(loop, items, keys, store, as_json=as_json, token=token)
        return
    held: dict[str, str] = {}  # runs another process holds: skipped here
    if executor == "ray":
        results = _execute_on_ray(
            spec, loop, items, keys, store, ray_address, quiet=as_json, token=token
        )
    else:
        results = execute(
            loop, items, keys, store, concurrency or 8, quiet=as_json, held=held, token=token
        )
    if as_json:
        from .._hints import carry_store_in

        print_json([carry_store_in(r.to_dict(), store_flag()) for r in results])
    else:
        from ._resume_cmd import next_steps
        from ._say import say

        for line in next_steps([r for r in results if r.run_id not in held]):
            say(line)
    code = exit_code_for([r.status for r in results if r.run_id not in held])
    if held and code != 1:
        # Not run here, so not done: exit 0 would read as "all accepted".
        named = ", ".join(f"{run_id[:12]} ({held[run_id]})" for run_id in held)
        raise ConfigError(
            f"{len(held)} of {len(results)} run(s) are held by another process and were not "
            f"run here: {named}; see `loopwright runs --status running{store_flag()}`",
            field="RUN",
        )
    raise typer.Exit(code)


def _execute_on_ray(
    spec: Path,
    loop: Loop,
    items: list[dict[str, Any]],
    keys: list[str],
    store: str | None,
    address: str | None,
    *,
    quiet: bool,
    token: str | None,
) -> list[RunResult]:
    from ..executors import RayBatchError, run_on_ray
    from ..store import open_store, resolve_store_url
    from ._people_cmd import starter
    from ._say import console, say
    from ._summary import summary_table

    out = console(stderr=quiet)
    with open_store(resolve_store_url(store)) as st:
        who = starter(st, token, target=f"loop {loop.name}", tasks=len(items))

    def report(r: RunResult) -> None:
        say(f"run {r.run_id[:12]} ({r.task_key}): {r.status} ({r.stop_reason or '-'})", out=out)

    try:
        results = run_on_ray(
            spec,
            items,
            keys,
            resolve_store_url(store),
            address=address,
            on_result=report,
            by=who,
        )
    except KeyboardInterrupt:
        # The runs are created in the driver, in order, before Ray starts: whether the first
        # exists says whether Ctrl-C left runs to resume.
        runs_may_exist(_has_run(store, keys[0]))
        raise
    except RayBatchError as exc:
        for run_id, why in exc.failures.items():
            say(f"run {run_id[:12]} failed on Ray: {why}", stderr=True, style="red")
        raise typer.Exit(1) from None
    if not quiet:
        with open_store(store) as st:
            out.print(summary_table([st.get_run(r.run_id) for r in results]))
    return results


def _has_run(store: str | None, key: str) -> bool:
    """Whether the store holds a run of task ``key`` (asked after a Ctrl-C: any failure to
    tell is "no", never an error in place of the interruption)."""
    from ..store import open_store

    try:
        with open_store(existing_store(store)) as st:
            return st.get_run(key).task_key == key
    except Exception:
        return False


def execute(
    loop: Loop,
    items: list[dict[str, Any]],
    keys: list[str],
    store: str | None,
    concurrency: int,
    *,
    quiet: bool,
    title: str | None = None,
    held: dict[str, str] | None = None,
    token: str | None = None,
    who: str | None = None,
) -> list[RunResult]:
    """Create and drive the runs; ``held`` gets run id -> task key of each run skipped because
    another process holds its lease. ``token``: who starts them, in a store with users (else
    ``$LOOPWRIGHT_TOKEN``; see ``starter``); ``who``: the starter already found so."""
    import asyncio

    from rich.live import Live

    from .._contract import TERMINAL_STATUSES
    from .._engine import Runtime
    from ._interrupt import run_async
    from ._live import LiveView
    from ._say import console, say
    from ._summary import summary_table

    view = LiveView(len(items), title or f"{loop.name}: {len(items)} task(s)")
    with Runtime(store, on_progress=view.update) as rt:
        run_ids: list[str] = []
        from ._people_cmd import starter

        if who is None:
            who = starter(rt.store, token, target=f"loop {loop.name}", tasks=len(items))
        made = _create(rt, loop, items, keys, who, on_run=view.update)
        ended = sum(not new and rec.status in TERMINAL_STATUSES for rec, new in made)
        run_ids.extend(rec.run_id for rec, _new in made)
        out = console(stderr=quiet)

        async def go() -> list[RunResult]:
            sem = asyncio.Semaphore(concurrency)

            async def one(run_id: str) -> RunResult:
                async with sem:
                    try:
                        return await rt.resume(run_id, loop)
                    except ConflictError as exc:
                        say(f"skipped {run_id[:12]}: {exc}", out=out, style="yellow")
                        result = rt.result(run_id)
                        if held is not None:
                            held[run_id] = result.task_key
                        return result

            # Every run waited for, each wound down (its lease handed back) before an error of
            # one is raised: without ``return_exceptions``, the first to raise (a cancellation
            # included) ended the gather, and ``asyncio.run``'s teardown cancelled the others
            # in their winding down (crash53b).
            done = await asyncio.gather(*(one(r) for r in run_ids), return_exceptions=True)
            for r in done:
                if isinstance(r, BaseException):
                    raise r
            return [r for r in done if not isinstance(r, BaseException)]

        try:
            with Live(view.render(), console=out, refresh_per_second=8, transient=False) as live:
                view.live = live
                results = run_async(go(), run_ids)
                live.update(view.render())
        finally:  # the view's last line ended, on Ctrl-C too (the message after began on it)
            out.print()
        if not quiet:
            records = [rt.store.get_run(r.run_id) for r in results]
            out.print(summary_table(records))
        if ended:  # else the table reads as this command's work (a changed actor's, say)
            say(
                f"note: {ended} of {len(run_ids)} run(s) had ended before this command and are "
                "shown as they stand, not run again (a task key names one run: give a task a "
                "new task_key, or --task-key, to run it anew)",
                stderr=True,
                style="yellow",
            )
    return results


def _create(
    rt: Runtime,
    loop: Loop,
    items: list[dict[str, Any]],
    keys: list[str],
    who: str,
    on_run: Callable[[RunRecord], None] | None = None,
) -> list[tuple[RunRecord, bool]]:
    """Each task's run, made (``True``) or found under its key; a task changed since its key's
    run was made is said on stderr (the run keeps the task it was made with)."""
    from .._task_parts import ignored_task
    from ._say import say

    made: list[tuple[RunRecord, bool]] = []
    notes: list[str] = []
    for t, k in zip(items, keys, strict=True):
        rec, new = rt.create(loop, t, task_key=k, by=who)
        runs_may_exist(True)
        if not new and (why := ignored_task(rec, t)):
            notes.append(why)  # a changed task under an existing run's key: said
        made.append((rec, new))
        if on_run is not None:
            on_run(rec)
    for why in notes[:5]:
        say(f"note: {why}", stderr=True, style="yellow")
    if len(notes) > 5:
        say(f"note: and {len(notes) - 5} more task(s) like these", stderr=True, style="yellow")
    return made


def _queue(
    loop: Loop,
    items: list[dict[str, Any]],
    keys: list[str],
    store: str | None,
    *,
    as_json: bool,
    token: str | None,
) -> None:
    """``run --queue``: the runs created (or found under their keys), none driven; a worker
    claims the pending ones (docs/scale.md)."""
    from collections import Counter

    from .._engine import Runtime
    from ._people_cmd import starter
    from ._say import say

    with Runtime(store) as rt:
        who = starter(rt.store, token, target=f"loop {loop.name}", tasks=len(items))
        made = _create(rt, loop, items, keys, who)
    if as_json:
        print_json(
            [
                {"run_id": r.run_id, "task_key": r.task_key, "status": r.status, "created": new}
                for r, new in made
            ]
        )
    new = sum(n for _r, n in made)
    found = Counter(r.status for r, n in made if not n)
    said = f"queued {new} new run(s) of loop {loop.name}"
    if found:
        said += (
            f"; {len(made) - new} task key(s) named a run already there, left as it is ("
            + ", ".join(f"{n} {status}" for status, n in sorted(found.items()))
            + ")"
        )
    pending = sum(r.status == "pending" for r, _n in made)
    said += f". `loopwright worker{store_flag()}` drives the {pending} pending run(s)"
    say(said, stderr=as_json)
