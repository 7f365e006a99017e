"""``loopwright approvals``, ``approve``, ``deny``, ``answer``, ``cancel``, ``pause``,
``unpause``, ``rollback`` and ``settle``:
what waits for a person, and a person's decisions on a run (docs/permissions.md says who may).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Annotated, Any

import typer

from .._errors import ConfigError
from ._app import (
    APPROVALS_SHOWN,
    ByOpt,
    JsonOpt,
    NoteOpt,
    RequestOpt,
    RunArg,
    StoreOpt,
    TokenOpt,
    app,
    as_options,
    by_name,
    continue_hint,
    loop_for,
    loop_or_none,
    print_json,
)
from ._options import me_flag, store_flag
from ._stores import existing_store, open_existing

if TYPE_CHECKING:
    from .._engine import RunResult
    from ..store import Approval, RunRecord, Store


@app.command()
def approvals(
    store: StoreOpt = None,
    as_json: JsonOpt = False,
    all_: Annotated[bool, typer.Option("--all", help="Decided ones too.")] = False,
    limit: Annotated[
        int | None,
        typer.Option(
            help=f"At most this many, newest first (default: {APPROVALS_SHOWN}, in the list "
            "and with --json; 0: every one; stderr says how many more there are).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Approval requests waiting for a person, across runs, newest first."""
    if limit is not None and limit < 0:
        raise ConfigError("must be 0 (every request) or more", field="--limit")
    # Bounded by default, --json too: one page and a COUNT in the store, not every request
    # of a store where thousands wait. --limit 0 for every one.
    shown = APPROVALS_SHOWN if limit is None else limit
    status = None if all_ else "pending"
    from .._reuse_now import as_now  # (the store's modules: not at the CLI's start-up)

    with open_existing(store) as st:
        if shown:
            reqs = st.page_approvals(status=status, limit=shown + 1)
            total = len(reqs) if len(reqs) <= shown else st.count_approvals(status=status)
            reqs = reqs[:shown]
        else:
            reqs = st.approvals(status=status)
            reqs.sort(key=lambda a: (-a.requested_at, a.approval_id))
            total = len(reqs)
        me = me_flag(st)
        # a card that says a payment is reused, refunded since, says so (one read of claims)
        reqs = as_now(st, reqs)
        votes = {a.approval_id: [v.by for v in st.votes(a.approval_id)] for a in reqs}
        # the one request's run: `loopwright resume` refuses a run started from Python
        only = st.get_run(reqs[0].run_id) if total == 1 and reqs and not all_ else None
        # expiry is set and compared on the store's clock (PostgreSQL: the server's): a host
        # whose clock runs ahead said a request "can no longer be decided" that could be
        now = st.clock() if any(a.expires_at is not None for a in reqs) else time.time()
    more = total - len(reqs)
    if more > 0:
        typer.echo(
            f"{more} more request(s) not listed; use --limit N, or --limit 0 for every one",
            err=True,
        )
    if as_json:
        print_json([a.to_dict() for a in reqs])
        return
    from ._table import print_blocks

    blocks = []
    for a in reqs:
        q = (a.evidence or {}).get("question") or {}
        what = a.what + (f"  [choices: {', '.join(q['choices'])}]" if q.get("choices") else "")
        status = a.status + (f": {a.answer}" if a.answer is not None else "")
        head = f"run {a.run_id[:12]}  request {a.approval_id}  {a.kind}  {a.rule or '-'}  {status}"
        rows = [("what", what), ("why", a.why)]
        rule = (a.evidence or {}).get("who") or {}
        if rule.get("role") or int(rule.get("approvers") or 1) > 1:
            need = int(rule.get("approvers") or 1)
            said = f"{need} approver(s)" + (
                f" with the {rule['role']} role" if rule.get("role") else ""
            )
            if votes[a.approval_id]:
                said += f"; approved so far by {', '.join(votes[a.approval_id])}"
            rows.append(("who", said))
        if a.expires_at is not None and a.status == "pending":
            rows.append(("expires", _expiry(a.expires_at, now)))
        blocks.append((head, rows))
    # One block per request: the prose wraps under its label instead of into narrow columns.
    title = f"{total} request(s)" + (f", the newest {len(reqs)} shown" if more > 0 else "")
    print_blocks(title, blocks)
    if reqs and not all_:
        print(_decide_hint(reqs, total, me, only, now))


def _expiry(expires_at: float, now: float) -> str:
    """When a pending request expires, or that it has: such a request stays listed as pending
    until its run resumes (and escalates), but can no longer be decided."""
    from ..store._records import past_expiry

    at = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(expires_at))
    if past_expiry(expires_at, now):  # (the engine's rule: open at expires_at itself)
        return f"expired at {at}: it can no longer be decided; the run escalates when resumed"
    return at


def _decide_hint(
    reqs: list[Approval], total: int, me: str, only: RunRecord | None, now: float
) -> str:
    """What to type next under `loopwright approvals`: for one request, its own commands; for
    several, one form with RUN and ID to take from the list (naming only the newest request's
    run read as if it were the only one), and one command that continues them all."""
    from ..store._records import PAUSE, past_expiry

    at = store_flag()
    if total == 1:
        a = reqs[0]
        run = a.run_id[:12] + at
        if past_expiry(a.expires_at, now):
            go_on = (
                continue_hint(only, "escalate it")
                if only is not None
                else f"escalate it with: loopwright resume {run}"
            )
            return f"it expired and can no longer be decided; {go_on}"
        if a.kind == PAUSE:  # lifted or the run cancelled: denying a pause is refused
            how = f"loopwright unpause {run}{me} (or end the run: loopwright cancel {run}{me})"
        elif a.kind == "question":
            how = f"loopwright answer {run} ANSWER{me}"
        else:
            how = f"loopwright approve {run}{me} (or deny; --note TEXT records why)"
        if only is not None and not only.spec_ref:
            return f"decide with: {how}\nthen: {continue_hint(only, 'continue it')}"
        return f"decide with: {how}\nthen: loopwright resume {run} (or add --resume above)"
    # each form names the first listed request of its kind: it runs as pasted (notify56)
    forms, firsts = [], {a.kind if a.kind in ("question", PAUSE) else "": a for a in reqs[::-1]}
    if (f := firsts.get("")) is not None:
        forms.append(
            f"loopwright approve {f.run_id[:12]} --request {f.approval_id}{me}{at} (or deny)"
        )
    if (f := firsts.get(PAUSE)) is not None:
        r = f.run_id[:12]
        forms.append(f"a pause: loopwright unpause {r}{me}{at} (or loopwright cancel {r}{at})")
    if (f := firsts.get("question")) is not None:
        forms.append(
            f"loopwright answer {f.run_id[:12]} ANSWER --request {f.approval_id}{me}{at} "
            "(ANSWER: your answer, in quotes)"
        )
    return (
        f"decide each of the {total} requests, as for the first listed: "
        + "; ".join(forms)
        + " — for each other request, its run and request id from the list above in their "
        "place (--note TEXT records why)\n"
        f"then: loopwright resume --all{at} (continues every run whose requests are decided), "
        "or add --resume to each decision"
    )


@app.command(short_help="Approve a run's pending request.")
def approve(
    run_id: RunArg,
    by: ByOpt = None,
    note: NoteOpt = None,
    request: RequestOpt = None,
    resume_now: Annotated[bool, typer.Option("--resume", help="Continue the run now.")] = False,
    store: StoreOpt = None,
    token: TokenOpt = None,
) -> None:
    """Approve a run's pending request; `loopwright resume RUN` then continues where it parked.
    A request that needs several approvers stays pending until enough people approved it."""
    _decide(run_id, "approve", by, note, resume_now, store, request, token=token)


@app.command(short_help="Deny a run's pending request (or decline its question).")
def deny(
    run_id: RunArg,
    by: ByOpt = None,
    note: NoteOpt = None,
    request: RequestOpt = None,
    resume_now: Annotated[bool, typer.Option("--resume", help="End the run now.")] = False,
    store: StoreOpt = None,
    token: TokenOpt = None,
) -> None:
    """Deny a run's pending request (or decline its question); on resume the run escalates
    (a person's edit made beside the request is judged first: accepted if it succeeds)."""
    _decide(run_id, "deny", by, note, resume_now, store, request, token=token)


@app.command(short_help="Answer a run's pending question.")
def answer(
    run_id: RunArg,
    text: Annotated[str, typer.Argument(metavar="ANSWER", help="The answer to the question.")],
    by: ByOpt = None,
    note: NoteOpt = None,
    request: RequestOpt = None,
    resume_now: Annotated[bool, typer.Option("--resume", help="Continue the run now.")] = False,
    store: StoreOpt = None,
    token: TokenOpt = None,
) -> None:
    """Answer a run's pending question; the answer reaches the next cycle's context."""
    _decide(run_id, "answer", by, note, resume_now, store, request, text, token=token)


# What the hints printed in an answer's place (``TEXT`` before review54c, ``ANSWER`` now, the
# command's metavar): typed as printed, the question was answered with the word and the run
# went on with it, as ``--by NAME`` recorded decisions by "NAME" (``by_name``).
_ANSWER_PLACEHOLDERS = frozenset({"ANSWER", "TEXT"})


def _not_a_placeholder(store: Store, run_id: str, request: str | None, text: str | None) -> None:
    """Refuse an answer that is only a hint's placeholder, unless a pending question of the
    run offers it as a choice (one whose choices are ``TEXT`` and ``IMAGE``)."""
    if text is None or text.strip() not in _ANSWER_PLACEHOLDERS:
        return
    for a in store.approvals(run_id=run_id, status="pending"):
        question = (a.evidence or {}).get("question") or {}
        if request in (None, a.approval_id) and text.strip() in (question.get("choices") or ()):
            return
    raise ConfigError(
        f"{text.strip()} is the hint's placeholder: type your answer in its place",
        field="ANSWER",
    )


def _decide(
    run_id: str,
    how: str,
    by: str | None,
    note: str | None,
    resume_now: bool,
    store: str | None,
    request: str | None,
    text: str | None = None,
    *,
    token: str | None = None,
) -> None:
    from .._engine import Runtime
    from .._spec import register_run_secrets
    from ._people_cmd import acting_as
    from ._say import say

    with Runtime(existing_store(store)) as rt:
        rec = rt.store.get_run(run_id)
        who = acting_as(rt.store, by, token, action=how, target=f"run {rec.run_id}")
        if how == "answer":
            _not_a_placeholder(rt.store, rec.run_id, request, text)
        register_run_secrets(rec)  # the loop's keys masked in the note and the answer
        # --resume of a run no spec file here loads: refused before the decision is made
        # (it was made, then the resume refused: an error for a decision that happened)
        loop = loop_for(rec) if resume_now else None
        names = {"by": "--by", "note": "--note", "request": "--request", "answer": "ANSWER"}
        with as_options(**names):
            if how == "answer":
                decided = rt.answer(
                    rec.run_id, text, by=who, note=note, approval_id=request, origin="cli"
                )
            else:
                fn = rt.approve if how == "approve" else rt.deny
                decided = fn(rec.run_id, by=who, note=note, approval_id=request, origin="cli")
        if decided.status == "pending":
            votes = rt.store.votes(decided.approval_id)
            need = int((decided.evidence.get("who") or {}).get("approvers") or 1)
            say(
                f"{who} approved {decided.approval_id} ({len(votes)} of {need} approvers); it "
                "waits for another person"
            )
            return
        say(
            f"{decided.status} {decided.approval_id} for run {rec.run_id[:12]} by "
            f"{decided.decided_by}"
            + (f": {decided.answer!r}" if decided.answer is not None else "")
        )
        if loop is not None:
            from ._interrupt import run_async

            result = run_async(rt.resume(rec.run_id, loop), [rec.run_id])
            _said_ended(result, rec.task_key)
            from ._tasks import exit_code_for

            raise typer.Exit(exit_code_for([result.status]))
        say(continue_hint(rec))


@app.command(short_help="Cancel a run; compensations of its effects are offered.")
def cancel(
    run_id: RunArg,
    by: Annotated[
        str | None,
        typer.Option(
            "--by",
            help="Who cancels, in a store without users (default: your OS user). With "
            "users, your --token says who.",
            callback=by_name,
        ),
    ] = None,
    store: StoreOpt = None,
    token: TokenOpt = None,
) -> None:
    """Cancel a run; the compensations of its completed effects are offered.

    A run executing elsewhere stops at its next commit, before any further effect. The
    compensations go through the approval policy and run on the next `loopwright resume`.
    """
    from .._contract import TERMINAL_STATUSES
    from .._engine import Runtime
    from ._say import say

    with Runtime(existing_store(store)) as rt:
        before = rt.store.get_run(run_id)
        if before.status in TERMINAL_STATUSES:
            raise ConfigError(
                f"run {before.run_id[:12]} already ended ({before.status}); nothing to cancel",
                field="RUN",
            )
        from ._people_cmd import acting_as

        who = acting_as(rt.store, by, token, action="cancel", target=f"run {before.run_id}")
        rec = rt.cancel(before.run_id, by=who, loop=loop_or_none(before), origin="cli")
        # counted, only when told (a run started from Python): not the run's every done
        # effect read to print their number (invariant 8)
        done = (
            rt.store.count_journal(rec.run_id, kind="effect", statuses=("done",))
            if rec.status == "cancelled" and not before.spec_ref
            else 0
        )
        reversal = _reversal(rt.store, rec.run_id)
        me = me_flag(rt.store)
    say(
        f"run {rec.run_id[:12]}: {rec.status}"
        + (
            ""
            if rec.status == "cancelled"
            # a cycle in flight ends as it ends: its success is not thrown away (concepts.md)
            else " (cancellation requested: it stops at its next cycle boundary; a cycle in "
            "flight that succeeds still ends it accepted)"
        )
    )
    _print_reversal(rec.run_id, reversal, done, "Runtime.cancel(run, loop=...)", me)


@app.command(short_help="Pause a run at its next cycle boundary, until a person unpauses it.")
def pause(
    run_id: RunArg,
    by: ByOpt = None,
    note: NoteOpt = None,
    store: StoreOpt = None,
    token: TokenOpt = None,
) -> None:
    """Pause a run: a request of kind `pause` is filed now (listed by `loopwright approvals`).
    A run executing elsewhere parks at its next cycle boundary (the cycle under way finishes,
    effects and all); one not executing parks now. No worker takes it until a person
    unpauses it (`loopwright unpause RUN`); it then goes on where it stopped. Who may pause is
    who may cancel."""
    from .._engine import Runtime
    from ._people_cmd import acting_as
    from ._say import say

    with Runtime(existing_store(store)) as rt:
        rec = rt.store.get_run(run_id)
        who = acting_as(rt.store, by, token, action="pause", target=f"run {rec.run_id}")
        with as_options(by="--by", note="--note"):
            filed = rt.pause(rec.run_id, by=who, note=note, origin="cli")
        now = rt.store.get_run(rec.run_id)
        me = me_flag(rt.store)
    short = rec.run_id[:12]
    say(
        f"run {short}: paused by {who} (request {filed.approval_id})"
        if now.status == "awaiting_approval"
        else f"run {short}: pause requested by {who} (request {filed.approval_id}): it parks at "
        "its next cycle boundary; the cycle under way finishes first"
    )
    # typable as printed: the store it was given (as the other hints: store_flag)
    say(f"let it go on with: loopwright unpause {short}{store_flag()}{me}")


@app.command(short_help="Let a paused run go on where it stopped.")
def unpause(
    run_id: RunArg,
    by: ByOpt = None,
    note: NoteOpt = None,
    resume_now: Annotated[bool, typer.Option("--resume", help="Continue the run now.")] = False,
    store: StoreOpt = None,
    token: TokenOpt = None,
) -> None:
    """Lift a run's pause (approve its `pause` request): a worker then takes it, or
    `loopwright resume RUN` continues it, where it stopped. Who may unpause is who may pause."""
    from .._engine import Runtime
    from ._people_cmd import acting_as
    from ._say import say

    with Runtime(existing_store(store)) as rt:
        rec = rt.store.get_run(run_id)
        who = acting_as(rt.store, by, token, action="unpause", target=f"run {rec.run_id}")
        loop = loop_for(rec) if resume_now else None  # (refused before the pause is lifted)
        with as_options(by="--by", note="--note"):
            lifted = rt.unpause(rec.run_id, by=who, note=note, origin="cli")
        say(f"unpaused run {rec.run_id[:12]} (request {lifted.approval_id}) by {who}")
        if loop is not None:
            from ._interrupt import run_async
            from ._tasks import exit_code_for

            result = run_async(rt.resume(rec.run_id, loop), [rec.run_id])
            _said_ended(result, rec.task_key)
            raise typer.Exit(exit_code_for([result.status]))
        left = rt.store.approvals(run_id=rec.run_id, status="pending")
        if left:
            say(f"it still waits on {len(left)} request(s): loopwright approvals{store_flag()}")
        else:
            say(continue_hint(rec))


def _reversal(store: Any, run_id: str) -> tuple[dict[str, Any], list[Any]]:
    """What a cancel or rollback left to undo: the ``compensations`` stage of the run's latest
    checkpoint (offers, each allowed, denied or awaiting a person, and the irreversible
    effects), and its pending compensation requests."""
    pending = store.latest_checkpoint(run_id).state.get("pending") or {}
    stage = pending if pending.get("stage") == "compensations" else {}
    asks = [a for a in store.approvals(run_id=run_id, status="pending") if a.kind == "compensation"]
    return stage, asks


def _print_reversal(
    run_id: str, reversal: tuple[dict[str, Any], list[Any]], unoffered: int, python: str, me: str
) -> None:
    """Say what will be undone, and how: an allowed compensation runs on the next resume (a
    refund, say), which the command used to leave unsaid, as it did the effects of a run
    started from Python that it could not offer (the CLI cannot load that run's loop)."""
    from ._say import say

    stage, asks = reversal
    rid = run_id[:12]
    if unoffered:
        say(
            f"{unoffered} completed effect(s) not offered for compensation: the run was "
            f"started from Python; use {python}",
            style="yellow",
        )
    for o in stage.get("offers") or ():
        what = f"{o.get('effect')} ({o.get('key')})"
        if o.get("action") == "allow":
            say(f"  undone on resume: {what} ({o.get('why')})")
        elif o.get("action") == "deny":
            say(f"  not undone: {what} ({o.get('why')})")
    for item in stage.get("irreversible") or ():
        say(f"  irreversible (no compensation): {item}")
    for a in asks:
        say(f"  compensation {a.approval_id}: {a.what}")
    if asks:
        say(
            f"decide each with: loopwright approve {rid} --request ID{me}{store_flag()} "
            f"(or deny), then: loopwright resume {rid}{store_flag()}"
        )


@app.command()
def rollback(
    run_id: RunArg,
    to_cycle: Annotated[
        int, typer.Option("--to-cycle", help="Restore the artifacts of this cycle's checkpoint.")
    ],
    by: ByOpt = None,
    store: StoreOpt = None,
    token: TokenOpt = None,
) -> None:
    """Restore an earlier cycle's artifacts and reopen the run.

    The compensations of the effects completed after that cycle are offered through the
    approval policy and run on the next `loopwright resume`.
    """
    from .._cancel_rollback import rollback_dropped
    from .._engine import Runtime
    from .._person_edits import said_dropped
    from ._say import say

    if to_cycle < 0:
        raise ConfigError("must be 0 or more", field="--to-cycle")
    with Runtime(existing_store(store)) as rt:
        rec = rt.store.get_run(run_id)
        from ._people_cmd import acting_as

        who = acting_as(rt.store, by, token, action="rollback", target=f"run {rec.run_id}")
        with as_options(to_cycle="--to-cycle", by="--by"):
            rec = rt.rollback(rec.run_id, to_cycle, by=who, loop=loop_or_none(rec), origin="cli")
        # (a run started from Python: its loop is not here to offer the later effects' undoing)
        done = (
            len(
                rt.store.journal_where(
                    rec.run_id, kind="effect", after_cycle=to_cycle, statuses=("done",)
                )
            )
            if not rec.spec_ref
            else 0
        )
        reversal = _reversal(rt.store, rec.run_id)
        dropped = rollback_dropped(rt.store, rec.run_id)
        me = me_flag(rt.store)
    say(f"run {rec.run_id[:12]}: rolled back to cycle {to_cycle}, now {rec.status}")
    if dropped:
        say(f"  replaces {said_dropped(dropped)}", style="yellow")
    _print_reversal(rec.run_id, reversal, done, "Runtime.rollback(run, N, by=..., loop=...)", me)
    if rec.status != "awaiting_approval":
        say(continue_hint(rec))


@app.command(short_help="Say whether an effect left in doubt happened (after checking).")
def settle(
    run_id: RunArg,
    key: Annotated[
        str,
        typer.Argument(
            metavar="KEY", help="The effect's key as the packet names it (or its name)."
        ),
    ],
    done: Annotated[
        bool | None,
        typer.Option(
            "--done/--not-done",
            help="It happened (recorded with --result) / it did not (its key kept for a redo).",
        ),
    ] = None,
    result: Annotated[
        str | None,
        typer.Option("--result", metavar="JSON", help="What it returned (--done; JSON)."),
    ] = None,
    by: ByOpt = None,
    note: NoteOpt = None,
    store: StoreOpt = None,
    token: TokenOpt = None,
) -> None:
    """Settle an effect of RUN left in doubt (a crash inside it, or a failure after it may
    have acted): --done records it done with --result (another run asking for the action, or
    a rollback's redo, reuses it); --not-done records it failed with its key kept (a redo runs
    it again). Then roll the run back to before its cycle and resume it."""
    from .._engine import Runtime
    from .._json import strict_loads
    from .._settle import settled_words
    from .._spec import register_run_secrets
    from ._people_cmd import acting_as
    from ._say import say

    if done is None:
        raise ConfigError("say what the outside world shows: --done or --not-done", field="KEY")
    if result is not None and not done:
        raise ConfigError("a result is for --done only", field="--result")
    value: Any = None
    if result is not None and result.strip() == "JSON":
        # (the advice of runs escalated before polish55 printed `--result JSON`)
        raise ConfigError(
            "JSON is the hint's placeholder: give what the effect returned, as JSON (say "
            """--result '{"id": "ch_1"}'), or leave --result out""",
            field="--result",
        )
    if result is not None:
        try:
            value = strict_loads(result)
        except ValueError as exc:
            raise ConfigError(f"is not JSON ({exc})", field="--result") from None
    with Runtime(existing_store(store)) as rt:
        rec = rt.store.get_run(run_id)
        who = acting_as(rt.store, by, token, action="settle_effect", target=f"run {rec.run_id}")
        register_run_secrets(rec)  # the loop's keys masked in the result and the note
        with as_options(by="--by", note="--note", key="KEY", done="--done", result="--result"):
            got = rt.settle_effect(
                rec.run_id, key, done=done, by=who, note=note, result=value, origin="cli"
            )
        said = settled_words(rt.store, got, rec.run_id, who)
    say(said)


def _said_ended(result: RunResult, task_key: str) -> None:
    """How a run driven by ``--resume`` ended and what next, as ``resume RUN`` says it (a
    parked run read "awaiting_approval (-)", with no word of what it waits for)."""
    from ._resume_cmd import next_steps
    from ._say import console, say, say_ended

    out = console()
    say_ended(result, task_key, out)
    for line in next_steps([result]):
        say(line, out=out)
