"""`loopwright runs` and `loopwright show`: the runs listed, and one run in full (``show
--json`` written as its versions and records are read, a page at a time)."""

from __future__ import annotations

import itertools
import sys
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Annotated, Any

import typer

from .._errors import ConfigError, check_choice
from ._options import JsonOpt, RunArg, StoreOpt, print_json, store_flag
from ._root_app import app
from ._stores import open_existing, unknown_filters

if TYPE_CHECKING:
    from .._state import TaskState
    from ..store import Approval, RunRecord, Store


RUNS_SHOWN = 50  # the table's default --limit: a long table takes long to lay out, and to read
APPROVALS_SHOWN = 50  # ``approvals``' default --limit, for the same reason
CYCLES_SHOWN = 50  # ``show``'s default --last: the timeline's newest cycles


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
        unknown = [] if total else unknown_filters(st, project=project, loop=loop)
        now = st.clock()  # a lease is judged on the clock that set it (PostgreSQL: the server's)
    for line in unknown:
        typer.echo(line, err=True)
    if as_json:
        from .._hints import carry_store_in
        from .._stored_run_words import over_budget, run_stop_cause

        # (the commands in each run's words name the store given, as the table's: notify56;
        # how far its spend is past its budgets, as show --json says it: fenced56b, over56b)
        flag = store_flag()
        print_json(
            [
                carry_store_in(
                    {
                        **r.to_dict(),
                        "stop_cause": run_stop_cause(r),
                        **over_budget(r),
                    },
                    flag,
                )
                for r in records
            ]
        )
        if total > len(records):
            typer.echo(
                f"{total - len(records)} more run(s) not listed; use --limit N or --all",
                err=True,
            )
        return
    from ._table import print_runs

    print_runs(records, total, now=now)


def _count_runs(st: Store, filters: dict[str, Any]) -> int:
    # A store that can count answers at once; the others list every run (slower, same count).
    count = getattr(st, "count_runs", None)
    return int(count(**filters)) if callable(count) else len(st.list_runs(**filters))


def to_terminal() -> bool:
    """Whether ``show``'s text goes to a person's terminal (its timeline is then windowed)."""
    return sys.stdout.isatty()


@app.command(short_help="One run: timeline, verdicts, spend, stop reason, packet.")
def show(
    run_id: RunArg,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
    last: Annotated[
        int | None,
        typer.Option(
            "--last",
            metavar="N",
            help=f"The timeline's last N cycles (default on a terminal: {CYCLES_SHOWN}, after a "
            "line saying from which cycle; into a pipe or a file: every cycle).",
            show_default=False,
        ),
    ] = None,
    all_: Annotated[
        bool, typer.Option("--all", help="Every cycle in the timeline (no --last).")
    ] = False,
) -> None:
    """One run: plan, timeline, verdicts (held-out marked), spend, stop reason and packet.

    On a terminal the timeline lists the last 50 cycles unless --last or --all says
    otherwise; into a pipe or a file, every cycle. --json holds every cycle and version."""
    if last is not None and last < 1:
        raise ConfigError("must be at least 1 (--all for every cycle)", field="--last")
    if last is not None and all_:
        raise ConfigError("give --last or --all, not both", field="--all")
    if as_json and last is not None:
        raise ConfigError("--json holds every cycle: --last is for the text", field="--last")
    # Bounded by default on a person's terminal, as `runs` is: a 10,000-cycle timeline is
    # 10,000 rows of a screen. Into a pipe or a file (a script, `| less`, `> out.txt`) every
    # cycle, as before: what a program reads of `show` does not change with the run's length.
    windowed = last is not None or to_terminal()
    shown = None if all_ or not windowed else (last or CYCLES_SHOWN)
    with open_existing(store) as st:
        rec = st.get_run(run_id)
        if as_json:
            # written as it is read: a long run's versions and records a page at a time
            write_show_json(st, rec)
            return
        from .._contract import TERMINAL_STATUSES
        from .._finishing import ended_inside
        from .._lineage import fork_lineage
        from .._mid_cycle_records import by_id
        from .._reuse_now import as_now
        from ._render import run_detail_parts
        from ._say import console
        from ._show_notes import (
            REUSE_REFUND_EVENTS,
            SKIP_EVENTS,
            overwrites,
            reuse_refunds,
            worker_skip,
        )
        from ._show_window import timeline_records

        out = console()
        end = ended_inside(st, rec)
        approvals = st.approvals(run_id=rec.run_id)
        decided = by_id(approvals)
        # The latest state (its parts' current values) and the records read a page at a time,
        # each made a timeline row as it is read: not every checkpoint's state (every version
        # of a long run at once), nor every record (each holds its proposal's values). Each
        # part is printed as it is made, the timeline a chunk of rows at a time: rich renders
        # a renderable whole (one table of a 20,000-cycle run's rows took 160 MB).
        latest = st.latest_checkpoint(rec.run_id)
        # The records read a page at a time (a cycle parked, or whose effects did not
        # complete: what it proposed, its verdicts and spend, as the run page shows it), of
        # the last cycles only the newest checkpoints (``_show_window``); then the cycle
        # the run ended inside, if it has no record.
        records = timeline_records(
            st,
            rec,
            decided,  # a parked cycle: by its request's decision
            newest_seq=latest.seq,
            ended=rec.status in TERMINAL_STATUSES,
            last=shown,
        )
        for part in run_detail_parts(
            rec,
            latest.task_state(),
            itertools.chain(records, [] if end is None else [(end["cycle"], end)]),
            as_now(st, approvals),  # a reuse refunded since: said
            st.journal(rec.run_id, kind="effect"),  # the effects shown: not the retry entries
            width=out.width,
            now=st.clock(),  # a lease is judged on the clock that set it
            lineage=fork_lineage(st, rec) if rec.forked_from else None,
            last=shown,
        ):
            out.print(part)
        said = overwrites(st.events_of_kinds(rec.run_id, ("overwrite_allowed",)))
        if said:
            out.print(said)
        refunded = reuse_refunds(st.events_of_kinds(rec.run_id, REUSE_REFUND_EVENTS))
        if refunded:
            out.print(refunded)
        if rec.status not in TERMINAL_STATUSES:  # why no worker goes on with it, if one said
            skip = worker_skip(st.events_of_kinds(rec.run_id, SKIP_EVENTS, limit=1))
            if skip:
                out.print(skip)


def write_show_json(st: Store, rec: RunRecord) -> None:
    """``show --json``: the run, its latest state with every version of every part, every
    cycle's record, its approvals, journal and events — the document ``json.dumps`` would
    print, written while the versions and records are read page by page."""
    from .._hints import carry_store_in
    from .._lineage import fork_lineage
    from .._reuse_now import as_now
    from .._stored_run_words import over_budget
    from ._json_stream import Lazy, Open, write_json

    run_id = rec.run_id
    state = st.latest_checkpoint(run_id).task_state()
    approvals = st.approvals(run_id=run_id)
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
                # (commands: this store; how far its spend is past its budgets: 0.0 and 0
                # within them, fenced56b, over56b)
                "run": carry_store_in({**rec.to_dict(), **over_budget(rec)}, store_flag()),
                # a fork's origins, nearest first (a fork of a fork: every one, up to a cap)
                "lineage": fork_lineage(st, rec).to_dict(),
                "state": Open(doc),
                "cycles": Lazy(_shown_records(st, rec, approvals)),
                "approvals": [a.to_dict() for a in as_now(st, approvals)],
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


def _shown_records(
    st: Store, rec: RunRecord, approvals: Sequence[Approval]
) -> Iterator[dict[str, Any]]:
    """The stored records, oldest first, less the write-ahead record of a cycle's effects once
    that cycle concluded (its concluding record follows and holds the same; the dashboard
    shows one row too), read once a page at a time (``shown_records``); a cycle that never
    concluded (parked, or its effects did not complete) with the ``usage`` it spent, which no
    other record lists; last, the cycle the run ended inside, if it has no record
    (``ended_inside``: what it cost and why it ended). A parked cycle is told by the decision
    on its request (``approvals``, the run's), not by its number alone."""
    from .._contract import TERMINAL_STATUSES
    from .._finishing import ended_inside
    from .._mid_cycle_records import by_id, shown_records

    ended = rec.status in TERMINAL_STATUSES
    decided = by_id(approvals)
    for _c, r, concluded, shown in shown_records(st, rec.run_id, ended=ended, decided=decided):
        if r and not wrote_ahead_of(r, concluded, decided):
            yield r if shown is None else {**r, "usage": shown["usage"]}
    end = ended_inside(st, rec)
    if end is not None:
        yield end


def wrote_ahead_of(
    record: dict[str, Any], concluded: set[Any], decided: Mapping[str, Approval]
) -> bool:
    """A cycle's effects' write-ahead record, once that cycle concluded (its concluding
    record follows and holds the same; ``never_concluded`` tells it from a later cycle of
    the same number)."""
    from .._mid_cycle_records import never_concluded

    return (
        record.get("decision") == "effects"
        and "proposal" not in record
        and not never_concluded(record, concluded, decided)
    )
