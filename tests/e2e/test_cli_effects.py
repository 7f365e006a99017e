"""Effects, questions and reversal through the CLI: real subprocesses, a real SQLite file, a
ledger file appended on every real execution of the payment effect."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from .conftest import cli

MODULE = """
import json, os
from pathlib import Path
import loopwright as lw

LEDGER = Path(os.environ["E2E_LEDGER"])

def _append(entry):
    with LEDGER.open("a") as f:
        f.write(json.dumps(entry) + "\\n")

@lw.effect("spend", key=lambda a: a["invoice"])
def pay(invoice, amount, *, key):
    _append({"type": "payment", "key": key, "amount": amount})
    return {"paid": amount}

@pay.reconciler
def paid(key):
    if not LEDGER.is_file():
        return None
    for line in LEDGER.read_text().splitlines():
        e = json.loads(line)
        if e["key"] == key and e["type"] == "payment":
            return {"paid": e["amount"]}
    return None

@pay.compensation
def refund(key, result, args):
    _append({"type": "refund", "key": key, "amount": -result["paid"]})
    return {"refunded": result["paid"]}

def actor(ctx):
    answers = [n for n in ctx.notes if n.get("kind") == "answer"]
    if ctx.task.get("ask") and not answers:
        return lw.Proposal(question=lw.Question("Which PO governs?", choices=("PO-1", "PO-2")))
    po = answers[-1]["answer"] if answers else "PO-1"
    return lw.Proposal(
        edits=(lw.Edit("doc", "po", po),),
        effects=(pay.call(invoice=ctx.task["invoice"], amount=ctx.task["amount"]),),
    )

def check(state, proposal):
    ok = state.artifacts["doc"].values().get("po") in ("PO-1", "PO-2")
    return lw.Verdict(passed=ok, score=1.0 if ok else 0.0)
"""

SPEC = """
name = "e2e-effects"
[actor]
ref = "paymod.py:actor"
[[verifiers]]
ref = "paymod.py:check"
[[effects]]
ref = "paymod.py:pay"
[[approvals]]
name = "large"
kind = "spend"
above = 1000
action = "require"
[[approvals]]
kind = "spend"
action = "allow"
[contract.budget]
max_cycles = 4
"""


@pytest.fixture
def proj(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "paymod.py").write_text(MODULE)
    (tmp_path / "loop.toml").write_text(SPEC)
    monkeypatch.setenv("E2E_LEDGER", str(tmp_path / "ledger.jsonl"))
    return tmp_path


def _task(proj: Path, **data: Any) -> str:
    path = proj / f"task-{data['invoice']}.json"
    path.write_text(json.dumps({"artifacts": {"doc": {"po": ""}}, **data}))
    return str(path)


def _ledger(proj: Path) -> list[dict[str, Any]]:
    path = proj / "ledger.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.is_file() else []


def _json(proj: Path, store: Path, *args: str) -> Any:
    r = cli(*args, "--json", cwd=proj, store=store)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_large_payment_waits_for_approval_then_pays_once(proj: Path) -> None:
    store = proj / "s.db"
    r = cli(
        "run", "loop.toml", "--task", _task(proj, invoice="A-1", amount=5000), cwd=proj, store=store
    )
    assert r.returncode == 4, r.stdout + r.stderr
    assert _ledger(proj) == []
    (req,) = _json(proj, store, "approvals")
    assert (req["kind"], req["rule"]) == ("effect", "large")
    assert "pay(invoice='A-1', amount=5000)" in req["what"]
    listed = cli("approvals", cwd=proj, store=store)
    assert "large" in listed.stdout and "effect" in listed.stdout
    ok = cli("approve", req["run_id"], "--by", "ana", "--resume", cwd=proj, store=store)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert [e["key"] for e in _ledger(proj)] == ["pay:A-1"]
    again = cli("resume", req["run_id"], cwd=proj, store=store)
    assert again.returncode == 0
    assert len(_ledger(proj)) == 1
    shown = _json(proj, store, "show", req["run_id"])
    (entry,) = [e for e in shown["journal"] if e["kind"] == "effect"]
    assert (entry["status"], entry["attempts"]) == ("done", 1)
    assert "approval_decided" in [e["kind"] for e in shown["events"]]
    text = cli("show", req["run_id"], cwd=proj, store=store).stdout
    assert "Effects (journal)" in text and "pay:A-1" in text


def test_question_is_answered_with_a_validated_answer(proj: Path) -> None:
    store = proj / "s.db"
    task = _task(proj, invoice="B-1", amount=10, ask=True)
    assert cli("run", "loop.toml", "--task", task, cwd=proj, store=store).returncode == 4
    (req,) = _json(proj, store, "approvals")
    assert req["kind"] == "question" and req["what"] == "Which PO governs?"
    rid = req["run_id"]
    yes = cli("approve", rid, "--by", "ana", cwd=proj, store=store)
    assert yes.returncode == 2 and "answer it" in yes.stderr
    assert "Traceback" not in yes.stderr
    bad = cli("answer", rid, "PO-9", "--by", "ana", cwd=proj, store=store)
    assert bad.returncode == 2 and "must be one of ['PO-1', 'PO-2']" in bad.stderr
    ok = cli("answer", rid, "PO-2", "--by", "ana", "--resume", cwd=proj, store=store)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    shown = _json(proj, store, "show", rid)
    assert shown["cycles"][-1]["proposal"]["edits"][0]["value"] == "PO-2"
    assert shown["run"]["status"] == "accepted"
    answer = [n for n in shown["state"]["notes"] if n["kind"] == "answer"]
    assert answer[0]["answer"] == "PO-2" and answer[0]["by"] == "ana"
    late = cli("answer", rid, "PO-1", "--by", "bob", cwd=proj, store=store)
    assert late.returncode == 2 and "already answered by ana" in late.stderr


def test_rollback_offers_the_refund_through_the_policy_and_runs_it_once(proj: Path) -> None:
    store = proj / "s.db"
    task = _task(proj, invoice="C-1", amount=5000)
    assert cli("run", "loop.toml", "--task", task, cwd=proj, store=store).returncode == 4
    rid = _json(proj, store, "runs")[0]["run_id"]
    assert cli("approve", rid, "--by", "ana", "--resume", cwd=proj, store=store).returncode == 0
    assert [e["type"] for e in _ledger(proj)] == ["payment"]
    bad = cli("rollback", rid, "--to-cycle", "9", "--by", "bob", cwd=proj, store=store)
    assert bad.returncode == 2 and "no completed checkpoint for cycle 9" in bad.stderr
    rb = cli("rollback", rid, "--to-cycle", "0", "--by", "bob", cwd=proj, store=store)
    assert rb.returncode == 0, rb.stderr
    assert "compensation" in rb.stdout
    # a refund of 5,000 is a spend above the threshold: the policy asks a person for it
    (req,) = _json(proj, store, "approvals")
    assert req["kind"] == "compensation" and "undo" in req["what"]
    assert _json(proj, store, "show", rid)["run"]["status"] == "awaiting_approval"
    assert cli("resume", rid, cwd=proj, store=store).returncode == 4  # still undecided
    ok = cli(
        "approve", rid, "--request", req["approval_id"], "--by", "carol", cwd=proj, store=store
    )
    assert ok.returncode == 0, ok.stderr
    # the refund runs; the actor then asks to pay again, which (approvals having been rolled
    # back with the checkpoint) needs a person again
    res = cli("resume", rid, cwd=proj, store=store)
    assert res.returncode == 4, res.stdout + res.stderr
    assert [e["type"] for e in _ledger(proj)] == ["payment", "refund"]
    (again,) = _json(proj, store, "approvals")
    assert again["kind"] == "effect"
    cli("resume", rid, cwd=proj, store=store)
    assert [e["type"] for e in _ledger(proj)] == ["payment", "refund"]


def test_small_refund_is_allowed_by_the_policy_and_the_key_pays_again(proj: Path) -> None:
    store = proj / "s.db"
    task = _task(proj, invoice="D-1", amount=50)
    assert cli("run", "loop.toml", "--task", task, cwd=proj, store=store).returncode == 0
    rid = _json(proj, store, "runs")[0]["run_id"]
    rb = cli("rollback", rid, "--to-cycle", "0", "--by", "bob", cwd=proj, store=store)
    assert rb.returncode == 0 and "now pending" in rb.stdout, rb.stdout
    # Outside probe (stop 42): the refund the policy allows runs on the next resume, which
    # the rollback did not say (it printed only requests waiting for a person)
    said = " ".join(rb.stdout.split())
    assert "undone on resume: pay (pay:D-1) (spend effects are allowed" in said, rb.stdout
    assert _json(proj, store, "approvals") == []
    assert cli("resume", rid, cwd=proj, store=store).returncode == 0
    assert [(e["type"], e["key"]) for e in _ledger(proj)] == [
        ("payment", "pay:D-1"),
        ("refund", "pay:D-1"),
        ("payment", "pay:D-1~2"),  # the undone key runs again as its next generation
    ]


def test_cancel_keeps_the_offers_a_rollback_made(proj: Path) -> None:
    store = proj / "s.db"
    task = _task(proj, invoice="E-1", amount=5000)
    assert cli("run", "loop.toml", "--task", task, cwd=proj, store=store).returncode == 4
    rid = _json(proj, store, "runs")[0]["run_id"]
    assert cli("approve", rid, "--by", "ana", "--resume", cwd=proj, store=store).returncode == 0
    # reopened by a rollback, with the refund waiting for a person...
    assert (
        cli("rollback", rid, "--to-cycle", "0", "--by", "bob", cwd=proj, store=store).returncode
        == 0
    )
    (first,) = _json(proj, store, "approvals")
    # ...then cancelled: the offer already made stands (a decision on it is not thrown away),
    # and nothing is offered twice
    out = cli("cancel", rid, "--by", "ana", cwd=proj, store=store)
    assert out.returncode == 0 and "cancelled" in out.stdout and "undo" in out.stdout
    (offer,) = _json(proj, store, "approvals")
    assert offer["approval_id"] == first["approval_id"] and offer["kind"] == "compensation"
    assert (
        cli(
            "approve",
            rid,
            "--request",
            offer["approval_id"],
            "--by",
            "carol",
            cwd=proj,
            store=store,
        ).returncode
        == 0
    )
    cli("resume", rid, cwd=proj, store=store)
    assert [e["type"] for e in _ledger(proj)] == ["payment", "refund"]
    run = _json(proj, store, "runs")[0]
    assert run["status"] == "cancelled"
    cli("resume", rid, cwd=proj, store=store)
    assert [e["type"] for e in _ledger(proj)] == ["payment", "refund"]


def test_run_on_a_local_ray_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("ray")
    spec = Path(__file__).resolve().parents[1] / "integration" / "workers" / "loop.toml"
    monkeypatch.setenv("WORK_DIR", str(tmp_path))
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(
        "".join(
            json.dumps({"id": f"t{i}", "artifacts": {"doc": {"a": 0, "b": 2, "c": 3}}}) + "\n"
            for i in range(3)
        )
    )
    store = tmp_path / "s.db"
    r = cli(
        "run",
        str(spec),
        "--tasks",
        str(tasks),
        "--executor",
        "ray",
        "--json",
        cwd=tmp_path,
        store=store,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    results = json.loads(r.stdout)
    assert [x["status"] for x in results] == ["accepted"] * 3
    lines = (tmp_path / "effects.log").read_text().splitlines()
    assert sorted(x.split(" ")[0] for x in lines) == ["notify:t0", "notify:t1", "notify:t2"]
    bad = cli(
        "run", str(spec), "--tasks", str(tasks), "--ray-address", "auto", cwd=tmp_path, store=store
    )
    assert bad.returncode == 2 and "--ray-address" in bad.stderr


def test_rollback_of_a_run_started_from_python_says_what_it_could_not_offer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Outside probe (stop 42): `loopwright rollback` of a run started from Python (the
    README's payment example) reopened it without a word about its payment, which the CLI
    cannot offer to undo (the loop is not in a spec), and told to `loopwright resume` it,
    which refuses such a run; `cancel` said both."""
    import loopwright as lw
    from loopwright.cli import main

    @lw.effect("spend", key=lambda a: a["invoice"])
    def pay(invoice: str, *, key: str) -> str:
        return "paid"

    loop = lw.Loop(
        name="py-pay",
        actor=lambda ctx: lw.Proposal(
            edits=(lw.Edit("doc", "po", "PO-1"),), effects=(pay.call(invoice="INV-7"),)
        ),
        verifiers=[lw.Check(fn=lambda s, p: lw.Verdict(passed=True))],
        contract=lw.Contract(budget=lw.Budget(max_cycles=2)),
        effects=[pay],
        approvals=lw.ApprovalPolicy((lw.PolicyRule(kind="spend", action="allow"),)),
    )
    db = str(tmp_path / "s.db")
    with lw.Runtime(db) as rt:
        rid = rt.run_sync(loop, {"artifacts": {"doc": {"po": ""}}}, task_key="INV-7").run_id
    capsys.readouterr()
    assert main(["rollback", rid, "--to-cycle", "0", "--by", "ann", "--store", db]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert (
        "1 completed effect(s) not offered for compensation: the run was started from Python" in out
    )
    assert f"Runtime.resume('{rid[:12]}', loop)" in out and "loopwright resume" not in out, out
    # so do fork and approve (a fork of it is started from Python too)
    assert main(["fork", rid, "--at-cycle", "0", "--key", "INV-7/f", "--store", db]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "start it from Python, with its loop: Runtime.resume(" in out, out
    assert "loopwright resume" not in out, out
    # and `approvals`, for a request of such a run
    parked = dataclasses.replace(
        loop, approvals=lw.ApprovalPolicy((lw.PolicyRule(kind="spend", action="require"),))
    )
    with lw.Runtime(db) as rt:
        waits = rt.run_sync(parked, {"artifacts": {"doc": {"po": ""}}}, task_key="INV-8")
    assert waits.status == "awaiting_approval"
    assert main(["approvals", "--store", db]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert (
        f"then: continue it from Python, with its loop: Runtime.resume('{waits.run_id[:12]}'" in out
    )


def test_rollback_in_a_store_with_users_says_to_decide_with_a_token(proj: Path) -> None:
    """The rollback's hint for the refund it offers named ``--by NAME``, which a store with
    users refuses (a decision there is a token's): it says ``--token T`` there, as
    ``loopwright approvals`` does."""
    store = proj / "s.db"
    admin = cli("users", "add", "ada", "--role", "admin", cwd=proj, store=store)
    assert admin.returncode == 0, admin.stderr
    ada = admin.stdout.split()[-1]

    def token(name: str, role: str) -> str:
        r = cli("users", "add", name, "--role", role, "--token", ada, cwd=proj, store=store)
        assert r.returncode == 0, r.stderr
        return r.stdout.split()[-1]

    ops, ana = token("olga", "operator"), token("ana", "approver")
    task = _task(proj, invoice="F-1", amount=5000)
    ran = cli("run", "loop.toml", "--task", task, "--token", ops, cwd=proj, store=store)
    assert ran.returncode == 4, ran.stdout + ran.stderr
    rid = _json(proj, store, "runs")[0]["run_id"]
    ok = cli("approve", rid, "--token", ana, "--resume", cwd=proj, store=store)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    rb = cli("rollback", rid, "--to-cycle", "0", "--token", ops, cwd=proj, store=store)
    assert rb.returncode == 0, rb.stderr
    said = " ".join(rb.stdout.split())
    assert (
        f'decide each with: loopwright approve {rid[:12]} --request ID --token "$LOOPWRIGHT_TOKEN"'
        in said
    ), said
    assert "--by NAME" not in said
