"""``loopwright users``, ``authority`` and ``audit``, and who the CLI acts as.

A store with no users is open: a command records ``--by`` (or the OS user). Once a user is
added, commands that decide, change something or start runs need that person's token
(``--token`` or ``$LOOPWRIGHT_TOKEN``); the name recorded is the token's user, never a typed
one (docs/permissions.md). Reads stay open: whoever can open the store file can read it anyway.
"""

from __future__ import annotations

import getpass
import json
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from .._errors import ConfigError, NotPermittedError
from ._app import JsonOpt, StoreOpt, TokenOpt, app, new_typer, print_json
from ._stores import open_existing, open_or_create

# The people modules (and with them the store's) are imported by the commands that use them,
# not when the CLI starts: `loopwright --help` lists this module's commands (suite53).
if TYPE_CHECKING:
    from ..store import Store, UserRecord

__all__ = ["acting_as", "starter", "users_app"]


users_app = new_typer(
    help="People who may use the store: roles, approval limits and tokens (docs/permissions.md).",
    short_help="Users, roles and tokens.",
)
app.add_typer(users_app, name="users")


def acting_as(store: Store, by: str | None, token: str | None, *, action: str, target: str) -> str:
    """The name a command acts under: the token's user in a store with users (a typed
    ``--by`` must match it), else ``--by`` or the OS user. ``target`` (``run ID``) is what a
    refusal for a missing or unknown token is recorded against: what was asked, not ``cli``."""
    from .._authority import audit, hash_token

    token = (token or "").strip() or None
    if not store.has_users():
        return (by or "").strip() or getpass.getuser()
    # a refusal is recorded under what authenticated the attempt: a typed --by proves nothing
    # (anyone could write "ben" or "policy:earned" into the actor column); it goes in the
    # detail, as typed, only where it prints as itself
    typed = _typed_by(by)
    if token is None:
        audit(store, "(no token)", action, target, outcome="refused", origin="cli",
              reason="no token", typed_by=typed)  # fmt: skip
        raise NotPermittedError(
            "this store has users: give your token (--token or LOOPWRIGHT_TOKEN; an admin "
            "makes one with: loopwright users token NAME)"
        )
    user = store.user_by_token(hash_token(token))
    if user is None:
        audit(store, "(unknown token)", action, target, outcome="refused", origin="cli",
              reason="unknown or revoked token", typed_by=typed)  # fmt: skip
        raise NotPermittedError("the token is unknown or revoked")
    if by and by.strip() and by.strip() != user.name:
        # the token's user naming someone else: an attempt to act as another person
        audit(store, user.name, action, target, outcome="refused", origin="cli",
              reason="--by names someone else than the token's user", typed_by=typed)  # fmt: skip
        raise ConfigError(
            f"the token is {user.name}'s; decisions are recorded under it (drop --by)",
            field="--by",
        )
    return user.name


def _typed_by(by: str | None) -> str | None:
    """A typed ``--by`` as the audit detail may keep it: printable, at most 64 characters."""
    from .._keys import unprintable

    name = (by or "").strip()
    if not name or len(name) > 64 or unprintable(name) is not None:
        return None
    return name


def starter(store: Store, token: str | None, *, target: str, **detail: Any) -> str:
    """Who starts runs from this command: their requester, whom separation of duties keeps
    from approving the runs' requests. A store without users: the OS user. A store with
    users: the user of the token (``--token``, else ``$LOOPWRIGHT_TOKEN``), who must be allowed
    to operate (an operator or an admin); no token, a token naming no user, or a user who may
    not operate is refused and audited, never replaced by the OS user."""
    from .._authority import audit, require

    if not store.has_users():
        return getpass.getuser()
    if token is None:
        token = os.environ.get("LOOPWRIGHT_TOKEN")
    who = acting_as(store, None, token, action="start run", target=target)
    require(store, who, "operate", action="start run", target=target, origin="cli",
            doing="start runs")  # fmt: skip
    audit(store, who, "start run", target, origin="cli", **detail)
    return who


def _limits(values: list[str] | None) -> dict[str, float | None]:
    """``--limit spend=10000`` (most per request) or ``--limit publish`` (any amount)."""
    out: dict[str, float | None] = {}
    for raw in values or ():
        kind, sep, amount = raw.partition("=")
        kind = kind.strip()
        if not kind:
            raise ConfigError(f"{raw!r}: give KIND or KIND=AMOUNT", field="--limit")
        if not sep:
            out[kind] = None
            continue
        try:
            value = float(amount.replace(",", "").replace("_", ""))
        except ValueError:
            raise ConfigError(f"{raw!r}: AMOUNT must be a number", field="--limit") from None
        if not value >= 0:  # negative, or NaN
            raise ConfigError(f"{raw!r}: AMOUNT must be 0 or more", field="--limit")
        out[kind] = value
    return out


def _admin(store: Store, token: str | None, action: str, target: str) -> str:
    """The admin doing a user change (anyone may add the first user, an admin)."""
    from .._authority import audit, permits

    who = acting_as(store, None, token, action=action, target=target)
    if store.has_users():
        user = store.get_user(who)
        if user is None or not permits(user, "admin"):
            audit(store, who, action, target, outcome="refused", origin="cli",
                  reason="needs the admin role")  # fmt: skip
            raise NotPermittedError(f"{who} may not {action}: it needs the admin role")
    return who


def _print_token(name: str, token: str) -> None:
    # The token goes to stdout alone on its line (scripts capture it); the advice to stderr.
    sys.stderr.write(f"token for {name} (shown once; only its hash is stored):\n")
    sys.stdout.write(token + "\n")


@users_app.command("add")
def users_add(
    name: Annotated[str, typer.Argument(metavar="NAME", help="The user's name.")],
    role: Annotated[
        list[str],
        typer.Option(
            "--role",
            metavar="ROLE",
            help="A role (repeat): viewer, operator, approver, admin, or a label rules name.",
        ),
    ],
    limit: Annotated[
        list[str] | None,
        typer.Option(
            "--limit",
            metavar="KIND[=AMOUNT]",
            help="An approver may approve only these kinds, up to AMOUNT each (repeat).",
        ),
    ] = None,
    token: TokenOpt = None,
    store: StoreOpt = None,
) -> None:
    """Add a user and print their first token. The first user must be an admin; after that
    only an admin (their token) adds users."""
    from .._authority import BUILTIN_ROLES, audit, check_role_name, hash_token, new_token
    from .._keys import unprintable

    name = name.strip()
    if (
        not name
        or len(name) > 64
        or any(c in name for c in ",:\n\t")
        or name.startswith(("policy", "("))
        or name.lower() == "loopwright"
    ):
        raise ConfigError(
            "a user name is 1-64 characters, without ',', ':' or line breaks, and not "
            "'policy…' or 'loopwright' (kept for loopwright's own decisions) nor '(…)' (the "
            "audit log's word for who gave no token)",
            field="NAME",
        )
    bad = unprintable(name)
    if bad is not None:
        raise ConfigError(f"a user name {bad}", field="NAME")
    roles = sorted({check_role_name(r) for r in role})
    limits = _limits(limit)
    # The first user (an admin) may come before the first run: then the store is created.
    no_admin = "admin" not in roles
    st, created = open_or_create(
        store, "its first user must be an admin (--role admin)" if no_admin else None
    )
    with st:
        if created:
            sys.stderr.write(f"created the store {created}\n")
        first = not st.has_users()
        if first and "admin" not in roles:
            raise ConfigError(
                "the first user must be an admin (--role admin): no one else could add users",
                field="--role",
            )
        by = _admin(st, token, "add user", f"user {name}")
        if first:
            by = getpass.getuser()
        user = st.add_user(name, roles=roles, limits=limits, by=by, now=time.time())
        secret = new_token()
        st.set_token(name, hash_token(secret), now=time.time())
        audit(st, by, "add user", f"user {name}", origin="cli", roles=roles, limits=limits)
        audit(st, by, "issue token", f"user {name}", origin="cli")
    _print_token(user.name, secret)
    for kind in sorted(k for k in limits if k != k.lower()):
        # Kinds are exact strings (never folded); effects' kinds are usually lower case.
        sys.stderr.write(
            f"note: --limit {kind}: kinds are matched exactly, so {name} may approve kind "
            f"{kind!r} only, not {kind.lower()!r}; effect kinds are usually lower case\n"
        )
    custom = [r for r in roles if r not in BUILTIN_ROLES]
    if custom and not any(r in BUILTIN_ROLES for r in roles):
        sys.stderr.write(
            f"note: {', '.join(custom)} only label {name} for approval rules; add --role "
            "viewer, operator or approver to let them use the store\n"
        )


@users_app.command("token")
def users_token(
    name: Annotated[str, typer.Argument(metavar="NAME", help="Whose token to replace.")],
    token: TokenOpt = None,
    store: StoreOpt = None,
) -> None:
    """Print a new token for NAME (shown once); their earlier token stops working at once.
    An admin may do it for anyone, a user for themself. Who asks is checked before the name
    is looked up: "no user 'x'" is an admin's answer only (it answered anyone, token or none,
    and so told whether a user exists)."""
    from .._authority import audit, hash_token, new_token, permits

    with open_existing(store) as st:
        if not st.has_users():
            raise ConfigError("this store has no users: add one with `loopwright users add`")
        who = acting_as(st, None, token, action="issue token", target=f"user {name}")
        me = st.get_user(who)
        if who != name and (me is None or not permits(me, "admin")):
            audit(st, who, "issue token", f"user {name}", outcome="refused", origin="cli",
                  reason="needs the admin role")  # fmt: skip
            raise NotPermittedError(f"{who} may replace only their own token (admins: anyone's)")
        if st.get_user(name) is None:
            raise ConfigError(f"no user {name!r} in this store", field="NAME")
        secret = new_token()
        st.set_token(name, hash_token(secret), now=time.time())
        audit(st, who, "issue token", f"user {name}", origin="cli")
    _print_token(name, secret)


@users_app.command("revoke")
def users_revoke(
    name: Annotated[str, typer.Argument(metavar="NAME", help="Who to revoke.")],
    token: TokenOpt = None,
    store: StoreOpt = None,
) -> None:
    """Revoke NAME and their tokens, at once (their past decisions stay on record)."""
    from .._authority import audit, permits

    with open_existing(store) as st:
        if not st.has_users():
            raise ConfigError("this store has no users", field="NAME")
        who = _admin(st, token, "revoke user", f"user {name}")
        if name == who and sum(permits(u, "admin") for u in st.list_users()) <= 1:
            raise ConfigError("you are the last admin: add another before revoking yourself")
        st.revoke_user(name, now=time.time())
        audit(st, who, "revoke user", f"user {name}", origin="cli")
    print(f"revoked {name}: their tokens no longer work")


def _user_line(u: UserRecord) -> dict[str, Any]:
    from rich.markup import escape

    limits = ", ".join(
        f"{k} ≤ {v:,.0f}" if v is not None else k for k, v in sorted(u.limits.items())
    )
    return {
        "name": escape(u.name),
        "roles": escape(", ".join(u.roles)),
        "may approve": escape(limits) or ("any" if "approver" in u.roles else "-"),
        "status": "revoked" if u.revoked_at else "active",
        "added": time.strftime("%Y-%m-%d %H:%M", time.localtime(u.created_at)),
        "by": escape(u.created_by),
    }


@users_app.command("list")
def users_list(json_: JsonOpt = False, store: StoreOpt = None) -> None:
    """List users, their roles and approval limits (tokens are never shown)."""
    from rich.table import Table

    from ._say import console, say

    with open_existing(store) as st:
        users = st.list_users()
    if json_:
        print_json([u.to_dict() for u in users])
        return
    if not users:
        say("no users: this store is open to local use (docs/permissions.md)")
        return
    table = Table(title=f"{len(users)} user(s)")
    for col in ("name", "roles", "may approve", "status", "added", "by"):
        table.add_column(col)
    for u in users:
        table.add_row(*_user_line(u).values())
    console().print(table)


@app.command(short_help="What each loop has earned (earned authority) and how close it is.")
def authority(
    spec: Annotated[
        Path | None,
        typer.Argument(metavar="SPEC", help="A loop spec (default: every loop in the store)."),
    ] = None,
    json_: JsonOpt = False,
    store: StoreOpt = None,
) -> None:
    """Per loop and effect kind: whether the loop has earned automatic approval, from which
    approvals, since when, and what revoked it last. Off unless a spec has [[authority]]."""
    from rich.markup import escape
    from rich.table import Table

    from .._earned import standings
    from ._say import console, say

    with open_existing(store) as st:
        rows = [a.to_dict() for a in standings(st, [str(spec)] if spec is not None else [])]
    if json_:
        print_json(rows)
        return
    if not rows:
        say("no earned authority: no loop here has [[authority]] in its spec (docs/permissions.md)")
        return
    table = Table(title="earned authority")
    for col in ("loop", "kind", "up to", "earned", "clean approvals", "last revoked by"):
        table.add_column(col)
    for r in rows:
        table.add_row(
            escape(f"{r['loop']} ({(r['version'] or '-')[:8]})"),
            escape(r["kind"]),
            f"{r['grant']['up_to']:,.0f}",
            "[green]yes[/]" if r["earned"] else "no",
            _clean(r["clean_approvals"], r["needed"]),
            escape(r["last_revoked_by"] or "-"),
        )
    console().print(table)


def _clean(count: int, needed: int) -> str:
    """``2 of 5`` on the way; past the threshold ``10 (5 needed)``, not ``10 of 5``."""
    return f"{count} of {needed}" if count < needed else f"{count} ({needed} needed)"


@app.command("audit", short_help="The audit log: who did what, when, allowed or refused.")
def audit_cmd(
    after: Annotated[int, typer.Option("--after", help="Only records after this id.")] = 0,
    actor: Annotated[str | None, typer.Option("--actor", help="Only this person's.")] = None,
    target: Annotated[
        str | None,
        typer.Option(
            "--target", help='Only those on this, as the log names it: "run ID", "request ID".'
        ),
    ] = None,
    limit: Annotated[int | None, typer.Option("--limit", help="At most this many.")] = None,
    jsonl: Annotated[
        bool, typer.Option("--jsonl", help="One JSON object a line (an export).")
    ] = False,
    store: StoreOpt = None,
) -> None:
    """Every decision, edit, action, sign-in, token and user change and policy change, oldest
    first. Append-only: nothing rewrites it (not even a rollback)."""
    if limit is not None and limit < 1:
        raise ConfigError("must be 1 or more", field="--limit")
    with open_existing(store) as st:
        records = st.audit(after=max(0, after), actor=actor, target=target, limit=limit)
    if jsonl:
        for r in records:
            sys.stdout.write(json.dumps(r.to_dict(), default=str) + "\n")
        return
    from rich.markup import escape
    from rich.table import Table

    from ._say import console, say

    out = console()

    def detail_of(r: Any) -> str:
        said = r.detail.get("reason") or ", ".join(
            f"{k}={v}" for k, v in r.detail.items() if k not in ("rules", "evidence")
        )
        return escape(str(said)[:200])

    def outcome_of(r: Any) -> str:
        return "[red]refused[/]" if r.outcome == "refused" else r.outcome

    if out.width < 120:  # a table of 8 columns folds every cell: one record a line instead
        # one record a line, whole in a pipe (80 columns there: each folded in two or three)
        say(f"{len(records)} audit record(s)", out=out)
        for r in records:
            when = time.strftime("%m-%d %H:%M:%S", time.localtime(r.at))
            head = f"{r.audit_id:>4} {when} {escape(r.actor)} {escape(r.action)} {escape(r.target)}"
            line = f"{head}: {outcome_of(r)} ({escape(r.origin)}) {detail_of(r)}".rstrip()
            say(line, out=out, markup=True)
        return
    table = Table(title=f"{len(records)} audit record(s)")
    for col in ("id", "when", "who", "did", "on", "outcome", "from", "detail"):
        table.add_column(col, overflow="fold", no_wrap=col not in ("on", "detail"))
    for r in records:
        table.add_row(
            str(r.audit_id),
            time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r.at)),
            escape(r.actor),
            escape(r.action),
            escape(r.target),
            outcome_of(r),
            escape(r.origin),
            detail_of(r),
        )
    out.print(table)
