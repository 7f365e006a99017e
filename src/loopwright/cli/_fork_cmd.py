"""``loopwright fork`` and ``loopwright edit``: a new run from an earlier cycle, and a person's
version of a part. Thin over ``Runtime.fork`` and ``Runtime.edit`` (``loopwright._fork``)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from .._errors import ConfigError
from .._json import strict_loads
from ._app import ByOpt, NoteOpt, RunArg, StoreOpt, TokenOpt, app, as_options, continue_hint
from ._people_cmd import acting_as
from ._stores import existing_store

if TYPE_CHECKING:
    from ..store import RunRecord, Store

__all__ = ["edit", "fork"]


@app.command(short_help="A new run from an earlier cycle of a run (the run is not changed).")
def fork(
    run_id: RunArg,
    at_cycle: Annotated[
        int, typer.Option("--at-cycle", help="Start from the state after this cycle (0: start).")
    ],
    contract: Annotated[
        Path | None,
        typer.Option(
            "--contract",
            metavar="FILE",
            help="A contract TOML (a loop spec or [contract] tables) laid over RUN's contract "
            "(or --spec's) table by table: what it does not set stays.",
        ),
    ] = None,
    spec: Annotated[
        Path | None,
        typer.Option("--spec", metavar="FILE", help="Run the fork with this loop spec."),
    ] = None,
    key: Annotated[
        str | None, typer.Option("--key", help="The new run's task key (default: derived).")
    ] = None,
    by: ByOpt = None,
    queue: Annotated[
        bool,
        typer.Option(
            "--queue",
            help="Let any worker serving the store start the fork at once (default: no worker "
            "takes it until you start it with `loopwright resume NEW`, after any edit).",
        ),
    ] = False,
    store: StoreOpt = None,
    token: TokenOpt = None,
) -> None:
    """Fork RUN at a cycle: a new run whose state is RUN's after that cycle (accepted parts stay
    accepted), linked to it. Effects RUN did up to that cycle are inherited, never done again;
    those it did after it with a run-scoped key (no key=) are done again if the fork's cycles
    ask for them (named on stderr). No worker starts the fork until you do, with `loopwright
    resume NEW` (edit it first if you like); --queue leaves it to the workers."""
    from .._compare import contract_changes, merge_contract
    from .._contract import contract_from_snapshot
    from .._engine import Runtime
    from .._fork_effects import effects_text, fork_effects
    from .._loop import other_loop
    from .._spec import load_spec
    from ..replay._report import contract_tables
    from ._say import say

    if at_cycle < 0:
        raise ConfigError("must be 0 or more", field="--at-cycle")
    if key is not None:
        from .._keys import check_key

        check_key(key, "--key")  # the rule of task keys, named by this command's option
    loop = load_spec(spec) if spec is not None else None
    tables = contract_tables(contract, keep_risk=True) if contract is not None else None
    with Runtime(existing_store(store)) as rt:
        rec = rt.store.get_run(run_id)
        if loop is not None and other_loop(loop, rec.loop_name, rec.spec_ref):
            # Another loop's actor, contract and memory scope are not this run's (its state
            # would be labelled that loop, in this run's project): as a task key is refused.
            raise ConfigError(
                f"{spec} is loop {loop.name!r}, not run {rec.run_id}'s loop "
                f"{rec.loop_name!r} (project {rec.project!r}): fork with that loop's spec, or "
                f"start a new run of {loop.name!r} with `loopwright run`",
                field="--spec",
            )
        # The file changes what it sets: a budget-only file keeps the run's success rule and
        # its risk rules (replacing the whole contract dropped the approvals silently).
        base = loop.contract.to_dict() if loop is not None else rec.contract
        chosen = loop.contract if loop is not None else None
        if tables is not None:
            chosen = contract_from_snapshot(merge_contract(base, tables))
        who = acting_as(rt.store, by, token, action="fork", target=f"run {rec.run_id}")
        with as_options(at_cycle="--at-cycle", task_key="--key", loop="--spec", by="--by"):
            new = rt.fork(
                rec.run_id,
                at_cycle,
                contract=chosen,
                loop=loop,
                task_key=key,
                by=who,
                origin="cli",
                queue=queue,
            )
        # what the fork was given, as stored (a spend-only contract with its default ceiling)
        changed = contract_changes(rec.contract, new.contract)
        at_once = stops_at_once(rt.store, new)
        kept, again, more = fork_effects(rt.store, rec.run_id, at_cycle)
        effects = effects_text(kept, again, more, at_cycle)
    say(
        f"forked run {rec.run_id[:12]} at cycle {at_cycle}: new run {new.run_id[:12]} "
        f"(task key {new.task_key})"
    )
    said = "; ".join(f"{k} {v['from']!r} -> {v['to']!r}" for k, v in changed.items())
    say(f"contract: {said or 'unchanged'}")
    if effects is not None:
        # what the fork inherits, and what it may pay again (effects53b: a fork reaching the
        # cycle of a payment with a run-scoped key paid again, and nothing said so)
        say(f"{'warning' if again else 'note'}: {effects}", stderr=bool(again))
    if queue:
        say(f"queued: a worker serving the store starts it (or {continue_hint(new, 'start it')})")
    else:
        # (no worker claims it: it waits for its maker, after any edit)
        say("not started, and no worker starts it: " + continue_hint(new, "start it"))
    if at_once is not None:
        say(at_once, stderr=True)


def stops_at_once(store: Store, new: RunRecord) -> str | None:
    """Why a fork just made stops on ``resume`` before its first cycle, or None. A fork goes
    on counting its origin's cycles and spend: a fork at cycle 3 under ``max_cycles = 3``
    (read as "three more") or of a run that spent its cost budget ran no cycle."""
    from .. import _decide as rules
    from .._contract import contract_from_snapshot

    state = store.latest_checkpoint(new.run_id).task_state()
    contract = contract_from_snapshot(new.contract)
    reason = rules.stop_before_cycle(contract, state)
    if reason is None:
        return None
    b, spent = contract.budget, state.spent
    counted = {
        "budget_cycles": f"{state.cycle} cycle(s) of its cap of {rules.cycle_cap(contract, state)}",
        "budget_cost": f"${spent.cost_usd:.4g} of its max_cost_usd {b.max_cost_usd}",
        "budget_tokens": f"{spent.tokens} tokens of its max_tokens {b.max_tokens}",
        "budget_time": f"{spent.seconds:.3g} s of its max_seconds {b.max_seconds}",
    }.get(reason)
    what = (
        f"it starts with {counted} (a fork goes on counting its origin's cycles and spend)"
        if counted
        else "its contract forbids another cycle"
    )
    return (
        f"note: run {new.run_id[:12]} will stop ({reason}) before its first cycle when "
        f"resumed: {what}; fork again with a --contract that raises the budget above that"
    )


@app.command(short_help="A person's version of a part (accepted; the loop goes on from it).")
def edit(
    run_id: RunArg,
    part: Annotated[str, typer.Argument(metavar="PART", help="The part: artifact/part.")],
    by: ByOpt = None,
    value: Annotated[
        str | None,
        typer.Option(
            "--value",
            help="The new value: JSON if it parses as JSON; else text, for a part holding text.",
        ),
    ] = None,
    file: Annotated[
        Path | None, typer.Option("--file", metavar="F", help="Read the new value from a file.")
    ] = None,
    note: NoteOpt = None,
    store: StoreOpt = None,
    token: TokenOpt = None,
) -> None:
    """Give PART of RUN a new version authored by a person: accepted, recorded with the diff,
    and remembered as an `edit` signal for the task. An ended run is reopened."""
    from .._engine import Runtime
    from .._spec import register_run_secrets
    from ._say import say
    from ._table import interrupted

    if (value is None) == (file is None):
        raise ConfigError("give exactly one of --value and --file", field="--value")
    if value is not None and value.strip() == "V":
        # The advice of runs escalated before polish55 printed `--value V`: typed as printed,
        # a text part was given the text "V"
        raise ConfigError(
            """V is the hint's placeholder: give the part's new value (the text V itself: --value '"V"')""",
            field="--value",
        )
    text: str | None = None
    if file is not None:
        try:
            text = file.read_text(encoding="utf-8-sig")  # (a byte-order mark is no text)
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"cannot read {file}: {exc}", field="--file") from None
        if not text.strip():
            # an empty file is more often a redirect gone wrong than a value (newuser46)
            raise ConfigError(
                f"{file} is empty; to give the part an empty text, use --value ''", field="--file"
            )
        new: Any = text
    not_json: ValueError | None = None
    if value is not None:
        try:
            new = strict_loads(value)
        except ValueError as exc:  # not JSON (NaN, Infinity, 1e999 are not): the text itself
            new, not_json = value, exc
    with Runtime(existing_store(store)) as rt:
        rec = rt.store.get_run(run_id)
        if not_json is not None:
            # Text for a text part; a part holding a number, a list or an object keeps JSON
            # (as the dashboard's Edit box does): "NaN" for a price is a typo, not a value.
            now = rt.store.latest_checkpoint(rec.run_id).task_state().part(part)
            if now is not None and not isinstance(now.value, str):
                raise ConfigError(
                    f"{part} holds JSON ({type(now.value).__name__}): {str(value)[:40]!r} is not "
                    f"JSON ({not_json}); for text, give it as a JSON string",
                    field="--value",
                )
        if text is not None:
            # A file for a part holding JSON is read as JSON, as --value is: a price list edited
            # in a file was stored as one string where the loop reads a mapping.
            now = rt.store.latest_checkpoint(rec.run_id).task_state().part(part)
            if now is not None and not isinstance(now.value, str):
                try:
                    new = strict_loads(text)
                except ValueError as exc:
                    raise ConfigError(
                        f"{part} holds JSON ({type(now.value).__name__}) and {file} is not JSON "
                        f"({exc})",
                        field="--file",
                    ) from None
        who = acting_as(rt.store, by, token, action="edit", target=f"run {rec.run_id}")
        # the loop's API keys and URL credentials masked in the value, as in an actor's edit
        register_run_secrets(rec)
        with as_options(part="PART", value="--value", note="--note", by="--by"):
            # (and why a resume will not judge the edit, as the edit found it)
            rec, why = rt._edit(rec.run_id, part, new, by=who, note=note, origin="cli")
        # a run left running by a process that stopped (killed): as `loopwright runs` says
        stopped = interrupted(rec, rt.store.clock()) if rec.status == "running" else None
    status = rec.status + (f" ({stopped.split(':')[0]})" if stopped else "")
    say(f"run {rec.run_id[:12]}: {part} edited by {who}, now {status}")
    if why is not None:
        say(why)
    elif rec.status == "pending" or stopped:
        say(continue_hint(rec, "resume it" if stopped else "continue it"))
