"""Invariant 9 where text enters the store outside a cycle's record: what an effect is given,
returns or raises, what a waiting run keeps (the proposal's note, the approval request), and
what a person types (an answer, a note) reaches the store masked — or, for a secret in an
effect's arguments, which are journaled and used again after a crash as they are, the effect
is not run at all and a person is asked why the actor put one there.

Secrets are planted in each place, then the database files are searched for them byte by byte.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from doc_loop import TARGET, TASK, fields

import loopwright as lw
from loopwright._redact import REDACTED
from loopwright.cli import main
from loopwright.trace import otlp_trace

SHAPED = "sk-planted-effect-0123456789abcdef"  # a key's shape: masked wherever it is
URL_PW = "planted-url-pw-4411"  # masked as the password of a URL
BY_NAME = "planted-by-name-9c0d"  # masked as the value of an argument named like a secret


def _stored(tmp: Path, secrets: tuple[str, ...]) -> list[str]:
    raw = b"".join(p.read_bytes() for p in tmp.iterdir() if p.name.startswith("s.db"))
    return [s for s in secrets if s.encode() in raw]


class Recorder:
    """Effect functions that record their calls; ``ok`` echoes secrets back, ``boom`` raises
    with one in its message."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def ok(self, to: str, token: str = "", url: str = "") -> dict[str, Any]:
        self.calls.append(("ok", {"to": to, "token": token, "url": url}))
        return {"echo": SHAPED, "login": f"https://ann:{URL_PW}@mail.example/"}

    def boom(self, to: str) -> None:
        self.calls.append(("boom", {"to": to}))
        raise ValueError(f"the mail server refused key {SHAPED}")


def _loop(rec: Recorder, actor: Any, action: str, **kw: Any) -> lw.Loop:
    allow = lw.ApprovalPolicy((lw.PolicyRule(kind="send", action=action, name="mail"),))
    return lw.Loop(
        name="mail",
        actor=actor,
        verifiers=[fields],
        contract=lw.Contract(budget=lw.Budget(max_cycles=kw.pop("max_cycles", 2))),
        effects=[
            lw.effect(kind="send", requires_success=False)(rec.ok),
            lw.effect(kind="send", requires_success=False)(rec.boom),
        ],
        approvals=allow,
        retry=lw.RetryPolicy(attempts=1),
        **kw,
    )


def test_an_effect_call_with_a_secret_in_its_arguments_is_not_run(tmp_path: Path) -> None:
    rec = Recorder()

    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal(
            edits=lw.Proposal.edit("doc", TARGET).edits,
            effects=(
                lw.EffectCall("ok", {"to": "ann", "url": f"https://ann:{URL_PW}@x.example/"}),
                lw.EffectCall("ok", {"to": "bob", "token": BY_NAME}),
                lw.EffectCall("ok", {"to": f"carol {SHAPED}"}),
            ),
        )

    with lw.Runtime(tmp_path / "s.db") as rt:
        r = rt.run_sync(_loop(rec, actor, "allow"), TASK)
        journal = rt.store.journal(r.run_id, kind="effect")
    assert (r.status, r.stop_reason, r.cycles) == ("escalated", "escalated", 0)
    assert rec.calls == [] and journal == []  # nothing run, nothing journaled
    cause = str((r.packet or {}).get("cause"))
    assert "secret in their arguments: ok (to, token, url)" in cause
    assert _stored(tmp_path, (SHAPED, URL_PW, BY_NAME)) == []


def test_effect_results_errors_and_a_waiting_runs_text_are_stored_masked(tmp_path: Path) -> None:
    rec = Recorder()
    seen: list[tuple[Any, ...]] = []

    def actor(ctx: lw.Context) -> lw.Proposal:
        seen.append(tuple(ctx.notes))
        return lw.Proposal(
            edits=lw.Proposal.edit("doc", TARGET).edits,
            note=f"sending with {SHAPED}",
            effects=(lw.EffectCall("ok", {"to": "ann"}), lw.EffectCall("boom", {"to": "bob"})),
        )

    with lw.Runtime(tmp_path / "s.db") as rt:
        # one run performs both effects at once; one waits for a person first
        now = rt.run_sync(_loop(rec, actor, "allow"), TASK, task_key="now")
        parked = rt.run_sync(_loop(rec, actor, "require"), TASK, task_key="parked")
        assert parked.status == "awaiting_approval"
        [req] = rt.store.approvals(run_id=parked.run_id)
        assert SHAPED not in repr(req) and "sending with ***" in repr(req.evidence)
        rt.approve(parked.run_id, by="ann")
        later = rt.resume_sync(parked.run_id, _loop(rec, actor, "require"))
        journal = [e.data for r in (now, later) for e in rt.store.journal(r.run_id)]
    # both runs ran both effects with their real arguments; ``boom`` failed and escalated
    assert [c[0] for c in rec.calls] == ["ok", "boom", "ok", "boom"]
    assert (now.stop_reason, later.stop_reason) == ("escalated", "escalated")
    results = [d["result"] for d in journal if "result" in d]
    assert results == [{"echo": "***", "login": "https://***@mail.example/"}] * 2
    causes = [d["cause"] for d in journal if d.get("cause")]
    assert len(causes) == 2 and all("refused key ***" in c for c in causes)
    # what the run keeps is what it was told: the effect's note holds the masked result
    notes = [n for r in (now, later) for n in r.state.notes if n.get("kind") == "effect"]
    assert {str(n.get("result")) for n in notes if n.get("status") == "done"} == {str(results[0])}
    assert _stored(tmp_path, (SHAPED, URL_PW)) == []


def test_the_next_cycle_sees_the_result_as_it_was_stored(tmp_path: Path) -> None:
    """Masked where it is made: the actor's next context shows the result as the store holds
    it, so a run resumed from the store is told the same."""
    rec = Recorder()
    seen: list[Any] = []

    def actor(ctx: lw.Context) -> lw.Proposal:
        seen.append([n.get("result") for n in ctx.notes if n.get("kind") == "effect"])
        return lw.Proposal(note="look", effects=(lw.EffectCall("ok", {"to": f"ann {ctx.cycle}"}),))

    with lw.Runtime(tmp_path / "s.db") as rt:
        r = rt.run_sync(_loop(rec, actor, "allow", max_cycles=2), TASK)
    assert r.cycles == 2 and len(rec.calls) == 2
    assert seen[1] == [{"echo": "***", "login": "https://***@mail.example/"}]
    assert _stored(tmp_path, (SHAPED, URL_PW)) == []


def test_what_a_person_types_is_stored_masked(tmp_path: Path) -> None:
    """An answer and an approval note holding a secret: the request, its event, the audit log
    and the run's notes hold them masked, and the actor is told the masked answer."""
    told: list[Any] = []

    def actor(ctx: lw.Context) -> lw.Proposal:
        told.extend(n.get("answer") for n in ctx.notes if n.get("kind") == "answer")
        if ctx.cycle == 1:
            return lw.Proposal(question=lw.Question("Which account?"))
        return lw.Proposal.edit("doc", TARGET)

    risk = (lw.RiskRule(name="touch_c", touches=("doc/c",), reason="c moves money"),)
    loop = lw.Loop(
        name="asks",
        actor=actor,
        verifiers=[fields],
        contract=lw.Contract(budget=lw.Budget(max_cycles=4), risk=risk),
    )
    with lw.Runtime(tmp_path / "s.db") as rt:
        r = rt.run_sync(loop, TASK)
        rt.answer(r.run_id, f"the one with key {SHAPED}", by="ann")
        r = rt.resume_sync(r.run_id, loop)
        assert r.status == "awaiting_approval"
        rt.approve(r.run_id, by="bob", note=f"fine, password={URL_PW}")
        r = rt.resume_sync(r.run_id, loop)
        decided = [(a.answer, a.note) for a in rt.store.approvals(run_id=r.run_id)]
    assert r.status == "accepted"
    assert decided == [("the one with key ***", None), (None, "fine, password=***")]
    assert told and set(told) == {"the one with key ***"}
    assert _stored(tmp_path, (SHAPED, URL_PW)) == []


def test_feedback_and_an_edit_note_are_stored_masked(tmp_path: Path) -> None:
    """A person's correction, a reflector's note echoing a key, and a person's edit note: what
    memory keeps, indexes and shows later actors is masked, and so is the edit's note in the
    run's notes. The same note reflected twice is still kept once."""

    def reflector(ctx: lw.Context, verdicts: Any) -> str:
        return f"the key {SHAPED} did not work"

    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal.edit("doc", {"a": ctx.cycle})

    loop = lw.Loop(
        name="reflects",
        actor=actor,
        verifiers=[fields],
        reflector=reflector,
        contract=lw.Contract(budget=lw.Budget(max_cycles=3)),
    )
    with lw.Runtime(tmp_path / "s.db") as rt:
        r = rt.run_sync(loop, TASK, task_key="k")
        rt.memory.add(
            scope="project",
            scope_key="p",
            signal="correction",
            text=f"connect with https://ann:{URL_PW}@db.example/",
            rule={"password": BY_NAME},
            by="ann",
        )
        rt.edit(r.run_id, "doc/b", 2, by="ann", note=f"token {SHAPED}")
        notes = list(rt.store.latest_checkpoint(r.run_id).task_state().notes)
        items = rt.store.memory_query()
    reflections = [m for m in items if m["signal"] == "reflection"]
    assert [m["text"] for m in reflections] == ["the key *** did not work"]  # kept once
    [correction] = [m for m in items if m["signal"] == "correction"]
    assert (correction["text"], correction["rule"]) == (
        "connect with https://***@db.example/",
        {"password": "***"},
    )
    assert [n["note"] for n in notes if n.get("kind") == "edit"] == ["token ***"]
    assert _stored(tmp_path, (SHAPED, URL_PW, BY_NAME)) == []


def test_objects_memory_sources_traces_and_cli_errors_are_masked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """What is not text (an exception or an object in a verdict's evidence) is stored as its
    text, masked; an exception given as a finding's message is refused (Finding.message is
    text), and the escalation that says so, which quotes it, is masked; a memory item's source
    is masked; the
    OpenTelemetry export masks what the store holds as given (a task key is a name, stored as
    typed); the command line masks an error a user's factory raised with its options."""

    class Conn:
        def __repr__(self) -> str:
            return f"Conn(dsn='postgresql://app:{URL_PW}@db.example/x')"

    def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        down = ConnectionError(f"cannot reach postgresql://app:{URL_PW}@db.example/x")
        return lw.Verdict(
            passed=False,
            score=0.5,
            findings=(lw.Finding(f"{down}", "doc", "a", "content"),),
            evidence={"error": down, "conn": Conn()},
        )

    def exception_as_message(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        down = ConnectionError(f"cannot reach postgresql://app:{URL_PW}@db.example/x")
        return lw.Verdict(passed=False, findings=(lw.Finding(down),))  # type: ignore[arg-type]

    loop = lw.Loop(
        name="objects",
        actor=lambda ctx: lw.Proposal.edit("doc", {"a": ctx.cycle}),
        verifiers=[lw.Check(fn=check, name="check")],
        contract=lw.Contract(budget=lw.Budget(max_cycles=2)),
    )
    db = tmp_path / "s.db"
    with lw.Runtime(db) as rt:
        r = rt.run_sync(loop, TASK, task_key=f"k-{SHAPED}")
        rt.memory.add(
            scope="task",
            scope_key="t",
            signal="correction",
            text="see the source",
            source={"url": f"https://u:{URL_PW}@h/x", "token": BY_NAME},
            by="ann",
        )
        exported = json.dumps(otlp_trace(rt.store, r.run_id))
        refused = rt.run_sync(
            lw.Loop(
                name="message",
                actor=lambda ctx: lw.Proposal.edit("doc", {"a": 1}),
                verifiers=[lw.Check(fn=exception_as_message, name="check")],
                contract=lw.Contract(budget=lw.Budget(max_cycles=2)),
            ),
            TASK,
        )
    assert (r.status, r.stop_reason, r.cycles) == ("stopped", "budget_cycles", 2)  # no crash
    assert refused.status == "escalated" and refused.packet is not None
    assert "Finding.message: must be a string, got ConnectionError" in refused.packet["cause"]
    assert _stored(tmp_path, (URL_PW, BY_NAME)) == []
    assert SHAPED in "".join(p.read_text("latin-1") for p in tmp_path.glob("s.db*"))
    assert SHAPED not in exported and f"k-{REDACTED}" in exported

    (tmp_path / "badmod.py").write_text(
        "def make(api_key, base_url):\n"
        "    raise ValueError(f'cannot reach {base_url} with key {api_key}')\n"
    )
    (tmp_path / "bad.toml").write_text(
        'name = "bad"\n[actor]\nref = "badmod.py:make"\n'
        f'options = {{ api_key = "{SHAPED}", base_url = "https://u:{URL_PW}@h/" }}\n'
    )
    assert main(["check", str(tmp_path / "bad.toml")]) == 2
    err = capsys.readouterr().err
    assert "cannot reach https://***@h/ with key ***" in err
    assert SHAPED not in err and URL_PW not in err


def test_keys_with_a_space_after_the_name_are_masked_and_stop_an_effect(tmp_path: Path) -> None:
    """A key named like a secret with a space or tab after its name (``"github_token "``) was
    passed over by the fast path of the masking: the task, a finding's evidence and an effect's
    arguments were stored in clear, and the effect ran. Now the task and the evidence are
    stored masked, and the call holding the key is not run."""
    in_task, in_evidence, in_args = "planted-task-2c1f", "planted-evidence-8a", "planted-arg-51e0"
    rec = Recorder()

    def actor(ctx: lw.Context) -> lw.Proposal:
        pay = (lw.EffectCall("ok", {"to": {"stripe_secret\t": in_args}}),)
        return lw.Proposal(
            edits=lw.Proposal.edit("doc", TARGET).edits, effects=pay if "pay" in ctx.task else ()
        )

    def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        finding = lw.Finding("f", "doc", "a", "value", evidence={"aws_access_key ": in_evidence})
        return lw.Verdict(passed=False, score=0.5, findings=(finding,))

    base = _loop(rec, actor, "allow")
    loop = lw.Loop(
        name="spaces",
        actor=actor,
        verifiers=[lw.Check(fn=check, name="check")],
        contract=base.contract,
        effects=base.effects,
        approvals=base.approvals,
    )
    with lw.Runtime(tmp_path / "s.db") as rt:
        paid = rt.run_sync(loop, {**TASK, "pay": 1, "creds": {"github_token ": in_task}})
        checked = rt.run_sync(loop, TASK)
        stored_task = rt.store.get_run(paid.run_id).task
    assert (paid.status, paid.stop_reason, paid.cycles) == ("escalated", "escalated", 0)
    assert rec.calls == []
    assert "secret in their arguments: ok (to)" in str((paid.packet or {}).get("cause"))
    assert stored_task["creds"] == {"github_token ": REDACTED}
    assert checked.cycles == 2  # the verifier's evidence was recorded twice
    assert _stored(tmp_path, (in_task, in_evidence, in_args)) == []


def test_errors_quoting_mappings_and_encoded_secrets_are_stored_masked(tmp_path: Path) -> None:
    """An actor's and an effect's error whose message prints a mapping inside a printed
    string (its quotes escaped), a declared secret field's value, or a known secret beyond
    ASCII as its UTF-8 bytes: each was in the database file in clear."""
    lw.register_secret_field("iban")
    lw.register_secret("pässwort-Planted-31")
    inner = repr('said "no": ' + repr({"password": "planted-pw-32", "token": "planted-tk-33"}))
    message = f"{inner} { ({'iban': 'planted-iban-34'}) } {'pässwort-Planted-31'.encode()}"
    planted = ("planted-pw-32", "planted-tk-33", "planted-iban-34", "Planted-31")

    class Quoting(Recorder):
        def boom(self, to: str) -> None:
            raise ValueError(message)

    def failing(ctx: lw.Context) -> lw.Proposal:
        raise RuntimeError(message)

    def paying(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal(
            edits=lw.Proposal.edit("doc", TARGET).edits,
            effects=(lw.EffectCall("boom", {"to": "bob"}),),
        )

    with lw.Runtime(tmp_path / "s.db") as rt:
        for key, actor in (("actor", failing), ("effect", paying)):
            r = rt.run_sync(_loop(Quoting(), actor, "allow"), TASK, task_key=key)
            assert r.stop_reason == "escalated", key
    assert _stored(tmp_path, planted) == []
