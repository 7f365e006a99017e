"""The demo workload (examples/invoice_exceptions) run through the real engine.

Every task's outcome is pinned by its case type; parked runs are approved or denied and
resumed; and a spy actor proves that nothing the held-out audit computes reaches an actor.
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib.util
import json
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import loopwright as lw

ROOT = Path(__file__).resolve().parents[2]
HERE = ROOT / "examples" / "invoice_exceptions"
SPEC = HERE / "loop.toml"
TASKS = HERE / "tasks.jsonl"

# case -> (status, stop_reason, held_out_passed, cycles); None where it does not apply.
ACCEPTED = ("accepted", "success", True)
EXPECTED: dict[str, tuple[str, str | None, bool | None, int | None]] = {
    "price_decimal_shift": (*ACCEPTED, 1),
    "price_misread": (*ACCEPTED, 2),  # misreads the PO price first, repairs from the finding
    "quantity_vs_receipt": (*ACCEPTED, 1),
    "unit_of_measure": (*ACCEPTED, 1),
    "tax_rate_keyed": (*ACCEPTED, 1),
    "tax_rate_jurisdiction": (*ACCEPTED, 1),
    "tax_rate_reduced": (*ACCEPTED, 1),
    "currency_code": (*ACCEPTED, 1),
    "vendor_id_typo": (*ACCEPTED, 1),
    "multi_field": (*ACCEPTED, 2),
    "multi_line": (*ACCEPTED, 2),
    "net_amount_ocr": (*ACCEPTED, 2),  # amounts are recomputed after the line repair
    "evidence_forgotten": (*ACCEPTED, 2),  # evidence_attached makes it cite the receipt
    "evidence_hallucinated": (*ACCEPTED, 2),  # cited a document that does not exist
    "recurring_not_duplicate": (*ACCEPTED, 1),
    # false successes: every visible check passes, the held-out audit does not
    "cumulative_overbilling": ("accepted", "success", False, 1),
    "evidence_wrong_document": ("accepted", "success", False, 1),
    "missing_goods_receipt": ("stopped", "no_progress", None, 3),
    "vendor_blocked": ("stopped", "no_progress", None, 3),
    "scanned_columns_swapped": ("stopped", "budget_cycles", None, 6),
    "price_overbilled": ("awaiting_approval", None, None, None),  # payment change
    "short_delivery": ("awaiting_approval", None, None, None),  # payment change
    "po_receipt_conflict": ("awaiting_approval", None, None, None),  # conflicting evidence
    "duplicate_invoice": ("escalated", "escalated", None, None),
    "tax_rate_change": ("awaiting_approval", None, None, None),  # policy ambiguity
}
# Tasks whose corrected payment is above the spec's 9,000 approval threshold park on the
# ``large_payment`` rule of the approval policy instead of paying.
LARGE_PAYMENT = {"INV-0008", "INV-0010"}


def _tasks() -> list[dict[str, Any]]:
    return [json.loads(line) for line in TASKS.read_text(encoding="utf-8").splitlines() if line]


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"_invoice_example_{name}", HERE / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while being built
    try:
        spec.loader.exec_module(module)
    finally:
        sys.modules.pop(spec.name, None)
    return module


def _run_all(rt: lw.Runtime, loop: lw.Loop) -> dict[str, lw.RunResult]:
    tasks = _tasks()
    results = asyncio.run(rt.run_many(loop, tasks))
    return {t["id"]: r for t, r in zip(tasks, results, strict=True)}


def _case_of() -> dict[str, str]:
    return {t["id"]: t["case"] for t in _tasks()}


def _by_case(results: dict[str, lw.RunResult], case: str) -> lw.RunResult:
    ids = [i for i, c in _case_of().items() if c == case]
    return results[ids[0]]


@pytest.fixture
def loop() -> lw.Loop:
    return lw.load_spec(SPEC)


@pytest.fixture(autouse=True)
def ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "payments.jsonl"
    monkeypatch.setenv("INVOICE_LEDGER", str(path))
    return path


def _payments(ledger: Path) -> list[dict[str, Any]]:
    if not ledger.is_file():
        return []
    return [json.loads(line) for line in ledger.read_text().splitlines() if line]


@pytest.fixture
def rt(tmp_path: Path) -> Iterator[lw.Runtime]:
    with lw.Runtime(str(tmp_path / "x.db")) as runtime:
        yield runtime


# --- the files ----------------------------------------------------------------------------
def test_generator_is_deterministic_and_matches_the_committed_tasks(tmp_path: Path) -> None:
    gen = _load("generate")
    out = tmp_path / "tasks.jsonl"
    gen.write(out)
    assert out.read_bytes() == TASKS.read_bytes(), "tasks.jsonl is stale: run generate.py"
    tasks = _tasks()
    assert len(tasks) >= 22
    assert len({t["task_key"] for t in tasks}) == len(tasks)
    for t in tasks:
        assert t["id"].startswith("INV-")
        assert t["project"] == "accounts-payable"
        assert t["goal"]
        assert t["case"] in EXPECTED, t["case"]
        inv = t["artifacts"]["invoice"]
        assert {"vendor_id", "currency", "tax_rate", "payment_amount"} <= set(inv)
        src = t["sources"]
        assert {
            "purchase_order",
            "goods_receipts",
            "vendor_master",
            "tax_table",
            "paid_invoices",
        } <= set(src)
        assert src["purchase_order"]["lines"]
    assert set(EXPECTED) == {t["case"] for t in tasks}


def test_spec_is_the_seed_contract(loop: lw.Loop) -> None:
    c = loop.contract
    assert loop.name == "invoice-exceptions"
    assert loop.project == "accounts-payable"
    assert c.success.min_score == 0.98
    assert c.no_progress is not None and c.no_progress.cycles == 2
    assert (c.budget.max_cycles, c.budget.max_cost_usd, c.budget.max_seconds) == (6, 3.0, 90)
    rules = {r.name: r for r in c.risk}
    assert rules["payment_change"].touches == ("invoice/payment_amount",)
    assert rules["conflicting_evidence"].findings == ("conflicting_evidence",)
    assert rules["policy_ambiguity"].findings == ("policy_ambiguity",)
    # the essay's risk row names three pauses; each is a rule, and the visible verifiers emit
    # the finding each findings rule waits for (one case of each pauses in the outcomes test)
    assert set(rules) == {"payment_change", "conflicting_evidence", "policy_ambiguity"}
    source = (HERE / "invoices.py").read_text(encoding="utf-8")
    for rule in c.risk:
        for dimension in rule.findings:
            assert f'"{dimension}"' in source, f"no verifier emits {dimension!r}"
    assert c.escalation.owner == "accounts-payable-team"
    assert c.escalation.route and c.escalation.recommended_action
    assert [v.name for v in loop.held_out] == ["audit"]
    assert {v.name for v in loop.visible} == {"fields_agree", "evidence_attached"}


# --- outcomes -------------------------------------------------------------------------------
def test_every_task_ends_as_its_case_type_says(rt: lw.Runtime, loop: lw.Loop) -> None:
    results = _run_all(rt, loop)
    cases = _case_of()
    for tid, r in results.items():
        status, reason, held, cycles = EXPECTED[cases[tid]]
        if tid in LARGE_PAYMENT:
            status, reason, cycles = "awaiting_approval", None, None
            assert rt.pending_approval(r.run_id).rule == "large_payment", tid
        got = (r.status, r.stop_reason)
        assert got == (status, reason), f"{tid} ({cases[tid]}): {got}"
        if status == "accepted":
            assert r.held_out_passed is held, f"{tid} ({cases[tid]}): held-out {r.held_out_passed}"
        if cycles is not None:
            assert r.cycles == cycles, f"{tid} ({cases[tid]}): {r.cycles} cycles"
    dist = Counter(r.stop_reason or r.status for r in results.values())
    assert dist["success"] > len(results) / 2
    assert dist["no_progress"] >= 1
    assert dist["budget_cycles"] >= 1
    assert dist["awaiting_approval"] >= 2
    assert dist["escalated"] >= 1
    false_success = [r for r in results.values() if r.accepted and r.held_out_passed is False]
    assert len(false_success) >= 1


def test_spend_is_a_few_cents_per_call_and_edits_are_local(rt: lw.Runtime, loop: lw.Loop) -> None:
    results = _run_all(rt, loop)
    for tid, r in results.items():
        assert 0 < r.spent.cost_usd < loop.contract.budget.max_cost_usd, tid
        for ck in rt.store.checkpoints(r.run_id):
            rec = ck.record or {}
            prop = rec.get("proposal")
            if not prop:
                continue
            assert prop["kind"] in ("edit", "effects", "noop"), f"{tid}: a {prop['kind']} proposal"
            assert prop["replace"] is None
            assert 0.01 <= prop["usage"]["cost_usd"] <= 0.15, f"{tid}: {prop['usage']}"
            # the actor edits only invoice fields and their evidence, never whole artifacts
            assert {e["artifact"] for e in prop["edits"]} <= {"invoice", "evidence"}


def test_every_non_accepted_end_has_a_packet(rt: lw.Runtime, loop: lw.Loop) -> None:
    results = _run_all(rt, loop)
    ended = [r for r in results.values() if r.status in ("stopped", "escalated", "failed")]
    assert ended
    for r in ended:
        p = r.packet
        assert p is not None, r.task_key
        for key in ("best_candidate", "unresolved_findings", "recommended_action", "trace"):
            assert key in p, (r.task_key, key)
        assert p["recommended_action"]
        assert p["owner"] == "accounts-payable-team"
        # the seed's escalation row: route the trace, evidence, unresolved state and the
        # recommended next action (docs/requirements.md, E-C6)
        assert p["route"] == "ap-exceptions-queue"
        assert p["trace"]["run_id"] == r.run_id
        assert isinstance(p["evidence"], dict)
        assert set(p["plan"]) == {"done", "open"} and "accepted" in p
        assert p["stop_reason"] == r.stop_reason
        if r.status == "stopped":
            assert p["unresolved_findings"], r.task_key
            assert p["best_candidate"]["artifacts"]["invoice"]
    # the duplicate names the earlier payment
    dup = _by_case(results, "duplicate_invoice")
    assert "duplicate" in (dup.packet or {})["cause"]
    # hitting the cycle budget keeps the work: 18 of the 20 swapped fields are repaired and
    # accepted, the last line's two stay as unresolved findings
    budget = _by_case(results, "scanned_columns_swapped")
    packet = budget.packet or {}
    repaired = [k for k in packet["accepted"]["invoice"] if k.endswith(("quantity", "unit_price"))]
    assert len(repaired) == 18
    assert {f["part"] for f in packet["unresolved_findings"]} == {
        "line10.quantity",
        "line10.unit_price",
    }


# --- approvals -------------------------------------------------------------------------------
def test_payment_change_parks_then_approval_finishes_it(rt: lw.Runtime, loop: lw.Loop) -> None:
    results = _run_all(rt, loop)
    r = _by_case(results, "price_overbilled")
    req = rt.pending_approval(r.run_id)
    assert req.rule == "payment_change"
    assert "invoice/payment_amount" in req.diff
    before = r.state.artifacts["invoice"].parts["payment_amount"].value
    rt.approve(r.run_id, by="ana")
    done = rt.resume_sync(r.run_id, loop)
    assert (done.status, done.stop_reason) == ("accepted", "success")
    assert done.held_out_passed is True
    after = done.state.artifacts["invoice"].parts["payment_amount"].value
    assert after < before  # the short payment a person approved
    approvals = [n for n in done.state.notes if n["kind"] == "approval"]
    assert approvals[-1]["by"] == "ana"


def test_conflicting_evidence_parks_then_approval_finishes_it(
    rt: lw.Runtime, loop: lw.Loop
) -> None:
    results = _run_all(rt, loop)
    r = _by_case(results, "po_receipt_conflict")
    assert rt.pending_approval(r.run_id).rule == "conflicting_evidence"
    rt.approve(r.run_id, by="ana", note="over-delivery accepted by the buyer")
    done = rt.resume_sync(r.run_id, loop)
    assert (done.status, done.stop_reason) == ("accepted", "success")


def _deny(rt: lw.Runtime, loop: lw.Loop, run_id: str, by: str, note: str) -> dict[str, Any]:
    """A person denies the parked run: resumed, it escalates with its packet."""
    rt.deny(run_id, by=by, note=note)
    done = rt.resume_sync(run_id, loop)
    assert (done.status, done.stop_reason) == ("escalated", "escalated")
    p = done.packet or {}
    assert f"denied by {by}" in p["cause"]
    assert p["best_candidate"] and p["recommended_action"]
    return p


def test_policy_ambiguity_parks_then_approval_finishes_it(
    rt: lw.Runtime, loop: lw.Loop, ledger: Path
) -> None:
    """The tax rate changed between delivery (24%) and invoice (25.5%) and the tax table does
    not say which date governs: the documents agree, the policy does not decide. The run parks
    on the ``policy_ambiguity`` rule with nothing paid; approving accepts the rate as billed."""
    results = _run_all(rt, loop)
    r = _by_case(results, "tax_rate_change")
    assert r.status == "awaiting_approval"
    req = rt.pending_approval(r.run_id)
    assert req.rule == "policy_ambiguity"
    # what the person is shown: the finding, located, with the two rules that apply
    [finding] = [f for f in req.evidence["findings"] if f["dimension"] == "policy_ambiguity"]
    assert (finding["verifier"], finding["part"]) == ("fields_agree", "tax_rate")
    assert finding["evidence"]["rates"] == {"TAX-FI-STD-24": 0.24, "TAX-FI-STD-255": 0.255}
    invoice = r.state.values()["invoice"]
    assert not [p for p in _payments(ledger) if p["invoice"] == invoice["invoice_number"]]
    rt.approve(r.run_id, by="tove", note="delivered in August: the 24% rate governs")
    done = rt.resume_sync(r.run_id, loop)
    assert (done.status, done.stop_reason) == ("accepted", "success")
    assert done.held_out_passed is True
    after = done.state.values()["invoice"]
    assert after["tax_rate"] == 0.24 and after["payment_amount"] == invoice["payment_amount"]
    paid = [p for p in _payments(ledger) if p["invoice"] == invoice["invoice_number"]]
    assert [p["amount"] for p in paid] == [invoice["payment_amount"]]


def test_denied_policy_ambiguity_escalates_and_pays_nothing(
    rt: lw.Runtime, loop: lw.Loop, ledger: Path
) -> None:
    results = _run_all(rt, loop)
    r = _by_case(results, "tax_rate_change")
    _deny(rt, loop, r.run_id, "tove", "the invoice date governs: ask for a corrected invoice")
    number = r.state.values()["invoice"]["invoice_number"]
    assert not [x for x in _payments(ledger) if x["invoice"] == number]


def test_denied_payment_change_escalates(rt: lw.Runtime, loop: lw.Loop) -> None:
    results = _run_all(rt, loop)
    r = _by_case(results, "short_delivery")
    # one request covers everything in the cycle that needs a person: the payment change (a
    # risk rule) and the 22,618.80 payment itself (the approval policy)
    req = rt.pending_approval(r.run_id)
    assert {n["rule"] for n in req.evidence["needs"]} == {"payment_change", "large_payment"}
    p = _deny(rt, loop, r.run_id, "ana", "ask the vendor for a credit note instead")
    assert "unresolved_findings" in p


# --- held-out isolation ---------------------------------------------------------------------
def test_no_held_out_audit_text_reaches_the_actor(rt: lw.Runtime, loop: lw.Loop) -> None:
    seen: list[str] = []
    actor = loop.actor
    marker = loop.held_out[0].fn.__globals__["AUDIT_MARKER"]

    def spy(ctx: lw.Context) -> Any:
        seen.append(repr(ctx))
        for f in ctx.findings:
            assert f.verifier != "audit"
        return actor(ctx)

    spied = dataclasses.replace(loop, actor=spy)
    results = _run_all(rt, spied)
    # parked runs continue after a decision, so their later contexts are checked too
    for case in ("price_overbilled", "po_receipt_conflict", "tax_rate_change"):
        r = _by_case(results, case)
        rt.approve(r.run_id, by="ana")
        assert rt.resume_sync(r.run_id, spied).accepted

    audit_texts: set[str] = set()
    for r in results.values():
        for ck in rt.store.checkpoints(r.run_id):
            for verdict in ((ck.record or {}).get("held_out") or {}).values():
                for f in verdict["findings"]:
                    audit_texts.add(f["message"])
                    audit_texts.update(
                        str(v)
                        for v in f["evidence"].values()
                        if isinstance(v, str) and v.startswith("AUD-")
                    )
    assert any(marker in t for t in audit_texts), "the audit found nothing; the test proves nothing"
    # positive control: visible findings do reach the actor through the same repr
    visible = {
        f["message"]
        for r in results.values()
        for ck in rt.store.checkpoints(r.run_id)
        for verdict in ((ck.record or {}).get("visible") or {}).values()
        for f in verdict["findings"]
    }
    assert any(m in text for m in visible for text in seen)
    assert len(seen) > len(results)
    for text in seen:
        assert marker not in text
        for t in audit_texts:
            assert t not in text


# --- paying: the spend effect ---------------------------------------------------------------
def test_each_accepted_invoice_is_paid_once_at_its_corrected_amount(
    rt: lw.Runtime, loop: lw.Loop, ledger: Path
) -> None:
    results = _run_all(rt, loop)
    paid = _payments(ledger)
    accepted = [r for r in results.values() if r.accepted]
    assert len(paid) == len(accepted)
    by_key = Counter(p["key"] for p in paid)
    assert all(n == 1 for n in by_key.values()), by_key
    for r in accepted:
        inv = r.state.values()["invoice"]
        key = f"post_payment:{inv['vendor_id']}/{inv['invoice_number']}"
        entry = next(p for p in paid if p["key"] == key)
        assert entry["amount"] == round(float(inv["payment_amount"]), 2)
        assert entry["currency"] == inv["currency"]
        # the payment's result reached the run's notes (the next context) and its journal
        note = [n for n in r.state.notes if n["kind"] == "effect"]
        assert note and note[-1]["status"] == "done"
        journal = rt.store.journal(r.run_id, kind="effect")
        assert [e.status for e in journal] == ["done"]
    # nothing was paid for a run that did not succeed
    unpaid = {r.task_key for r in results.values() if not r.accepted}
    assert unpaid and not any(p["invoice"] in k for p in paid for k in unpaid)


def test_running_the_batch_again_pays_nothing_twice(
    rt: lw.Runtime, loop: lw.Loop, ledger: Path
) -> None:
    _run_all(rt, loop)
    first = _payments(ledger)
    _run_all(rt, loop)  # same task keys: the same runs, already ended
    assert _payments(ledger) == first


def test_large_payment_parks_until_a_person_approves_then_pays_once(
    rt: lw.Runtime, loop: lw.Loop, ledger: Path
) -> None:
    results = _run_all(rt, loop)
    r = results["INV-0010"]
    assert r.status == "awaiting_approval"
    req = rt.pending_approval(r.run_id)
    assert (req.kind, req.rule) == ("effect", "large_payment")
    assert "pay 9,932.41 EUR" in req.what
    assert req.evidence["effects"][0]["args"]["amount"] == 9932.41
    assert not [p for p in _payments(ledger) if p["invoice"] == "VDL-24-9163"]
    rt.approve(r.run_id, by="cfo", note="vendor bank details verified")
    done = rt.resume_sync(r.run_id, loop)
    assert (done.status, done.stop_reason) == ("accepted", "success")
    paid = [p for p in _payments(ledger) if p["invoice"] == "VDL-24-9163"]
    assert len(paid) == 1 and paid[0]["amount"] == 9932.41
    assert rt.resume_sync(r.run_id, loop).status == "accepted"
    assert len([p for p in _payments(ledger) if p["invoice"] == "VDL-24-9163"]) == 1


def test_denied_payment_escalates_and_pays_nothing(
    rt: lw.Runtime, loop: lw.Loop, ledger: Path
) -> None:
    results = _run_all(rt, loop)
    r = results["INV-0008"]
    rt.deny(r.run_id, by="cfo", note="hold: vendor dispute")
    done = rt.resume_sync(r.run_id, loop)
    assert (done.status, done.stop_reason) == ("escalated", "escalated")
    assert "denied by cfo" in (done.packet or {})["cause"]
    assert not [p for p in _payments(ledger) if p["invoice"] == "VDL-24-6096"]
