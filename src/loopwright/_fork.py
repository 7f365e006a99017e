"""Time travel and a person's hand: fork a run at a cycle, and edit a part by hand.

``Runtime.fork`` makes a new run whose state is an old run's state after cycle N (accepted parts
stay accepted and protected), linked to its origin; the origin is untouched. Its effects done up
to N are inherited (journaled under their keys in the fork, marked inherited, and — for business
keys — held store-wide), so the fork never does them again. The fork is created in one store
transaction, so a crash leaves either no fork or a whole one.

``Runtime.edit`` gives a part a new version authored by a person: accepted by definition
(over an accepted version too, recorded as an override), an ``edited`` event with the diff, a
note the next context shows, and an ``edit`` signal in the task's feedback memory. Verifiers
judge the state after the edit before the actor is asked again: the next cycle is a check-only
one (``_edit_check``), or, for a run parked on a request, the decided cycle judged again.
"""

from __future__ import annotations

import contextlib
import json
import re
import uuid
from collections.abc import Iterator, Mapping
from functools import partial
from typing import Any

from ._authority import audit, may_operate, refused
from ._cancel_rollback import retire_failures
from ._compare import contract_changes
from ._concluded import concluded_in, refuse_rewritten
from ._contract import TERMINAL_STATUSES, Contract, contract_from_snapshot
from ._decide import cycle_cap
from ._edit_check import mark_edited, replaced_version, unjudged, warn_unjudged
from ._errors import ConfigError, ConflictError
from ._exec import NO_LOOP as _NO_LOOP
from ._exec import Execution as _Exec
from ._fork_effects import warn_fork_effects
from ._host import RuntimeHost
from ._json import check_given_text, check_value
from ._keys import check_declared_name, check_key, check_unpadded, fit_key
from ._loop import Loop, check_loop, declared_names, other_loop
from ._people import printable_note
from ._person_turn import person_op
from ._proposal import Proposal
from ._redact import redact, redact_registered
from ._same_value import same_value
from ._state import TaskState, split_ref
from ._state_codec import head, unwritten_versions
from .store import JournalEntry, NewEvent, RunRecord, Store
from .store._base import with_newer
from .store._records import past_expiry

__all__ = ["Forking", "what_changed"]


class Forking(RuntimeHost):
    """``fork`` and ``edit`` (mixed into ``Runtime``)."""

    @person_op(leased=False)
    def fork(
        self,
        run_id: str,
        at_cycle: int,
        *,
        contract: Contract | None = None,
        loop: Loop | None = None,
        task_key: str | None = None,
        by: str | None = None,
        origin: str = "python",
        queue: bool = False,
    ) -> RunRecord:
        """A new run from the state ``run_id`` had after cycle ``at_cycle`` (0: its start),
        linked to it (``forked_from``/``forked_at``). ``contract`` (else ``loop``'s, else the
        origin's) governs it; ``loop`` names its loop (else the origin's). Run it with
        ``resume``. The origin is not changed. ``by``: who forks it (an operator, in a store
        with users; they are the new run's requester). The origin's effects up to the cycle
        are inherited, never done again; those after it with a run-scoped key (no ``key=``)
        are done again if the fork's cycles ask for them: a warning on the
        ``loopwright.runs`` logger names them. No worker claims the fork until it is started
        with ``resume`` (it is made to be edited or reviewed first), unless ``queue``: then
        any worker serving the store may start it at once."""
        given = check_key(task_key) if task_key is not None else None
        check_loop(loop, optional=True)
        if contract is not None and not isinstance(contract, Contract):
            raise ConfigError(
                f"must be a loopwright.Contract, got {type(contract).__name__}", field="contract"
            )
        if not isinstance(queue, bool):
            raise ConfigError("must be True or False", field="queue")
        if isinstance(at_cycle, bool) or not isinstance(at_cycle, int) or at_cycle < 0:
            # (before the audit: a call refused for its arguments is no fork "allowed")
            raise ConfigError("must be a cycle number (0 or more)", field="at_cycle")
        rec = self.store.get_run(run_id)
        on = f"run {rec.run_id}"
        who = may_operate(self.store, by, "fork", on, origin=origin)
        try:
            new = self._fork(rec, at_cycle, contract, loop, given, by, queue)
        except ConfigError as exc:
            # (a fork refused for what it asked — a cycle the run has not, another loop, a
            # taken key — was audited "allowed" first, though no run was made)
            refused(self.store, who, "fork", on, origin=origin, why=exc)
            raise
        # audited once made: the new run records who forked it and from where besides. A
        # changed contract is a change of policy (its risk rules pause a run for a person, its
        # budgets bound spend): the record says which settings changed, from what to what.
        changed = contract_changes(rec.contract or {}, new.contract or {}) or None
        audit(
            self.store,
            who,
            "fork",
            on,
            origin=origin,
            at_cycle=at_cycle,
            run=new.run_id,
            contract_changed=changed,
        )
        if origin != "cli":  # (the CLI says it itself, with what is inherited)
            # the origin's effects after the point with run-scoped keys: done again by the
            # fork if its cycles ask for them (effects53b: nothing said so)
            warn_fork_effects(self.store, rec.run_id, at_cycle, new.run_id)
        return new

    def _fork(
        self,
        rec: RunRecord,
        at_cycle: int,
        contract: Contract | None,
        loop: Loop | None,
        given: str | None,
        by: str | None,
        queue: bool = False,
    ) -> RunRecord:
        if loop is not None and other_loop(loop, rec.loop_name, rec.spec_ref):
            # Another loop's actor, contract and memory scope are not this run's: its state
            # would be labelled that loop, in this run's project (as `loopwright fork --spec`).
            raise ConfigError(
                f"is loop {loop.name!r}, not run {rec.run_id}'s loop {rec.loop_name!r}: fork "
                f"with that loop, or start a new run of {loop.name!r}",
                field="loop",
            )
        ck = concluded_in(self.store, rec.run_id, at_cycle, "at_cycle")
        refuse_rewritten(self.store, rec.run_id, ck, "at_cycle")
        state = ck.task_state()
        if loop is not None:
            if loop.name != rec.loop_name:  # (renamed: its spec the run's, a new run's name)
                check_unpadded(loop.name, "loop name", "name")
            _refuse_new_names(self.store, rec, state, loop)
        state.pending = None
        state.next_action = "resume"
        state.notes.append({"kind": "fork", "from_run": rec.run_id, "from_cycle": at_cycle})
        key = given or fit_key(rec.task_key, f"~fork-{uuid.uuid4().hex[:8]}")
        state.task_key = key
        chosen = contract or (loop.contract if loop is not None else None)
        if chosen is not None:
            chosen.refuse_for_a_run()  # as a loop refuses it
            # and as a loop gives it: a spend-only contract with the default cycle ceiling
            chosen = chosen.with_default_ceiling()
            cycle_cap(chosen, state)  # the task's own cycle budget, as ``create`` checks it
        else:
            # The origin's, kept: an older release let a run start under a budget of 0, which
            # ends the fork before its first cycle too.
            try:
                kept = contract_from_snapshot(rec.contract)
                kept.refuse_for_a_run()
            except ConfigError as exc:
                raise ConfigError(
                    f"run {rec.run_id}'s contract, which the fork would keep: {exc.message}; "
                    "give the fork a contract",
                    field=exc.field,
                ) from None
            # A run an earlier release started under a spend-only contract resumes under its
            # snapshot; a fork of it is a new run, given the default cycle ceiling.
            ceiled = kept.with_default_ceiling()
            chosen = ceiled if ceiled is not kept else None
        args: dict[str, Any] = {
            "run_id": uuid.uuid4().hex[:16],
            "task_key": key,
            "loop_name": loop.name if loop is not None else rec.loop_name,
            "project": rec.project,
            "spec_ref": loop.spec_ref if loop is not None else rec.spec_ref,
            "loop_version": loop.version if loop is not None else rec.loop_version,
            "contract": chosen.to_dict() if chosen is not None else rec.contract,
            "task": rec.task,
            "initial_state": head(state),
            "initial_versions": unwritten_versions(state, {})[0],
            "forked_from": (rec.run_id, at_cycle),
            "inherited": (),
            "initial_rejected": (),
            "created_by": by.strip() if by and by.strip() else None,
        }
        # Every version up to that cycle travels with the fork: the store copies its rows
        # (the versions held in memory written over them), none read into Python — a fork of
        # a long run held its every version (19.7 MiB at 2,000 cycles of 20 KB values, 2.3
        # at 200). So do the done effects up to it, marked inherited (a late fork of a run of
        # 20,000 effects decoded 19,998 entries, 38.6 MB), and the digests it rejected up to
        # it (19,998 rows read and written back). A store whose create_run predates
        # copy_effects and copy_rejected is given them as ``inherited`` and
        # ``initial_rejected``; one that predates copy_versions too, every version.
        copies = [(rec.run_id, ref, part.count) for ref, part in state.iter_parts()]
        copied: dict[str, Any] = {
            "copy_versions": copies or None,
            "copy_effects": (rec.run_id, at_cycle),
            "copy_rejected": (rec.run_id, at_cycle),
        }
        # The origin's checkpoint the fork starts from, recorded with it: what the fork
        # inherited is read up to it (trace._exports), not found by comparing the origin's
        # checkpoint times with the fork's, which two hosts' clocks may write apart. A store
        # whose create_run predates fork_seq is asked again without it (then found by time).
        # Its maker's to start (no worker claims it) unless queued; a store whose create_run
        # predates the mark is asked again without it (its workers claim the fork, as before).
        made: tuple[RunRecord, bool] | None = None
        if not queue:
            made = with_newer(
                self.store.create_run,
                args,
                {**copied, "fork_seq": ck.seq, "maker_starts": True},
            )
        if made is None:
            made = with_newer(self.store.create_run, args, {**copied, "fork_seq": ck.seq})
        if made is None:
            made = with_newer(self.store.create_run, args, copied)
        if made is None:
            args["inherited"] = self._inherited(rec.run_id, at_cycle)
            args["initial_rejected"] = self._rejected(rec.run_id, at_cycle)
            made = with_newer(self.store.create_run, args, {"copy_versions": copies or None})
        if made is None:
            for _ref, part in state.iter_parts():
                part.versions  # noqa: B018 - read from the store
            args["initial_versions"] = unwritten_versions(state, {})[0]
            made = self.store.create_run(**args)
        new, created = made
        if not created:
            raise ConfigError(f"task key {key!r} is taken by run {new.run_id}", field="task_key")
        return new

    def _rejected(self, run_id: str, at_cycle: int) -> list[tuple[str, int]]:
        """The digests ``run_id`` rejected up to ``at_cycle``, for a store whose
        ``create_run`` cannot copy them (one whose rejected_rows predates upto_cycle gives
        them all, cut here)."""
        kept: list[tuple[str, int]] | None = with_newer(
            self.store.rejected_rows, {"run_id": run_id}, {"upto_cycle": at_cycle}
        )
        if kept is None:
            kept = self.store.rejected_rows(run_id)
        return [(d, c) for d, c in kept if c <= at_cycle]

    def _inherited(self, run_id: str, at_cycle: int) -> list[JournalEntry]:
        """The done effects of ``run_id`` up to ``at_cycle``, for a store whose ``create_run``
        cannot copy them: read by status and cycle (the journal's index by cycle), not the
        origin's whole effects journal filtered here (invariant 8). A store whose
        journal_where predates upto_cycle gives the done ones; the cycle is cut here."""
        done: dict[str, Any] = {"run_id": run_id, "kind": "effect", "statuses": ("done",)}
        got: list[JournalEntry] | None = with_newer(
            self.store.journal_where, done, {"upto_cycle": at_cycle}
        )
        if got is None:
            got = [e for e in self.store.journal_where(**done) if e.cycle <= at_cycle]
        return got

    @person_op(leased=True)
    def edit(
        self,
        run_id: str,
        ref: str,
        value: Any,
        *,
        by: str,
        note: str | None = None,
        origin: str = "python",
    ) -> RunRecord:
        """A person's version of part ``ref`` (``artifact/part``): accepted, recorded (event
        with the diff, a note for the next context, an ``edit`` memory signal in the task's
        scope). An ended run is reopened so the loop continues from the edit (``resume``); a run
        parked on a request is edited beside it, except a part its parked proposal changes."""
        return self._edit(run_id, ref, value, by=by, note=note, origin=origin)[0]

    def _edit(
        self,
        run_id: str,
        ref: str,
        value: Any,
        *,
        by: str,
        note: str | None = None,
        origin: str = "python",
    ) -> tuple[RunRecord, str | None]:
        """``edit``, and why a resume will not judge the edit (``_edit_check.unjudged``; None:
        it will be), as the edit found it under its lease: what the CLI and the dashboard say
        (read again after the commit, it was worked out twice, and a worker that took the run
        meanwhile could make it say nothing)."""
        if not isinstance(by, str) or not by.strip():
            raise ConfigError("say who edits (a name)", field="by")
        artifact, name = split_ref(ref)
        check_value(value, field="value")  # what the person gave is what is stored...
        # ...but for the process's own API keys (``register_secret``), masked as an actor's
        # edit is (``Proposal.unregistered``): a key pasted into the work is not stored either
        value = redact_registered(value)
        check_given_text(note, field="note")
        # held to a decision's and a pause's rule (an escape or a bidirectional control went
        # into the append-only log, the run's notes and the actor's next context as typed)
        note = printable_note(note)
        rec = self.store.get_run(run_id)
        on = f"run {rec.run_id}"
        # Audited once it is known to happen (newuser47): an edit refused for what it asked
        # was recorded "allowed" first, and its author then counted as a requester of the
        # run's payments (separation of duties), though nothing was edited.
        who = may_operate(self.store, by, "edit", on, origin=origin)
        audited = False
        busy = f"run {rec.run_id} is executing elsewhere; edit it when it parks or ends"
        token = self._lease_or_refused(rec.run_id, who, "edit", origin=origin, busy=busy, part=ref)
        try:
            with self._holding(rec.run_id, token):
                # Read again under the lease: whether the edit reopens the run is its status now,
                # not before the lease (a run that ended meanwhile was edited and left ended, its
                # edit never judged; attack47).
                rec = self.store.get_run(rec.run_id)
                ck = self.store.latest_checkpoint(rec.run_id)
                ex = _Exec(
                    rec.run_id,
                    _NO_LOOP,
                    contract_from_snapshot(rec.contract),
                    token,
                    ck.seq,
                    TaskState.from_dict(ck.state),
                )
                ex.adopt(self.store, ck.state)
                s = ex.state
                # A run parked on a request can be edited beside it (its pending proposal is
                # applied on top when decided), except a part that proposal itself changes.
                held: dict[str, Any] = {}
                if s.pending and s.pending.get("stage") == "effects":
                    # The process died while this cycle's effects ran: resuming applies the cycle's
                    # stored proposal, which would write over the person's version unasked.
                    raise ConflictError(
                        f"run {rec.run_id} stopped during the effects of cycle "
                        f"{s.pending.get('cycle')}: resume it to finish them (each is journaled, "
                        "none runs twice), then edit"
                    )
                if s.pending and "approval_id" in s.pending:
                    pend = s.pending.get("proposal") or {}
                    if not s.pending.get("question_only") and ref in {
                        e.ref for e in Proposal.from_dict(pend).changes()
                    }:
                        raise ConfigError(
                            f"run {rec.run_id} waits for a decision on a change to {ref}: decide "
                            "it (approve or deny) first, then edit",
                            field="part",
                        )
                    # the parked cycle's held-out verdicts wait in the latest record: keep them
                    held = {"held_out": (ck.record or {}).get("held_out") or {}}
                    # ...but they, and its visible verdicts, judged the state before this edit: the
                    # decided cycle is judged again (Parking._judge_again)
                part = s.part(ref)
                if part is None:
                    known = ", ".join(r for r, _p in s.iter_parts()) or "none"
                    raise ConfigError(
                        f"no part {ref!r} in run {rec.run_id} (parts: {known})", field="part"
                    )
                old, was = part.value, part.status
                if same_value(old, value):
                    raise ConfigError("is the part's current value already", field="value")
                audit(self.store, who, "edit", on, origin=origin, part=ref, note=note)
                audited = True
                # Judged before the actor is asked again: the parked cycle once decided, else a
                # check-only cycle next (``_edit_check``), owed in this commit.
                # (with the version it replaces: the effects that ran with it are said once
                # it is judged, ``effects_behind``)
                s.pending = mark_edited(
                    s.pending, ref, partial(replaced_version, self.store, rec.run_id, ref, part)
                )
                s.set_part(artifact, name, value, s.cycle)
                s.set_status(ref, "accepted")  # a person's version is accepted by definition
                part = s.part(ref)
                assert part is not None
                s.refresh_plan()
                changed = what_changed(old, value)
                override = was == "accepted"
                what = {
                    "part": ref,
                    "version": part.count,
                    "by": by.strip(),
                    "note": note or "",
                    "changed": changed,
                    "override": override,
                }
                # The next context shows it; stored masked (invariant 9: a person's note, and what
                # changed, can quote a secret). The value itself is the work, stored as given.
                what = redact(what)
                # (its cycle: the one a rollback goes back to for the version before it, named
                # by the advice when the loop would overwrite it, ``_gates.edit_kept``)
                s.notes.append({"kind": "edit", **what, "cycle": s.cycle})
                # (made while a request waits: its card says so, ``_reuse_now.as_now``)
                beside = (
                    {"approval_id": s.pending["approval_id"]} if "approval_id" in s.pending else {}
                )
                ex.events.append(
                    NewEvent(s.cycle, "edited", {**what, "diff": _diff(old, value), **beside})
                )
                reopen = rec.status in TERMINAL_STATUSES
                run: dict[str, Any] = {}
                # A budget its checks may spend used up: the check-only cycle cannot run (a cycle
                # cap reached does not stop it). Said now, and recorded, not found out on resume.
                blocked = unjudged(rec.run_id, ex.contract, s)
                if blocked is not None:
                    ex.events.append(
                        NewEvent(s.cycle, "edit_unjudged", {"part": ref, "why": blocked})
                    )
                if reopen:
                    s.next_action = blocked or "resume: the loop goes on from the person's edit"
                    retire_failures(self.store, ex, effects=False)
                    # Its refunds still waiting for a person (a cancel's, some reused): parked on
                    # them, as a rollback that offers them parks; "pending", every worker's poll
                    # claimed it and found it still waiting (attack47). A request expired on the
                    # store's clock waits for nobody (``run_compensations`` settles it expired):
                    # parked on it, no worker took the run until a person resumed it (review48a).
                    waits = (s.pending or {}).get("stage") == "compensations" and _open_requests(
                        self.store, rec.run_id
                    )
                    run = {
                        "status": "awaiting_approval" if waits else "pending",
                        "stop_reason": None,
                        "packet": None,
                        "ended_at": None,
                        "held_out_passed": None,
                        "held_out_self_reported": None,
                        "cancel_requested": 0,
                    }
                self._commit(
                    ex,
                    {
                        "decision": "edit",
                        "part": ref,
                        "version": part.count,
                        "by": by.strip(),
                        **held,
                    },
                    run,
                )
        except (ConfigError, ConflictError) as exc:
            if not audited:
                refused(self.store, who, "edit", on, origin=origin, why=exc, part=ref)
            raise
        if blocked is not None and origin != "cli":  # (the CLI prints it itself)
            warn_unjudged(blocked)
        if self.memory_enabled and s.task_key:
            text = f"{by.strip()} edited {ref}: changed {', '.join(changed) or 'the value'}"
            if note:
                text += f" ({note})"
            # memory is best effort: the edit itself is committed
            with contextlib.suppress(ConfigError):
                self.memory.add(
                    scope="task",
                    scope_key=s.task_key,
                    signal="edit",
                    text=text,
                    source={"run_id": rec.run_id, "part": ref, "version": part.count},
                    by=by.strip(),
                )
        return self.store.get_run(rec.run_id), blocked


_ID = re.compile(r"""\bid=["']([^"']+)["']""")


def _refuse_new_names(store: Store, rec: RunRecord, state: TaskState, loop: Loop) -> None:
    """``check_declared_names`` for the loop a fork is given, as ``Runtime.create`` asks it of
    a new run's: a fork is a new run, and its loop may be another version than the origin's
    (an edited spec, another ``Loop``), declaring a verifier, an effect or a risk rule under
    a bidirectional control or an invisible character. A name the origin holds is let be
    (review49c: an earlier release's run is forked with the loop declaring its names): one
    its contract, its history, its calls, its effects journal or its requests name."""
    refused = []
    for name, what, field in declared_names(loop):
        try:
            check_declared_name(name, what, field)
        except ConfigError as why:
            refused.append((name, why))
    if not refused:
        return
    # (read only here, where a name is refused: never on a fork of a clean loop). A name is
    # held whole: a risk rule's or a required check's in the contract, a request's rule, the
    # effect and the scores its evidence names, a call billed ("verifier:c"), an effect done.
    # Found as a part of any text (a request's words), a padded "apply " passed as held.
    journal = store.journal(rec.run_id, kind="effect")
    requests = [[a.rule, a.evidence] for a in store.approvals(run_id=rec.run_id)]
    held = set(_texts([rec.contract, requests]))
    held.update(scope.partition(":")[2] for scope in state.billed)
    for e in journal:
        held.add(str(e.data.get("name", "")))
        held.add(e.key.removeprefix("effect:").rpartition(":")[0])  # (effect:NAME:digest)
    held.discard("")  # ("actor" billed, an entry without a name: no name held)
    for name, error in refused:
        if name not in held:
            raise error


def _texts(value: Any) -> Iterator[str]:
    """Every string in ``value`` (a JSON-like value: dict keys too)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            yield item
        elif isinstance(item, Mapping):
            stack += [*item.keys(), *item.values()]
        elif isinstance(item, list | tuple):
            stack += item


def _open_requests(store: Store, run_id: str) -> bool:
    """Whether ``run_id`` has a request a person can still decide: pending, and not expired
    on the store's clock (one expired is settled as expired by whoever resumes the run)."""
    pending = store.approvals(run_id=run_id, status="pending")
    now = store.clock() if pending else 0.0
    return any(not past_expiry(a.expires_at, now) for a in pending)


def what_changed(old: Any, new: Any) -> list[str]:
    """What a person changed: the fields of a mapping, the elements (by id) of an SVG, else the
    lines of a text (as ``line N``)."""
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        keys = sorted({*old, *new}, key=str)
        return [str(k) for k in keys if not same_value(old.get(k), new.get(k))]
    if isinstance(old, str) and isinstance(new, str):
        if "<svg" in old and "<svg" in new:
            return _svg_changes(old, new)
        import difflib  # (a person's edit of a text: not at import, suite53)

        a, b = old.splitlines(), new.splitlines()
        out = []
        for tag, i1, i2, _j1, _j2 in difflib.SequenceMatcher(a=a, b=b).get_opcodes():
            if tag != "equal":
                out.append(f"line {i1 + 1}" if i2 - i1 <= 1 else f"lines {i1 + 1}-{i2}")
        return out
    return ["value"]


def _svg_changes(old: str, new: str) -> list[str]:
    """Ids of the SVG elements whose markup differs (added, removed or changed)."""

    def elements(svg: str) -> dict[str, str]:
        out = {}
        for m in re.finditer(r"<[^<>]+>", svg):
            idm = _ID.search(m.group(0))
            if idm:
                out[idm.group(1)] = m.group(0)
        return out

    a, b = elements(old), elements(new)
    ids = [i for i in sorted({*a, *b}) if a.get(i) != b.get(i)]
    return [f"#{i}" for i in ids] or ["the picture"]


def _diff(old: Any, new: Any) -> str:
    def lines(v: Any) -> list[str]:
        text = v if isinstance(v, str) else json.dumps(v, indent=1, sort_keys=True, default=str)
        return text.splitlines()

    import difflib

    out = "\n".join(
        difflib.unified_diff(lines(old), lines(new), "before", "after", lineterm="", n=1)
    )
    return out[:4000]
