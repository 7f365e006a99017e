"""`loopwright memory list|add|confirm|forget|propose`: feedback memory, thin over
``FeedbackMemory`` (docs/memory.md)."""

from __future__ import annotations

import getpass
import json
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated, Any, cast

import typer

from .._errors import ConfigError, LoopwrightError, check_choice
from .._memory import (
    MEMORY_SCOPES,
    MEMORY_SIGNALS,
    MEMORY_STATUSES,
    FeedbackMemory,
    MemoryItem,
    MemoryStatus,
    Scope,
    Signal,
)
from ._app import JsonOpt, StoreOpt, TokenOpt, app, as_options, by_name, new_typer, print_json
from ._options import me_flag, store_flag
from ._stores import open_existing, open_or_create

if TYPE_CHECKING:
    from ..store import Store

__all__ = ["memory_app"]

memory_app = new_typer(
    help="Feedback memory: scoped corrections and signals retrieved into later contexts.",
    short_help="Feedback memory: corrections retrieved into later contexts.",
)
app.add_typer(memory_app, name="memory")

ByOpt = Annotated[
    str | None,
    typer.Option(
        "--by",
        help="Who decides (a person's name), in a store without users. With users, your "
        "token says who you are.",
        callback=by_name,
    ),
]
ITEMS_SHOWN = 50  # ``memory list``'s default --limit


def _choice(value: str | None, choices: tuple[str, ...], flag: str) -> str | None:
    if value is not None:
        check_choice(value, choices, flag)
    return value


def _default_by() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "cli"


def _person(
    st: Store, by: str | None, token: str | None, action: str, *, needed: bool = False
) -> str:
    """Who changes feedback memory. A store without users: ``--by`` (needed for a decision on
    an item, else the OS user). A store with users: the token's user, who must be allowed to
    operate (an operator or an admin), refused and audited like any other change: feedback
    steers every later run of its scope, so nobody writes, confirms or forgets it under
    another person's name (docs/permissions.md)."""
    from .._authority import require
    from ._people_cmd import acting_as

    if not st.has_users():
        if by is not None and by.strip():
            return by
        if needed:
            raise ConfigError("say who decides (--by NAME)", field="--by")
        return _default_by()
    who = acting_as(st, by, token, action=action, target="memory")
    require(st, who, "operate", action=action, target="memory", origin="cli",
            doing=f"{action.removeprefix('memory ')} feedback memory")  # fmt: skip
    return who


def _me(st: Store) -> str:
    """How the person at the terminal names themself to ``confirm``: a token where the store
    has users (a ``--by`` alone is refused there), else a name."""
    return me_flag(st, needed=True)


def _audited(st: Store, who: str, action: str, it: MemoryItem) -> None:
    """The change in the audit log, in a store with users (an open store has no one to
    name)."""
    if st.has_users():
        from .._authority import audit

        audit(st, who, action, f"memory {it.memory_id}", origin="cli", scope=it.scope,
              scope_key=it.scope_key or None, status=it.status)  # fmt: skip


def _add_input(scope: str, signal: str, rule: str | None) -> dict[str, Any] | None:
    """``memory add``'s choices checked and its ``--rule`` read (``FeedbackMemory.add``
    checks the rest)."""
    _choice(scope, MEMORY_SCOPES, "--scope")
    _choice(signal, MEMORY_SIGNALS, "--signal")
    if rule is None:
        return None
    try:
        rule_obj = json.loads(rule)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"not JSON: {exc.msg}", field="--rule") from None
    except RecursionError:
        raise ConfigError("nested too deeply", field="--rule") from None
    except ValueError:  # an integer past the int-from-text limit
        raise ConfigError("a number has too many digits to read", field="--rule") from None
    if not isinstance(rule_obj, dict):
        raise ConfigError("must be a JSON object", field="--rule")
    return cast("dict[str, Any]", rule_obj)


@contextmanager
def _refusal_audited(st: Store, who: str, action: str, memory_id: str) -> Iterator[None]:
    """A change refused (an add's input, its adder confirming an item, a forgotten item
    confirmed, an unknown id), recorded as refused with the reason, in a store with users:
    every attempt there is in the audit log, allowed or refused (docs/permissions.md).
    ``memory_id``: the item's ("" for an add: the target is ``memory``)."""
    try:
        yield
    except LoopwrightError as exc:
        if st.has_users():
            from .._authority import audit

            target = f"memory {memory_id}" if memory_id else "memory"
            audit(st, who, action, target, outcome="refused", origin="cli",
                  reason=str(exc))  # fmt: skip
        raise


def _print_item(verb: str, it: MemoryItem, as_json: bool) -> None:
    if as_json:
        print_json(it.to_dict())
        return
    from ._say import say

    where = it.scope if it.scope == "global" else f"{it.scope} {it.scope_key}"
    say(f"memory {it.memory_id} {verb}: {it.status} ({where}, {it.signal})")


@memory_app.command("list")
def list_(
    scope: Annotated[
        str | None, typer.Option("--scope", help="Only this scope: task, project or global.")
    ] = None,
    key: Annotated[
        str | None, typer.Option("--key", help="Only items of this task key or project.")
    ] = None,
    status: Annotated[
        str | None,
        typer.Option(
            "--status", help="active, candidate, forgotten or all (default: all but forgotten)."
        ),
    ] = None,
    limit: Annotated[
        int | None,
        typer.Option(
            "--limit",
            help=f"At most this many, newest first (default: {ITEMS_SHOWN}, in the list and "
            "with --json; 0: every one; stderr says how many more there are).",
            show_default=False,
        ),
    ] = None,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Memory items, newest first."""
    _choice(scope, MEMORY_SCOPES, "--scope")
    _choice(status, (*MEMORY_STATUSES, "all"), "--status")
    if limit is not None and limit < 0:
        raise ConfigError("must be 0 (every item) or more", field="--limit")
    # Bounded by default, --json too (a long run's reflections fill a store): --limit 0 for
    # every item. One more than shown is read: only then are the items counted.
    shown = ITEMS_SHOWN if limit is None else limit
    limit = shown + 1 if shown else None
    # The store applies the limit (a store of 100,000 items is not read to show 3); by
    # default forgotten items are left out, so each other status is asked for on its own.
    wanted: list[MemoryStatus | None] = [cast("MemoryStatus", status)]
    if status == "all":
        wanted = [None]
    elif status is None:
        wanted = [s for s in MEMORY_STATUSES if s != "forgotten"]
    with open_existing(store) as st:
        mem = FeedbackMemory(st)
        filters: dict[str, Any] = {"scope": cast("Scope | None", scope), "scope_key": key}
        items = [it for one in wanted for it in mem.list(**filters, status=one, limit=limit)]
        if len(wanted) > 1:  # newest first across the statuses asked for
            items.sort(key=lambda it: (it.created_at, it.memory_id), reverse=True)
        total = len(items)
        if shown and total > shown:
            total = sum(mem.count(**filters, status=one) for one in wanted)
            items = items[:shown]
    more = total - len(items)
    if more > 0:
        typer.echo(
            f"{more} more item(s) not listed; use --limit N, or --limit 0 for every one",
            err=True,
        )
    if as_json:
        print_json([it.to_dict() for it in items])
        return
    from ._table import print_blocks

    blocks = []
    for it in items:
        age = _age(time.time() - it.created_at)
        head = f"{it.memory_id}  {it.signal}  strength {it.strength:.2f}  {it.status}"
        head += f"  by {it.by}, {age} ago"
        fields = [("scope", f"{it.scope} {it.scope_key}".strip())]
        if it.text:
            fields.append(("text", it.text))
        if it.rule:
            fields.append(("rule", json.dumps(it.rule)))
        blocks.append((head, fields))
    # One block per item: the feedback wraps under its label instead of into narrow columns.
    title = f"feedback memory ({total}" + (f", the newest {len(items)} shown)" if more else ")")
    print_blocks(title, blocks)


def _age(seconds: float) -> str:
    seconds = max(seconds, 0.0)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


@memory_app.command(short_help="Add feedback (task or project: active; global: a candidate).")
def add(
    text: Annotated[str, typer.Argument(metavar="TEXT", help="The feedback, in words.")],
    scope: Annotated[
        str, typer.Option("--scope", help="task or project (global makes a candidate).")
    ],
    key: Annotated[
        str, typer.Option("--key", help="The task key (task scope) or project (project scope).")
    ] = "",
    signal: Annotated[
        str,
        typer.Option("--signal", help=f"What kind of feedback: {', '.join(MEMORY_SIGNALS)}."),
    ] = "correction",
    by: Annotated[
        str | None,
        typer.Option("--by", help="Who gives it (default: your OS user).", callback=by_name),
    ] = None,
    strength: Annotated[
        float | None,
        typer.Option("--strength", help="0..1 (default: the signal's strength)."),
    ] = None,
    rule: Annotated[
        str | None, typer.Option("--rule", help='A structured rule, a JSON object: {"k": "v"}.')
    ] = None,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
    token: TokenOpt = None,
) -> None:
    """Add feedback (task or project scope: active at once; global: a candidate).

    A global item is never active until a person confirms it."""
    bad: ConfigError | None = None
    try:
        rule_obj = _add_input(scope, signal, rule)
    except ConfigError as exc:
        bad, rule_obj = exc, None
    # A mistyped --store must not leave a new store nobody reads: a missing folder is refused,
    # and a store created now (memory may come before any run) is said. An add refused for its
    # input creates none (a new store has no users: no one to record it for).
    try:
        st, created = open_or_create(store, refuse_new=None if bad is None else str(bad))
    except LoopwrightError:
        if bad is not None:
            raise bad from None
        raise
    with st:
        if created:
            sys.stderr.write(f"created the store {created}\n")
        who = _person(st, by, token, "memory add")
        me = _me(st)
        # In a store with users an add refused for what it asked (a scope, a rule, a text) is
        # recorded refused with the reason, as a refused confirm or forget is; the token and
        # role refusals before it are recorded by ``_person``.
        with (
            _refusal_audited(st, who, "memory add", ""),
            as_options(
                scope="--scope",
                scope_key="--key",
                signal="--signal",
                text="TEXT",
                rule="--rule",
                by="--by",
                strength="--strength",
            ),
        ):
            if bad is not None:
                raise bad
            it = FeedbackMemory(st).add(
                scope=cast("Scope", scope),
                scope_key=key,
                signal=cast("Signal", signal),
                text=text,
                rule=rule_obj,
                source={"via": "cli"},
                by=who,
                strength=strength,
            )
        _audited(st, who, "memory add", it)
    _print_item("added", it, as_json)
    if it.status == "candidate" and not as_json:
        from ._say import say

        say(f"confirm it with: loopwright memory confirm {it.memory_id}{me}")


@memory_app.command(short_help="Confirm a candidate: it becomes active.")
def confirm(
    memory_id: Annotated[str, typer.Argument(metavar="ID", help="The item's id.")],
    by: ByOpt = None,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
    token: TokenOpt = None,
) -> None:
    """A person confirms a candidate (e.g. a proposed global preference): it becomes active."""
    with open_existing(store) as st:
        who = _person(st, by, token, "memory confirm", needed=True)
        with _refusal_audited(st, who, "memory confirm", memory_id):
            it = FeedbackMemory(st).confirm(memory_id, by=who)
        _audited(st, who, "memory confirm", it)
    _print_item("confirmed", it, as_json)


@memory_app.command()
def forget(
    memory_id: Annotated[str, typer.Argument(metavar="ID", help="The item's id.")],
    by: ByOpt = None,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
    token: TokenOpt = None,
) -> None:
    """Never retrieve this item again (it stays in the store for audit)."""
    with open_existing(store) as st:
        who = _person(st, by, token, "memory forget", needed=True)
        with _refusal_audited(st, who, "memory forget", memory_id):
            it = FeedbackMemory(st).forget(memory_id, by=who)
        _audited(st, who, "memory forget", it)
    _print_item("forgotten", it, as_json)


@memory_app.command(short_help="Propose global candidates from feedback shared by N projects.")
def propose(
    min_projects: Annotated[
        int,
        typer.Option("--min-projects", help="Distinct projects that must share the feedback."),
    ] = 3,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
    token: TokenOpt = None,
) -> None:
    """Propose global candidates from feedback shared by at least N projects.

    Candidates are never active until a person confirms them, and never proposed twice."""
    with open_existing(store) as st:
        who = _person(st, None, token, "memory propose")
        me = _me(st)
        with (
            _refusal_audited(st, who, "memory propose", ""),
            as_options(min_projects="--min-projects"),
        ):
            items = FeedbackMemory(st).propose_global(min_projects=min_projects)
        for it in items:
            _audited(st, who, "memory propose", it)
    if as_json:
        print_json([it.to_dict() for it in items])
        return
    from rich.markup import escape

    from ._say import say

    say(f"{len(items)} global candidate(s) proposed")
    for it in items:
        projects = ", ".join(it.source.get("projects", []))
        say(
            f"  {it.memory_id}  {escape(it.text)}  [dim](projects: {escape(projects)})[/]",
            markup=True,
        )
    if len(items) == 1:  # (its id: `confirm ID`, typed as printed, named no item)
        say(f"confirm it with: loopwright memory confirm {items[0].memory_id}{me}{store_flag()}")
    elif items:
        say(f"confirm each with: loopwright memory confirm ID{me}{store_flag()} (ID as listed)")
