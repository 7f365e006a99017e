"""The Typer application: one function per command, each thin over the Python API.

Start-up time matters here (``loopwright runs`` should answer in well under a second): this
module imports only Typer at load time; each command imports what it needs when it runs, and
``app_for`` builds only the command being run (commands of other modules are imported then).
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from importlib import import_module
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from .._errors import ConfigError, ConflictError, check_choice
from ._stores import existing_store, open_existing

if TYPE_CHECKING:
    from .._engine import RunResult
    from .._loop import Loop
    from .._state import TaskState
    from ..store import RunRecord, Store


def new_typer(**kwargs: Any) -> typer.Typer:
    """A Typer (sub-)application with the CLI's settings: plain help text (Rich markup would
    eat ``loopwright[plot]`` and ``[contract]``, and show flags as ``--json <bool>``)."""
    return typer.Typer(
        add_completion=False,
        no_args_is_help=True,
        rich_markup_mode=None,
        pretty_exceptions_enable=False,
        **kwargs,
    )


HELP = "loopwright: governed AI agent loops — durable state, independent checks, explicit stops."
app = new_typer(help=HELP)


def _print_version(value: bool) -> None:
    if value:
        from .. import __version__

        typer.echo(f"loopwright {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            help="Print the version and exit.",
            is_eager=True,
            callback=_print_version,
        ),
    ] = False,
) -> None:
    pass


# Commands defined in other modules of this package, which register themselves on ``app``
# when imported; `app_for` imports only the one a command line names.
_ELSEWHERE = {
    "answer": "_decide_cmd",
    "approvals": "_decide_cmd",
    "approve": "_decide_cmd",
    "audit": "_people_cmd",
    "authority": "_people_cmd",
    "cancel": "_decide_cmd",
    "deny": "_decide_cmd",
    "diff": "_diff_cmd",
    "edit": "_fork_cmd",
    "fit-stop": "_fit_cmd",
    "fork": "_fork_cmd",
    "memory": "_memory_cmd",
    "metrics": "_metrics_cmd",
    "trace": "_observe",
    "export": "_observe",
    "replay": "_replay_cmd",
    "rollback": "_decide_cmd",
    "ui": "_ui_cmd",
    "users": "_people_cmd",
    "worker": "_worker_cmd",
}


def full_app() -> typer.Typer:
    """``app`` with every command registered (for the overall help and unknown commands)."""
    for module in sorted(set(_ELSEWHERE.values())):
        import_module(f"{__package__}.{module}")
    return app


def app_for(args: Sequence[str]) -> typer.Typer:
    """An application holding only the command ``args`` names, when it names one.

    Typer builds (introspects) every registered command on each start, and the commands'
    modules cost their imports: building one keeps ``loopwright runs`` fast.
    """
    name = next((a for a in args if not a.startswith("-")), None)
    if name is None:
        return full_app()
    if name in _ELSEWHERE:
        import_module(f"{__package__}.{_ELSEWHERE[name]}")
    one = new_typer(help=HELP)
    one.registered_callback = app.registered_callback
    one.registered_commands = [c for c in app.registered_commands if _command_name(c) == name]
    one.registered_groups = [g for g in app.registered_groups if g.name == name]
    if not one.registered_commands and not one.registered_groups:
        return full_app()  # an unknown command: the full list answers it
    return one


def command_for(args: Sequence[str]) -> Any:
    """The click command to run ``args`` with (``app_for``'s, its options converted without
    pydantic: see ``_plain_params``)."""
    from typer.main import get_command

    from ._plain_params import lighten

    command = get_command(app_for(args))
    lighten(command)
    return command


def _command_name(info: Any) -> str | None:
    if info.name:
        return str(info.name)
    return info.callback.__name__.replace("_", "-") if info.callback else None


def _store_given(value: str | None) -> str | None:
    """``--store ""`` is a mistake (an unset variable), not a request for the default store."""
    if value is not None and not value.strip():
        raise ConfigError(
            "is empty; give a store URL or path, or leave --store out for the default",
            field="--store",
        )
    return value


StoreOpt = Annotated[
    str | None,
    typer.Option(
        "--store",
        metavar="URL",
        help="Store URL or path (default: $LOOPWRIGHT_STORE or ./.loopwright/loopwright.db).",
        callback=_store_given,
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]


def run_ref(value: Any) -> Any:
    """A RUN argument (or a list of them) checked as every lookup is (``_keys.check_lookup``:
    a long pasted blob, or a control character, names no run and is refused, not looked up)."""
    from .._keys import check_lookup

    for one in value if isinstance(value, list) else [value]:
        if isinstance(one, str):
            check_lookup(one, "RUN")
    return value


@contextmanager
def as_options(**names: str) -> Iterator[None]:
    """A refusal of the Python API named by the CLI's option: a ``ConfigError`` whose field is
    one of ``names`` (``to_cycle="--to-cycle"``) is raised again under that name, so that the
    message says ``--to-cycle: ...``, what the person typed, not ``to_cycle: ...``."""
    try:
        yield
    except ConfigError as exc:
        if exc.field not in names:
            raise
        text = str(exc).removeprefix(f"{exc.field}: ")
        raise type(exc)(text, field=names[exc.field]) from None


RunArg = Annotated[
    str,
    typer.Argument(
        metavar="RUN", help="Run id (or a unique prefix, or its task key).", callback=run_ref
    ),
]


def _print_json(data: Any) -> None:
    import json

    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


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
        from ._render import console

        console(stderr=True).print(f"[yellow]compensations not offered: {exc}[/]")
        return None


def continue_hint(rec: RunRecord, verb: str = "continue it") -> str:
    """How to go on with ``rec``: ``loopwright resume`` for a run started from a spec; one
    started from Python is resumed there, with its loop (``loopwright resume`` refuses it,
    having no loop to load)."""
    if rec.spec_ref:
        return f"{verb} with: loopwright resume {rec.run_id[:12]}"
    return f"{verb} from Python, with its loop: Runtime.resume({rec.run_id[:12]!r}, loop)"


# --- run -------------------------------------------------------------------------------------
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
    concurrency: Annotated[int, typer.Option(help="Runs at once in this process.")] = 8,
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
) -> None:
    """Run a loop on one or many tasks.

    Exit code (the most serious outcome wins): 0 all accepted, 3 stopped, 4 awaiting approval,
    5 escalated, 2 bad input, 1 internal error.
    """
    from .._keys import check_key
    from .._spec import load_spec
    from ._tasks import check_tasks, exit_code_for, load_tasks, task_keys

    _runs_may_exist(False)
    loop = load_spec(spec)
    items = load_tasks(task, tasks, loop.options.get("tasks"))
    if key is not None and len(items) != 1:
        raise ConfigError("--task-key needs exactly one task", field="--task-key")
    if concurrency < 1:
        raise ConfigError("must be at least 1", field="--concurrency")
    keys = [check_key(key, "--task-key")] if key is not None else task_keys(loop.name, items)
    check_tasks(loop, items, keys)  # as Runtime.create checks each, before the first run
    check_choice(executor, ("local", "ray"), "--executor")
    if ray_address is not None and executor != "ray":
        raise ConfigError("only applies with --executor ray", field="--ray-address")
    held: dict[str, str] = {}  # runs another process holds: skipped here
    if executor == "ray":
        results = _execute_on_ray(
            spec, loop, items, keys, store, ray_address, quiet=as_json, token=token
        )
    else:
        results = _execute(
            loop, items, keys, store, concurrency, quiet=as_json, held=held, token=token
        )
    if as_json:
        _print_json([r.to_dict() for r in results])
    code = exit_code_for([r.status for r in results if r.run_id not in held])
    if held and code != 1:
        # Not run here, so not done: exit 0 would read as "all accepted".
        named = ", ".join(f"{run_id[:12]} ({held[run_id]})" for run_id in held)
        raise ConfigError(
            f"{len(held)} of {len(results)} run(s) are held by another process and were not "
            f"run here: {named}; see `loopwright runs --status running`",
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
    from ._render import console, summary_table

    out = console(stderr=quiet)
    with open_store(resolve_store_url(store)) as st:
        who = starter(st, token, target=f"loop {loop.name}", tasks=len(items))

    def report(r: RunResult) -> None:
        out.print(f"run {r.run_id[:12]} ({r.task_key}): {r.status} ({r.stop_reason or '-'})")

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
        _runs_may_exist(_has_run(store, keys[0]))
        raise
    except RayBatchError as exc:
        for run_id, why in exc.failures.items():
            console(stderr=True).print(f"[red]run {run_id[:12]} failed on Ray: {why}[/]")
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


def _execute(
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

    from .._engine import Runtime
    from ._interrupt import run_async
    from ._live import LiveView
    from ._render import console, summary_table

    view = LiveView(len(items), title or f"{loop.name}: {len(items)} task(s)")
    with Runtime(store, on_progress=view.update) as rt:
        run_ids: list[str] = []
        from ._people_cmd import starter

        if who is None:
            who = starter(rt.store, token, target=f"loop {loop.name}", tasks=len(items))
        for t, k in zip(items, keys, strict=True):
            rec, _ = rt.create(loop, t, task_key=k, by=who)
            _runs_may_exist(True)
            run_ids.append(rec.run_id)
            view.update(rec)
        out = console(stderr=quiet)

        async def go() -> list[RunResult]:
            sem = asyncio.Semaphore(concurrency)

            async def one(run_id: str) -> RunResult:
                async with sem:
                    try:
                        return await rt.resume(run_id, loop)
                    except ConflictError as exc:
                        out.print(f"[yellow]skipped {run_id[:12]}: {exc}[/]")
                        result = rt.result(run_id)
                        if held is not None:
                            held[run_id] = result.task_key
                        return result

            return list(await asyncio.gather(*(one(r) for r in run_ids)))

        with Live(view.render(), console=out, refresh_per_second=8, transient=False) as live:
            view.live = live
            results = run_async(go())
            live.update(view.render())
        out.print()
        if not quiet:
            records = [rt.store.get_run(r.run_id) for r in results]
            out.print(summary_table(records))
    return results


def _runs_may_exist(flag: bool) -> None:
    """Say whether a Ctrl-C now leaves a run behind (what ``main`` then points at)."""
    from . import _RUNS

    _RUNS["may_exist"] = flag


# --- reading ---------------------------------------------------------------------------------
RUNS_SHOWN = 50  # the table's default --limit: a long table takes long to lay out, and to read
APPROVALS_SHOWN = 50  # ``approvals``' default --limit, for the same reason


@app.command()
def runs(
    status: Annotated[
        str | None,
        typer.Option(
            help="Only runs with this status: pending, running, awaiting_approval, accepted, "
            "stopped, escalated, cancelled or failed."
        ),
    ] = None,
    project: Annotated[str | None, typer.Option(help="Only runs of this project.")] = None,
    loop: Annotated[str | None, typer.Option(help="Only runs of this loop.")] = None,
    limit: Annotated[
        int | None,
        typer.Option(
            help=f"At most this many, newest first (default: {RUNS_SHOWN}, in the table and "
            "with --json; stderr says how many more there are).",
            show_default=False,
        ),
    ] = None,
    all_: Annotated[bool, typer.Option("--all", help="Every run (no --limit).")] = False,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List runs, newest first."""
    if status is not None:
        from .._contract import RUN_STATUSES

        check_choice(status, RUN_STATUSES, "--status")
    if limit is not None and limit < 1:
        raise ConfigError("must be at least 1", field="--limit")
    if limit is not None and all_:
        raise ConfigError("give --limit or --all, not both", field="--all")
    # Bounded by default, --json too (a store of 50,000 runs printed 81 MB): --all for every run.
    shown = None if all_ else (limit or RUNS_SHOWN)
    filters: dict[str, Any] = {"status": status, "project": project, "loop_name": loop}
    with open_existing(store) as st:
        if shown is None:
            records = st.list_runs(**filters)
            total = len(records)
        else:
            records = st.list_runs(**filters, limit=shown + 1)
            total = len(records) if len(records) <= shown else _count_runs(st, filters)
            records = records[:shown]
    if as_json:
        from .._packet import run_stop_cause

        _print_json([{**r.to_dict(), "stop_cause": run_stop_cause(r)} for r in records])
        if total > len(records):
            typer.echo(
                f"{total - len(records)} more run(s) not listed; use --limit N or --all",
                err=True,
            )
        return
    from ._table import print_runs

    print_runs(records, total)


def _count_runs(st: Store, filters: dict[str, Any]) -> int:
    # A store that can count answers at once; the others list every run (slower, same count).
    count = getattr(st, "count_runs", None)
    return int(count(**filters)) if callable(count) else len(st.list_runs(**filters))


@app.command(short_help="One run: timeline, verdicts, spend, stop reason, packet.")
def show(
    run_id: RunArg,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """One run: plan, timeline, verdicts (held-out marked), spend, stop reason and packet."""
    with open_existing(store) as st:
        rec = st.get_run(run_id)
        if as_json:
            # written as it is read: a long run's versions and records a page at a time
            _write_show_json(st, rec)
            return
        from .._finishing import ended_inside
        from ._render import console, overwrites, reuse_refunds, run_detail_parts

        out = console()
        end = ended_inside(st, rec)
        # The latest state (its parts' current values) and the records read a page at a time,
        # each made a timeline row as it is read: not every checkpoint's state (every version
        # of a long run at once), nor every record (each holds its proposal's values). Each
        # part is printed as it is made, the timeline a chunk of rows at a time: rich renders
        # a renderable whole (one table of a 20,000-cycle run's rows took 160 MB).
        for shown in run_detail_parts(
            rec,
            st.latest_checkpoint(rec.run_id).task_state(),
            itertools.chain(
                ((c, r) for _s, c, r in st.iter_records(rec.run_id)),
                [] if end is None else [(end["cycle"], end)],
            ),
            st.approvals(run_id=rec.run_id),
            st.journal(rec.run_id, kind="effect"),  # the effects shown: not the retry entries
            width=out.width,
        ):
            out.print(shown)
        said = overwrites(st.events_of_kinds(rec.run_id, ("overwrite_allowed",)))
        if said:
            out.print(said)
        refunded = reuse_refunds(
            st.events_of_kinds(rec.run_id, ("effect_reuse_refunding", "effect_reuse_refunded"))
        )
        if refunded:
            out.print(refunded)


def _write_show_json(st: Store, rec: RunRecord) -> None:
    """``show --json``: the run, its latest state with every version of every part, every
    cycle's record, its approvals, journal and events — the document ``json.dumps`` would
    print, written while the versions and records are read page by page."""
    from ._json_stream import Lazy, Open, write_json

    run_id = rec.run_id
    state = st.latest_checkpoint(run_id).task_state()
    doc = state.to_dict(held=True)
    doc["artifacts"] = Open(
        [
            Open(
                {
                    "name": a["name"],
                    "parts": Open(
                        [_lazy_part(st, run_id, state, a["name"], p["name"]) for p in a["parts"]]
                    ),
                }
            )
            for a in doc["artifacts"]
        ]
    )
    write_json(
        Open(
            {
                "run": rec.to_dict(),
                "state": Open(doc),
                "cycles": Lazy(_shown_records(st, rec)),
                "approvals": [a.to_dict() for a in st.approvals(run_id=run_id)],
                "journal": [e.to_dict() for e in st.journal(run_id)],
                "events": Lazy(e.to_dict() for e in st.iter_events(run_id)),
            }
        ),
        sys.stdout.write,
    )
    sys.stdout.write("\n")


def _lazy_part(st: Store, run_id: str, state: TaskState, artifact: str, name: str) -> Any:
    """A part as ``Part.to_dict`` writes it, its versions read as they are written."""
    from ._json_stream import Lazy, Open

    return Open({"name": name, "versions": Lazy(_part_versions(st, run_id, state, artifact, name))})


def _part_versions(
    st: Store, run_id: str, state: TaskState, artifact: str, name: str
) -> Iterator[dict[str, Any]]:
    """One part's versions up to its count, the ones the state holds as it holds them (their
    status may be newer than the row's)."""
    from .._state import part_ref

    held = state.artifacts[artifact].parts[name]
    n = 1  # the next version to write: a gap in the rows is filled as ``Part.versions`` fills it
    for v in st.iter_versions(run_id, part_ref(artifact, name)):
        if v.n > held.count:
            break  # a rollback's abandoned versions lie beyond the count
        for gap in range(n, v.n):
            yield held.version(gap).to_dict()
        yield held.known.get(v.n, v).to_dict()
        n = v.n + 1
    for gap in range(n, held.count + 1):  # held, not yet in the rows
        yield held.version(gap).to_dict()


def _shown_records(st: Store, rec: RunRecord) -> Iterator[dict[str, Any]]:
    """The stored records, oldest first, less the write-ahead record of a cycle's effects once
    that cycle concluded (its concluding record follows and holds the same; the dashboard
    shows one row too), read twice a page at a time: first which cycles concluded, then the
    records to show; last, the cycle the run ended inside, if it has no record
    (``ended_inside``: what it cost and why it ended)."""
    from .._finishing import ended_inside

    run_id = rec.run_id
    concluded = {r.get("cycle") for _s, _c, r in st.iter_records(run_id) if r and "proposal" in r}
    for _s, _c, r in st.iter_records(run_id):
        if r and not _wrote_ahead_of(r, concluded):
            yield r
    end = ended_inside(st, rec)
    if end is not None:
        yield end


def _wrote_ahead_of(record: dict[str, Any], concluded: set[Any]) -> bool:
    """A cycle's effects' write-ahead record, once that cycle concluded (its concluding
    record follows and holds the same)."""
    return (
        record.get("decision") == "effects"
        and "proposal" not in record
        and record.get("cycle") in concluded
    )


# --- decisions -------------------------------------------------------------------------------
NAME_MAX = 64  # the longest person's name: `loopwright users add` allows as long


def by_name(value: str | None) -> str | None:
    """A ``--by`` name no longer than a user's name may be. A blank one is refused: it was
    taken as no ``--by`` at all, so ``--by "$APPROVER"`` with the variable unset recorded the
    decision under the OS user's name."""
    if value is not None and not value.strip():
        raise ConfigError("is blank: give a person's name", field="--by")
    if value is not None and len(value.strip()) > NAME_MAX:
        raise ConfigError(
            f"a name is at most {NAME_MAX} characters (as `loopwright users add` allows); "
            f"this one has {len(value.strip())}",
            field="--by",
        )
    return value


ByOpt = Annotated[
    str | None,
    typer.Option(
        "--by",
        help="Who decides, in a store without users (default: your OS user). With users, "
        "your --token says who.",
        callback=by_name,
    ),
]
TokenOpt = Annotated[
    str | None,
    typer.Option(
        "--token",
        envvar="LOOPWRIGHT_TOKEN",
        show_envvar=False,
        help="Your token, in a store with users (default: $LOOPWRIGHT_TOKEN).",
    ),
]
NoteOpt = Annotated[str | None, typer.Option("--note", help="Why, for the record.")]
RequestOpt = Annotated[
    str | None,
    typer.Option("--request", help="Which request, when the run has several pending."),
]


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
            help="Every interrupted run, and every parked run whose approval has been decided.",
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
            who = acting_as(rt.store, None, token, action="resume")
            operate(rt.store, who, "resume", f"run {run_id or '--all'}", origin="cli")
        if run_id is not None:
            targets = [rt.store.get_run(run_id)]
        else:
            targets = [r for r in rt.store.list_runs() if _resumable(rt.store, r)]
        results: list[RunResult] = []
        from ._render import console

        out = console(stderr=as_json)
        skipped: list[str] = []  # not resumed here: exit 0 would read as "all accepted"
        for rec in targets:
            try:
                loop = _loop_for(rec)
            except ConfigError as exc:
                if run_id is not None:
                    raise
                out.print(f"[yellow]skipped {rec.run_id[:12]}: {exc}[/]")
                skipped.append(f"{rec.run_id[:12]} ({rec.task_key})")
                continue
            try:
                res = run_async(rt.resume(rec.run_id, loop))
            except ConflictError as exc:
                if run_id is not None:
                    raise
                out.print(f"[yellow]skipped {rec.run_id[:12]}: {exc}[/]")
                skipped.append(f"{rec.run_id[:12]} ({rec.task_key})")
                continue
            results.append(res)
            out.print(
                f"run {res.run_id[:12]} ({rec.task_key}): {res.status} ({res.stop_reason or '-'})"
            )
        if not targets:
            out.print("nothing to resume")
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


# --- checking and demo ---------------------------------------------------------------------
@app.command()
def check(
    spec: Annotated[Path, typer.Argument(metavar="SPEC", help="The loop spec (TOML).")],
    strict: Annotated[bool, typer.Option(help="Exit 2 on warnings too.")] = False,
    as_json: JsonOpt = False,
    task: Annotated[
        Path | None, typer.Option("--task", help="Check this task file (one JSON object).")
    ] = None,
    tasks: Annotated[
        Path | None,
        typer.Option("--tasks", help="Check this task file (JSON lines) instead of the spec's."),
    ] = None,
) -> None:
    """Validate a spec without running it; say what it leaves open.

    Answers: what done means, how progress is checked independently, what ends a stalled or
    unsafe run, what an accepted outcome may cost, who owns the unresolved exception. The task
    file (--task, --tasks, or the spec's `tasks`) is read as `loopwright run` would read it: a
    line that is not a JSON object, a bad task key, two tasks with one key or a task the run
    would refuse (checked as Runtime.create checks it: the spec's init run on it, a bad per-task
    cycle budget, budget.max_cycles_key) exits 2, naming file:line.
    """
    from .._spec import load_spec
    from ._check import review
    from ._tasks import check_tasks, load_tasks, task_keys

    loop = load_spec(spec)
    items = load_tasks(task, tasks, loop.options.get("tasks"))
    keys = task_keys(loop.name, items)  # as `run` derives and checks them
    check_tasks(loop, items, keys)
    answers = review(loop)
    if items.path is not None:
        answers.append(
            {
                "question": "Which tasks would it run?",
                "status": "ok",
                "answer": f"{len(items)} task(s) in {items.path}, each with its own valid key",
            }
        )
    warnings = [a for a in answers if a["status"] == "warn"]
    if as_json:
        _print_json({"spec": str(spec), "valid": True, "answers": answers})
    else:
        from rich.markup import escape
        from rich.table import Table

        from ._render import console

        t = Table(title=f"{escape(loop.name)}: spec is valid", title_justify="left")
        t.add_column("question")
        t.add_column("")
        t.add_column("answer", overflow="fold")
        for a in answers:
            mark = "[green]ok[/]" if a["status"] == "ok" else "[yellow]open[/]"
            t.add_row(a["question"], mark, escape(a["answer"]))
        console().print(t)
    raise typer.Exit(2 if strict and warnings else 0)


@app.command(short_help="Run the built-in offline demo: no network, no API key.")
def demo(
    store: StoreOpt = None,
    concurrency: Annotated[int, typer.Option(help="Runs at once.")] = 8,
    token: TokenOpt = None,
) -> None:
    """Run the built-in offline workload (invoice exceptions): no network, no API key.

    Ends with the stop reasons, the spend and the next commands to try.
    """
    from ._demo import run_demo

    if concurrency < 1:
        raise ConfigError("must be at least 1", field="--concurrency")
    _runs_may_exist(False)
    run_demo(store, concurrency, token)


@app.command("import", short_help="Turn recorded runs of other systems into tasks.")
def import_(
    kind: Annotated[str, typer.Argument(metavar="KIND", help="What to import: ldb.")],
    source: Annotated[Path, typer.Argument(metavar="SOURCE", help="The file to import.")],
    out: Annotated[Path, typer.Option("--out", help="Where to write tasks (JSON lines).")],
    label: Annotated[
        str | None, typer.Option(help="Label in the task keys (default: from the file's path).")
    ] = None,
    usd_per_token: Annotated[float | None, typer.Option(help="Cost proxy per token.")] = None,
    rounds: Annotated[
        int | None,
        typer.Option(
            help="The recording's round budget (LDB's max_iters), for runs that passed "
            "(default: read off the runs that never passed)."
        ),
    ] = None,
) -> None:
    """Turn recorded runs of other systems into tasks (``ldb``: LDB debugging traces)."""
    check_choice(kind, ("ldb",), "KIND")
    try:
        from ..importers.ldb import import_ldb_report
    except ImportError as exc:  # pragma: no cover - present in every install
        raise ConfigError(f"the LDB importer is unavailable: {exc}") from None
    if not source.is_file():
        raise ConfigError(f"no file at {source}", field="SOURCE")
    if usd_per_token is not None and usd_per_token < 0:
        raise ConfigError("must not be negative", field="--usd-per-token")
    if rounds is not None and rounds < 0:
        raise ConfigError("must not be negative", field="--rounds")
    kwargs: dict[str, Any] = {"label": label, "rounds": rounds}
    if usd_per_token is not None:
        kwargs["usd_per_token"] = usd_per_token
    import io

    text = io.StringIO()  # written to --out once there are tasks: none leaves no file
    report = import_ldb_report(source, text, **kwargs)
    if not report.tasks:
        raise ConfigError(f"no tasks in {source}", field="SOURCE")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)  # --out .loopwright/tasks.jsonl
        out.write_text(text.getvalue(), encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot write {out}: {exc.strerror or exc}", field="--out") from None
    from ._render import console

    budget = "unknown" if report.rounds is None else f"{report.rounds} rounds"
    console().print(
        f"wrote {len(report.tasks)} task(s) to {out} (round budget: {budget}; "
        f"no visible tests: {len(report.vacuous)})",
        markup=False,
        highlight=False,
    )
    for line in report.warnings:
        console(stderr=True).print(f"warning: {line}", markup=False, highlight=False)
