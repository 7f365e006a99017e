"""A registered value (``register_secret``: the process's own API key) pushed through every path
text takes into the store or out of it — an actor's edits, plan steps, note and question, a
verifier's findings and evidence, a person's answer, edit and note, feedback memory, the
run-end webhook's body, the exports and the OpenTelemetry spans — and then looked for, whole
and as any 16-character piece in any case, in the database's bytes and in every output
(invariant 9; docs/security.md, "Which values are masked where")."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from doc_loop import TASK

import loopwright as lw
from loopwright._redact_runs import RUN_MIN
from loopwright.cli import main
from loopwright.trace import otlp_trace
from loopwright.web._notify import Notifier, NotifyConfig
from loopwright.web._notify_bodies import run_end_body

# No shape of a key, no secret-looking name near it: only the registry knows it.
KEY = "Zq7Lm2Xp9Rt4Vb6Nc8Hd3Jf5Kg1Ws0Ye"


def _pieces() -> list[str]:
    """Every piece of ``KEY`` the registry must mask (``RUN_MIN`` characters or more), lower
    case: the texts searched are lower-cased too."""
    low = KEY.lower()
    return [low[i : i + RUN_MIN] for i in range(len(low) - RUN_MIN + 1)]


def _leaks(text: str) -> list[str]:
    low = text.lower()
    return [p for p in _pieces() if p in low]


def _stored_text(url: str, tmp: Path) -> str:
    """Everything the store holds: an SQLite database's bytes (its journal's too, read as
    Latin-1: one character a byte), or every row of every table of a PostgreSQL schema."""
    if url.startswith("sqlite"):
        return "".join(p.read_bytes().decode("latin-1") for p in tmp.iterdir() if "s.db" in p.name)
    import psycopg
    from psycopg import sql

    base, _, schema = url.rpartition("schema=")
    rows: list[str] = []
    with psycopg.connect(base.rstrip("?&"), autocommit=True) as conn:
        tables = conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s", (schema,)
        ).fetchall()
        for (table,) in tables:
            query = sql.SQL("SELECT t::text FROM {}.{} t").format(
                sql.Identifier(schema), sql.Identifier(table)
            )
            rows += [r[0] for r in conn.execute(query)]
    assert rows
    return "\n".join(rows)


def test_a_registered_key_reaches_no_stored_row_and_no_output(
    url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lw.register_secret(KEY)
    upper = KEY[3:23].upper()  # a piece of 20, upper-cased (an echo that changed it)

    def actor(ctx: lw.Context) -> lw.Proposal:
        if ctx.cycle == 1:
            return lw.Proposal(question=lw.Question(f"Is {KEY} the key to use?"))
        return lw.Proposal(
            edits=(lw.Edit("doc", "a", f"key {KEY}"),),
            new_steps=(lw.PlanStep(id="rotate", title=f"rotate {upper}"),),
            note=f"I used {KEY[:18]}",
        )

    def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(
            passed=False,
            score=0.5,
            findings=(lw.Finding(f"remove {upper} from a", "doc", "a", "content"),),
            evidence={"saw": f"...{KEY[-17:]}"},
        )

    def reflector(ctx: lw.Context, verdicts: Any) -> str:
        return f"do not write {KEY} again"

    loop = lw.Loop(
        name="everywhere",
        actor=actor,
        verifiers=[lw.Check(fn=check, name="check")],
        reflector=reflector,
        contract=lw.Contract(budget=lw.Budget(max_cycles=3)),
    )
    posted: list[bytes] = []
    with lw.Runtime(url) as rt:
        r = rt.run_sync(loop, TASK, task_key="k")
        assert r.status == "awaiting_approval"
        rt.answer(r.run_id, f"yes, {KEY}", by="ann", note=f"it is {upper}")
        r = rt.resume_sync(r.run_id, loop)
        rt.memory.add(
            scope="task", scope_key="k", signal="correction", text=f"never {upper}", by="ann"
        )
        rt.edit(r.run_id, "doc/b", f"typed {KEY}", by="ann", note=f"pasted {upper}")
        rt.edit(r.run_id, "doc/c", {"nested": [f"{KEY[5:25]}"]}, by="ann")
        rec = rt.store.get_run(r.run_id)
        spans = json.dumps(otlp_trace(rt.store, r.run_id))
        notifier = Notifier(
            rt.store,
            NotifyConfig.of(["https://hooks.example/x"], run_ends=True),
            post=lambda url, body, headers, timeout: posted.append(body) or 200,
        )
        body = run_end_body(rec, None)
        notifier._send(notifier._targets[0], "k", "run_ended", body)
    assert _leaks(_stored_text(url, tmp_path)) == []
    assert _leaks(spans) == []
    assert posted and _leaks(b"".join(posted).decode()) == []
    capsys.readouterr()
    outputs = []
    for args in (
        ["show", r.run_id, "--json"],
        ["trace", r.run_id],
        ["export", "eval-cases"],
        ["export", "preference-pairs"],
    ):
        assert main([*args, "--store", url]) == 0, args
        outputs.append(capsys.readouterr().out)
    assert [_leaks(o) for o in outputs] == [[]] * len(outputs)


def test_the_webhooks_body_is_masked_as_an_export_is(tmp_path: Path) -> None:
    """The run-end and approval webhooks quote the task key, which the store keeps as typed (a
    name: docs/security.md): the body posted is masked, as the exports are."""
    lw.register_secret(KEY)
    risk = (lw.RiskRule(name="touch_a", touches=("doc/a",), reason="a moves money"),)
    loop = lw.Loop(
        name="hooks",
        actor=lambda ctx: lw.Proposal.edit("doc", {"a": 1}),
        verifiers=[lw.Check(fn=lambda s, p: lw.Verdict(passed=True, score=1.0), name="ok")],
        contract=lw.Contract(budget=lw.Budget(max_cycles=2), risk=risk),
    )
    posted: list[bytes] = []
    with lw.Runtime(tmp_path / "s.db") as rt:
        r = rt.run_sync(loop, TASK, task_key=f"deploy {KEY}")
        [request] = rt.store.approvals(run_id=r.run_id)
        rt.deny(r.run_id, by="ann")
        r = rt.resume_sync(r.run_id, loop)
        notifier = Notifier(
            rt.store,
            NotifyConfig.of(["https://hooks.example/x"], run_ends=True),
            post=lambda url, body, headers, timeout: posted.append(body) or 200,
        )
        target = notifier._targets[0]
        notifier._send(target, "a", "approval_requested", notifier._approval_job(request).make())
        notifier._send(target, "r", "run_ended", run_end_body(rt.store.get_run(r.run_id), None))
    assert r.status == "escalated"
    bodies = [json.loads(b) for b in posted]
    assert [b["task_key"] for b in bodies] == ["deploy ***", "deploy ***"]
    assert _leaks(b"".join(posted).decode()) == []
