"""The invoice-exception workload: an offline actor, two visible verifiers, a held-out audit.

The artifact is the captured invoice (``invoice``): one part per field (``vendor_id``,
``currency``, ``line2.unit_price``, ``payment_amount``...). The actor repairs it locally, a few
located findings per cycle, and cites the document behind every correction in a second
artifact, ``evidence`` (one part per corrected field, a list of document ids).

* ``propose`` — the actor. Offline and deterministic: it reads the source documents the way a
  model would, with the imperfections scripted in the task's ``simulation`` block (a misread
  value, a forgotten or wrong citation), and charges a token-priced cost per call.
* ``fields_agree`` (visible) — every field agrees with the purchase order, goods receipt,
  vendor master and tax table; located findings with ``expected``/``actual``/``source``;
  ``conflicting_evidence`` when the sources disagree with each other, ``policy_ambiguity``
  when the tax table gives more than one rate that applies.
* ``evidence_attached`` (visible) — every corrected field cites documents that exist.
* ``audit`` (held out) — an independent recomputation of what is payable (cumulative billing
  against receipts, the invoice's own arithmetic) and of whether each cited document actually
  supports the corrected value. The actor never sees it.
* ``post_payment`` — a ``spend`` effect: once a cycle is accepted, the corrected invoice is
  paid by appending it to a payment ledger (a JSONL file standing in for the bank file / ERP
  posting). Its key is the vendor and invoice number, so an invoice is paid at most once
  however often the run crashes or retries; ``reconcile`` reads the ledger, the compensation
  appends a reversal. The spec's approval policy asks a person for payments above 9,000.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import loopwright as lw

__all__ = [
    "AUDIT_MARKER",
    "audit",
    "evidence_attached",
    "fields_agree",
    "ledger_path",
    "post_payment",
    "propose",
]

HEADER = ("vendor_id", "vendor_name", "po_number", "currency", "tax_rate")
LINE_FIELDS = ("sku", "quantity", "unit_price")
TOTALS = ("net_amount", "tax_amount", "total_amount", "payment_amount")
AMOUNT_TOL = 0.005
RATE_TOL = 1e-9

# The actor's prompt carries at most this many repairs per call (its "repair window").
MAX_REPAIRS_PER_CALL = 3
# Simulated model pricing, USD per token (a frontier model's list price).
USD_PER_INPUT_TOKEN = 15e-6
USD_PER_OUTPUT_TOKEN = 75e-6

# Every held-out finding carries this marker; tests check it never reaches an actor.
AUDIT_MARKER = "held-out audit"


# --- paying: an effect, journaled by the engine --------------------------------------------
def ledger_path() -> Path:
    """The payment ledger: ``$INVOICE_LEDGER``, else ``.loopwright/payments.jsonl``."""
    return Path(os.environ.get("INVOICE_LEDGER") or ".loopwright/payments.jsonl")


def _ledger() -> list[dict[str, Any]]:
    path = ledger_path()
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _append(entry: Mapping[str, Any]) -> None:
    path = ledger_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        f.write(json.dumps(entry, sort_keys=True) + "\n")
        f.flush()
        os.fsync(f.fileno())


@lw.effect(
    "spend",
    key=lambda a: f"{a['vendor']}/{a['invoice']}",
    describe=lambda a: (
        f"pay {a['amount']:,.2f} {a['currency']} to {a['vendor']} for invoice {a['invoice']}"
    ),
)
def post_payment(
    invoice: str, vendor: str, amount: float, currency: str, *, key: str
) -> dict[str, Any]:
    """Pay a corrected invoice (append it to the ledger). The ledger honours the idempotency
    key as a payment provider does: a key it has seen is answered with the first payment, never
    paid again. The engine also journals the call and reconciles before any retry, and a key
    done by one run is never executed by another run of the same store."""
    seen = _paid(key)
    if seen is not None:
        return seen
    entry = {
        "key": key,
        "type": "payment",
        "invoice": invoice,
        "vendor": vendor,
        "amount": amount,
        "currency": currency,
    }
    _append(entry)
    return {"ledger_key": key, "amount": amount, "currency": currency}


@post_payment.reconciler
def _paid(key: str) -> dict[str, Any] | None:
    """Did payment ``key`` reach the ledger? (The engine asks before retrying or after a crash.)"""
    for e in _ledger():
        if e.get("key") == key and e.get("type") == "payment":
            return {"ledger_key": key, "amount": e["amount"], "currency": e["currency"]}
    return None


@post_payment.compensation
def _reverse(key: str, result: Any, args: Mapping[str, Any]) -> dict[str, Any]:
    """Undo a payment: a reversal entry (offered when a run is cancelled or rolled back)."""
    _append(
        {
            "key": key,
            "type": "reversal",
            "amount": -float(args["amount"]),
            "currency": args["currency"],
            "invoice": args["invoice"],
            "vendor": args["vendor"],
        }
    )
    return {"reversed": key}


def _payment(inv: Mapping[str, Any]) -> lw.EffectCall | None:
    try:
        amount = round(float(inv.get("payment_amount") or 0), 2)
    except (TypeError, ValueError):
        return None
    if amount <= 0:
        return None
    return post_payment.call(
        invoice=str(inv.get("invoice_number")),
        vendor=str(inv.get("vendor_id")),
        amount=amount,
        currency=str(inv.get("currency")),
    )


# --- reading the task ---------------------------------------------------------------------
def _sources(task: Mapping[str, Any]) -> Mapping[str, Any]:
    return task.get("sources") or {}


def _po(task: Mapping[str, Any]) -> Mapping[str, Any]:
    return _sources(task).get("purchase_order") or {}


def _vm(task: Mapping[str, Any]) -> Mapping[str, Any]:
    return _sources(task).get("vendor_master") or {}


def _po_line(task: Mapping[str, Any], n: int) -> Mapping[str, Any] | None:
    return next((ln for ln in _po(task).get("lines", ()) if int(ln["line"]) == n), None)


def _line_numbers(task: Mapping[str, Any]) -> list[int]:
    return [int(ln["line"]) for ln in _po(task).get("lines", ())]


def _receipts(task: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """Goods receipts posted against this invoice's purchase order."""
    po_id = _po(task).get("id")
    return [g for g in _sources(task).get("goods_receipts", ()) if g.get("po_number") == po_id]


def _received(task: Mapping[str, Any], n: int) -> tuple[float | None, list[str]]:
    """Quantity received on PO line ``n`` and the receipts that say so (``None``: no receipt)."""
    grs = _receipts(task)
    if not grs:
        return None, []
    qty: float = 0
    ids = []
    for g in grs:
        for ln in g.get("lines", ()):
            if int(ln["po_line"]) == n:
                qty += ln["quantity"]
                ids.append(str(g["id"]))
    return (qty if ids else None), ids


def _governing_dates(task: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The dates a tax rate could be taken at, with what happened on them: the invoice date and
    each delivery (goods receipt) date."""
    inv = (task.get("artifacts") or {}).get("invoice") or {}
    dates = [(str(inv["invoice_date"]), "invoice dated {}")] if inv.get("invoice_date") else []
    dates += [
        (str(g["date"]), f"delivered {{}} on {g['id']}") for g in _receipts(task) if g.get("date")
    ]
    return dates


def _in_force(row: Mapping[str, Any], day: str) -> bool:
    """Whether a tax table row is in force on ``day`` (a row without validity dates always is)."""
    start, end = row.get("valid_from"), row.get("valid_to")
    return (not start or str(start) <= day) and (not end or day <= str(end))


def _tax_rules(task: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The tax table rows of the vendor's tax code that could govern this invoice: those in
    force on the invoice date or on a delivery date."""
    code = _vm(task).get("tax_code")
    rows = [r for r in _sources(task).get("tax_table", ()) if r.get("code") == code]
    days = [d for d, _ in _governing_dates(task)]
    return [r for r in rows if not days or any(_in_force(r, d) for d in days)]


def _ambiguous(rules: Sequence[Mapping[str, Any]]) -> bool:
    """Policy ambiguity: the rules that apply prescribe different rates."""
    return len({float(r["rate"]) for r in rules}) > 1


def _tax_row(
    task: Mapping[str, Any], notes: Iterable[Mapping[str, Any]] = (), billed: Any = None
) -> Mapping[str, Any] | None:
    """The tax table row that governs the invoice: the one rate the rules allow. Where they
    allow several (a policy ambiguity), the row of the rate ``billed`` once a person approved
    resolving the ambiguity in this run (they accepted the rate as billed), else none."""
    rules = _tax_rules(task)
    if not _ambiguous(rules):
        return rules[0] if rules else None
    if billed is not None and _approved(notes, "policy_ambiguity"):
        return next((r for r in rules if _same(float(r["rate"]), billed, rate=True)), None)
    return None


def _rule_words(task: Mapping[str, Any], rules: Sequence[Mapping[str, Any]]) -> str:
    """``24% (TAX-FI-STD-24: delivered 2024-08-27 on GR-1) and 25.5% (…)``: each rate that
    applies and the date that makes it apply."""
    words = []
    for r in rules:
        why = ", ".join(what.format(d) for d, what in _governing_dates(task) if _in_force(r, d))
        words.append(f"{float(r['rate']) * 100:g}% ({r['id']}: {why})")
    return " and ".join(words)


def _documents(task: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """Every source document of the task by id."""
    src = _sources(task)
    docs: dict[str, Mapping[str, Any]] = {}
    if src.get("purchase_order"):
        docs[str(src["purchase_order"]["id"])] = src["purchase_order"]
    for g in src.get("goods_receipts", ()):
        docs[str(g["id"])] = g
    if src.get("vendor_master"):
        docs[str(src["vendor_master"]["doc_id"])] = src["vendor_master"]
    for r in src.get("tax_table", ()):
        docs[str(r["id"])] = r
    for p in src.get("paid_invoices", ()):
        docs[str(p["doc_id"])] = p
    return docs


def _same(a: Any, b: Any, *, rate: bool = False) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return bool(a == b)
    if isinstance(a, int | float) and isinstance(b, int | float):
        return abs(float(a) - float(b)) <= (RATE_TOL if rate else AMOUNT_TOL)
    return bool(a == b)


def _money(x: float) -> float:
    return round(x + 0.0, 2)


def _approved(notes: Iterable[Mapping[str, Any]], rule: str) -> bool:
    """Whether a person approved a request raised by the named risk rule in this run."""
    return any(
        n.get("kind") == "approval" and n.get("decision") == "approved" and n.get("rule") == rule
        for n in notes
    )


def _line_of(part: str) -> tuple[int, str] | None:
    """``line3.quantity`` -> ``(3, "quantity")``."""
    head, sep, name = part.partition(".")
    if not sep or not head.startswith("line") or not head[4:].isdigit():
        return None
    return int(head[4:]), name


# --- the visible verifiers ------------------------------------------------------------------
@dataclass
class _Tally:
    checked: int = 0
    findings: list[lw.Finding] = field(default_factory=list)

    def expect(
        self,
        inv: Mapping[str, Any],
        part: str,
        want: Any,
        source: str,
        dimension: str,
        what: str,
        *,
        rate: bool = False,
        sources: Sequence[str] = (),
    ) -> None:
        self.checked += 1
        have = inv.get(part)
        if _same(have, want, rate=rate):
            return
        ev: dict[str, Any] = {"expected": want, "actual": have, "source": source}
        if sources:
            ev["sources"] = list(sources)
        self.findings.append(
            lw.Finding(
                f"{what} is {have!r} on the invoice, {source} says {want!r}",
                "invoice",
                part,
                dimension,
                evidence=ev,
            )
        )

    def fail(self, message: str, part: str, dimension: str, evidence: dict[str, Any]) -> None:
        self.checked += 1
        self.findings.append(lw.Finding(message, "invoice", part, dimension, evidence=evidence))

    def verdict(self, **evidence: Any) -> lw.Verdict:
        ok = self.checked - len(self.findings)
        score = ok / self.checked if self.checked else 1.0
        return lw.Verdict(
            passed=not self.findings,
            score=max(0.0, min(1.0, score)),
            findings=tuple(self.findings),
            evidence={"fields_checked": self.checked, "fields_agreeing": ok, **evidence},
        )


def fields_agree(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
    """Each required field agrees with the PO, the goods receipt, the vendor master and the tax
    table. Sources that disagree with each other give ``conflicting_evidence`` findings (unless
    a person approved resolving that conflict in this run); a tax table that gives the vendor's
    tax code more than one rate for this invoice (one in force on the delivery date, another on
    the invoice date) gives ``policy_ambiguity`` (unless a person approved resolving it: the
    rate as billed then stands, if it is one of them); a missing receipt gives
    ``missing_evidence``; a blocked vendor gives ``vendor_status``."""
    task = state.task
    inv = state.artifacts["invoice"].values() if "invoice" in state.artifacts else {}
    po, vm = _po(task), _vm(task)
    po_id, vm_id = str(po.get("id")), str(vm.get("doc_id"))
    conflict_ok = _approved(state.notes, "conflicting_evidence")
    t = _Tally()

    t.expect(inv, "vendor_id", po.get("vendor_id"), po_id, "vendor", "vendor number")
    if vm.get("status", "active") != "active":
        t.fail(
            f"vendor {vm.get('vendor_id')} is {vm.get('status')} in the vendor master"
            + (f" ({vm['block_reason']})" if vm.get("block_reason") else ""),
            "vendor_id",
            "vendor_status",
            {"expected": "active", "actual": vm.get("status"), "source": vm_id},
        )
    t.expect(inv, "vendor_name", vm.get("name"), vm_id, "vendor", "vendor name")
    t.expect(inv, "po_number", po_id, po_id, "reference", "PO reference")
    if po.get("currency") != vm.get("currency") and not conflict_ok:
        t.fail(
            f"{po_id} is in {po.get('currency')} but the vendor master says {vm.get('currency')}",
            "currency",
            "conflicting_evidence",
            {
                "expected": None,
                "actual": inv.get("currency"),
                "source": po_id,
                "sources": [po_id, vm_id],
            },
        )
    else:
        t.expect(inv, "currency", po.get("currency"), po_id, "currency", "currency")
    rules = _tax_rules(task)
    row = _tax_row(task, state.notes, inv.get("tax_rate"))
    rate = float(row["rate"]) if row else None
    ids = [str(r["id"]) for r in rules]
    if row is None and _ambiguous(rules) and not _approved(state.notes, "policy_ambiguity"):
        t.fail(
            f"the tax table does not determine the rate for tax code {vm.get('tax_code')}: "
            f"{_rule_words(task, rules)} apply to this invoice, and it does not say which date "
            "governs",
            "tax_rate",
            "policy_ambiguity",
            {
                "expected": None,
                "actual": inv.get("tax_rate"),
                "source": ids[0],
                "sources": ids,
                "rates": {i: float(r["rate"]) for i, r in zip(ids, rules, strict=True)},
            },
        )
    elif row is None and _ambiguous(rules):
        t.fail(
            f"tax rate {inv.get('tax_rate')!r} is none of the rates the tax table allows for "
            f"this invoice: {_rule_words(task, rules)}",
            "tax_rate",
            "tax",
            {"expected": None, "actual": inv.get("tax_rate"), "source": ids[0], "sources": ids},
        )
    elif row is None:
        t.fail(
            f"no tax table entry for tax code {vm.get('tax_code')}",
            "tax_rate",
            "missing_evidence",
            {"expected": None, "actual": inv.get("tax_rate"), "source": vm_id},
        )
    else:
        t.expect(inv, "tax_rate", rate, str(row["id"]), "tax", "tax rate", rate=True)

    net = 0.0
    used = {po_id}
    for n in _line_numbers(task):
        pl = _po_line(task, n)
        assert pl is not None
        t.expect(inv, f"line{n}.sku", pl["sku"], po_id, "item", f"line {n} item")
        t.expect(
            inv,
            f"line{n}.unit_price",
            pl["unit_price"],
            po_id,
            "unit_price",
            f"line {n} unit price",
        )
        got, grs = _received(task, n)
        billed = inv.get(f"line{n}.quantity")
        qty = float(billed) if isinstance(billed, int | float) else 0.0
        if got is None:
            t.fail(
                f"no goods receipt posted for {po_id} line {n}: the billed quantity "
                f"{billed!r} cannot be confirmed",
                f"line{n}.quantity",
                "missing_evidence",
                {"expected": None, "actual": billed, "source": po_id},
            )
        elif got > float(pl["quantity"]) and not conflict_ok:
            t.fail(
                f"{po_id} line {n} ordered {pl['quantity']} but {', '.join(grs)} received "
                f"{got:g}: the sources disagree on the quantity",
                f"line{n}.quantity",
                "conflicting_evidence",
                {
                    "expected": None,
                    "actual": billed,
                    "source": grs[0],
                    "sources": [po_id, *grs],
                    "po_quantity": pl["quantity"],
                    "received_quantity": got,
                },
            )
        else:
            t.expect(inv, f"line{n}.quantity", got, grs[0], "quantity", f"line {n} quantity")
            qty = got
            used.update(grs)
        net += qty * float(pl["unit_price"])
    if rate is not None:
        cites = sorted(used) + ([str(row["id"])] if row else [])
        exp_net = _money(net)
        exp_tax = _money(exp_net * rate)
        exp_total = _money(exp_net + exp_tax)
        for part, want, what in (
            ("net_amount", exp_net, "net amount"),
            ("tax_amount", exp_tax, "tax amount"),
            ("total_amount", exp_total, "total amount"),
            ("payment_amount", exp_total, "payment amount"),
        ):
            t.expect(inv, part, want, po_id, "amount", what, sources=cites)
    return t.verdict()


def evidence_attached(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
    """Every corrected invoice field cites at least one document, and every cited document
    exists among the task's sources. Findings are located on the ``evidence`` part so that the
    actor can repair the citation without touching the (possibly accepted) field."""
    docs = _documents(state.task)
    inv = state.artifacts.get("invoice")
    ev = state.artifacts.get("evidence")
    corrected = [name for name, p in inv.parts.items() if len(p.versions) > 1] if inv else []
    findings: list[lw.Finding] = []
    for name in corrected:
        cites = ev.parts[name].value if ev is not None and name in ev.parts else None
        if not cites:
            findings.append(
                lw.Finding(
                    f"{name} was corrected but cites no source document",
                    "evidence",
                    name,
                    "evidence",
                    evidence={"expected": "a source document id", "actual": None, "source": None},
                )
            )
            continue
        unknown = [c for c in cites if c not in docs]
        if unknown:
            findings.append(
                lw.Finding(
                    f"{name} cites {', '.join(map(str, unknown))}, which is not among the "
                    "source documents",
                    "evidence",
                    name,
                    "evidence",
                    evidence={"expected": sorted(docs), "actual": cites, "source": None},
                )
            )
    score = 1.0 - len(findings) / len(corrected) if corrected else 1.0
    return lw.Verdict(
        passed=not findings,
        score=score,
        findings=tuple(findings),
        evidence={"corrected_fields": corrected},
    )


# --- the held-out audit ---------------------------------------------------------------------
def _supports(
    task: Mapping[str, Any], doc: Mapping[str, Any] | None, part: str, value: Any
) -> bool:
    """Whether a cited document actually carries this value for this invoice's PO."""
    if doc is None:
        return False
    po, vm = _po(task), _vm(task)
    line = _line_of(part)
    if line is not None:
        n, name = line
        if doc is po:
            pl = _po_line(task, n)
            return pl is not None and name in ("sku", "unit_price") and _same(pl[name], value)
        if "po_number" in doc and "received_by" in doc:  # a goods receipt
            if doc.get("po_number") != po.get("id") or name != "quantity":
                return False
            return any(
                int(ln["po_line"]) == n and _same(float(ln["quantity"]), value)
                for ln in doc.get("lines", ())
            )
        return False
    if part in TOTALS:
        return doc is po  # computed amounts must rest on the PO (and are recomputed below)
    if part == "tax_rate":
        return doc.get("code") == vm.get("tax_code") and _same(doc.get("rate"), value, rate=True)
    if part == "vendor_name":
        return doc is vm and doc.get("name") == value
    if part == "vendor_id":
        return doc.get("vendor_id") == value and (doc is po or doc is vm)
    if part == "currency":
        return (doc is po or doc is vm) and doc.get("currency") == value
    if part == "po_number":
        return doc is po and doc.get("id") == value
    return False


def audit(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
    """Held out. An independent recomputation of the payable amount (billed quantities against
    receipts *net of quantities already invoiced and paid*, at PO prices, with the vendor's
    tax code) and a check that every cited document supports the value it is cited for."""
    task = state.task
    inv = state.artifacts["invoice"].values() if "invoice" in state.artifacts else {}
    po, vm = _po(task), _vm(task)
    po_id = po.get("id")
    docs = _documents(task)
    conflict_ok = _approved(state.notes, "conflicting_evidence")
    issues: list[tuple[str, str, dict[str, Any]]] = []
    checks = 0

    paid_qty: dict[int, float] = {}
    paid_docs: dict[int, list[str]] = {}
    for p in _sources(task).get("paid_invoices", ()):
        if p.get("po_number") != po_id:
            continue
        if p.get("invoice_number") == inv.get("invoice_number"):
            issues.append(
                (
                    f"{AUDIT_MARKER}: invoice number already paid on {p['doc_id']}",
                    "invoice_number",
                    {"code": "AUD-DUP", "paid": p["doc_id"]},
                )
            )
        for ln in p.get("lines", ()):
            k = int(ln["po_line"])
            paid_qty[k] = paid_qty.get(k, 0.0) + float(ln["quantity"])
            paid_docs.setdefault(k, []).append(str(p["doc_id"]))

    payable_net = 0.0
    for n in _line_numbers(task):
        pl = _po_line(task, n)
        assert pl is not None
        got, _ = _received(task, n)
        billed = float(inv.get(f"line{n}.quantity") or 0)
        ordered = float(pl["quantity"])
        cap = (got or 0.0) if conflict_ok else min(got or 0.0, ordered)
        open_qty = max(0.0, cap - paid_qty.get(n, 0.0))
        checks += 1
        if billed > open_qty + 1e-9:
            already = paid_qty.get(n, 0.0)
            issues.append(
                (
                    f"{AUDIT_MARKER}: line {n} bills {billed:g} but only {open_qty:g} are open "
                    f"(received {got or 0:g}, already invoiced {already:g}"
                    + (f" on {', '.join(paid_docs[n])}" if already else "")
                    + ")",
                    f"line{n}.quantity",
                    {
                        "code": "AUD-CUMQTY",
                        "billed": billed,
                        "open": open_qty,
                        "already_invoiced": already,
                    },
                )
            )
        payable_net += min(billed, open_qty) * float(pl["unit_price"])

    rules = _tax_rules(task)
    row = _tax_row(task, state.notes, inv.get("tax_rate"))
    rate = float(row["rate"]) if row else 0.0
    if row is None and _ambiguous(rules):
        checks += 1
        issues.append(
            (
                f"{AUDIT_MARKER}: the tax rate is not determined: {_rule_words(task, rules)} "
                "apply to this invoice",
                "tax_rate",
                {"code": "AUD-TAXPOLICY", "rules": [str(r["id"]) for r in rules]},
            )
        )
        rate = max(float(r["rate"]) for r in rules)
    payable = _money(_money(payable_net) + _money(_money(payable_net) * rate))
    checks += 1
    pay = float(inv.get("payment_amount") or 0)
    if pay > payable + AMOUNT_TOL:
        issues.append(
            (
                f"{AUDIT_MARKER}: payment amount {pay:.2f} exceeds the independently "
                f"recomputed payable {payable:.2f}",
                "payment_amount",
                {"code": "AUD-PAYABLE", "payment_amount": pay, "payable": payable},
            )
        )
    # the invoice's own arithmetic
    lines_net = _money(
        sum(
            float(inv.get(f"line{n}.quantity") or 0) * float(inv.get(f"line{n}.unit_price") or 0)
            for n in _line_numbers(task)
        )
    )
    tax = _money(lines_net * float(inv.get("tax_rate") or 0))
    for part, want in (
        ("net_amount", lines_net),
        ("tax_amount", tax),
        ("total_amount", _money(lines_net + tax)),
        ("payment_amount", float(inv.get("total_amount") or 0)),
    ):
        checks += 1
        if not _same(inv.get(part), want):
            issues.append(
                (
                    f"{AUDIT_MARKER}: {part} {inv.get(part)!r} does not recompute ({want!r})",
                    part,
                    {"code": "AUD-ARITH", "recomputed": want},
                )
            )

    # every cited document must support the corrected value
    ev = state.artifacts.get("evidence")
    art = state.artifacts.get("invoice")
    for name, p in art.parts.items() if art else ():
        if len(p.versions) < 2:
            continue
        checks += 1
        cites = ev.parts[name].value if ev is not None and name in ev.parts else []
        if not any(_supports(task, docs.get(str(c)), name, p.value) for c in cites or ()):
            issues.append(
                (
                    f"{AUDIT_MARKER}: none of the documents cited for {name} "
                    f"({', '.join(map(str, cites or ())) or 'none'}) supports the value {p.value!r}",
                    name,
                    {"code": "AUD-SUPPORT", "cited": list(cites or ())},
                )
            )
    if vm.get("status", "active") != "active":
        checks += 1
        issues.append(
            (f"{AUDIT_MARKER}: vendor is {vm.get('status')}", "vendor_id", {"code": "AUD-VENDOR"})
        )

    findings = tuple(
        lw.Finding(msg, "invoice", part, "audit", evidence={"marker": AUDIT_MARKER, **ev_})
        for msg, part, ev_ in issues
    )
    return lw.Verdict(
        passed=not issues,
        score=max(0.0, 1.0 - len(issues) / max(checks, 1)),
        findings=findings,
        evidence={"payable": payable, "checks": checks},
    )


# --- the actor ------------------------------------------------------------------------------
@dataclass
class _Repair:
    """One unit of the actor's work: field edits and the citations behind them."""

    order: int
    edits: dict[str, Any] = field(default_factory=dict)
    cites: dict[str, list[str]] = field(default_factory=dict)
    why: str = ""
    totals: bool = False


def _order(part: str) -> int:
    if part in HEADER:
        return HEADER.index(part)
    line = _line_of(part)
    if line is not None:
        n, name = line
        return 100 + 10 * n + (LINE_FIELDS.index(name) if name in LINE_FIELDS else 9)
    return 10_000


def _source_for(task: Mapping[str, Any], part: str) -> list[str]:
    """The document the actor would cite for a field (when nothing more specific is known)."""
    po, vm, row = _po(task), _vm(task), _tax_row(task)
    line = _line_of(part)
    if line is not None:
        n, name = line
        if name == "quantity":
            _, grs = _received(task, n)
            return grs[:1] or [str(po.get("id"))]
        return [str(po.get("id"))]
    if part == "tax_rate":
        return [str(row["id"])] if row else [str(vm.get("doc_id"))]
    if part in ("vendor_name",):
        return [str(vm.get("doc_id"))]
    if part in TOTALS:
        return _totals_cites(task)
    return [str(po.get("id"))]


def _totals_cites(task: Mapping[str, Any]) -> list[str]:
    row = _tax_row(task)
    return [
        str(_po(task).get("id")),
        *sorted({str(g["id"]) for g in _receipts(task)}),
        *([str(row["id"])] if row else []),
    ]


def _scan(task: Mapping[str, Any], inv: Mapping[str, Any]) -> list[_Repair]:
    """The actor's own first reading of the documents (no findings yet)."""
    po, vm, row = _po(task), _vm(task), _tax_row(task)
    out: list[_Repair] = []

    def fix(part: str, want: Any, cite: list[str], why: str, *, rate: bool = False) -> None:
        if not _same(inv.get(part), want, rate=rate):
            out.append(_Repair(_order(part), {part: want}, {part: cite}, why))

    fix("vendor_id", po.get("vendor_id"), [str(po.get("id"))], "vendor number per PO")
    fix("vendor_name", vm.get("name"), [str(vm.get("doc_id"))], "vendor name per vendor master")
    fix("currency", po.get("currency"), [str(po.get("id"))], "currency per PO")
    rules = _tax_rules(task)
    if row is None and _ambiguous(rules):
        out.append(
            _Repair(
                _order("tax_rate"),
                {},
                {"tax_rate": [str(r["id"]) for r in rules]},
                f"tax rate: {_rule_words(task, rules)} apply; the tax owner must say which governs",
            )
        )
    elif row is not None:
        fix(
            "tax_rate",
            float(row["rate"]),
            [str(row["id"])],
            f"rate of tax code {row['code']}",
            rate=True,
        )
    for n in _line_numbers(task):
        pl = _po_line(task, n)
        assert pl is not None
        fix(f"line{n}.sku", pl["sku"], [str(po.get("id"))], f"line {n} item per PO")
        fix(f"line{n}.unit_price", pl["unit_price"], [str(po.get("id"))], f"line {n} price per PO")
        got, grs = _received(task, n)
        part = f"line{n}.quantity"
        if got is None:
            out.append(
                _Repair(
                    _order(part),
                    {},
                    {part: [str(po.get("id"))]},
                    f"no goods receipt for line {n}; citing the PO quantity",
                )
            )
        elif got > float(pl["quantity"]):
            out.append(
                _Repair(
                    _order(part),
                    {},
                    {part: grs[:1]},
                    f"line {n}: PO ordered {pl['quantity']}, receipt shows {got:g}; billing follows the receipt, needs a buyer's confirmation",
                )
            )
        else:
            fix(part, got, grs[:1], f"line {n} quantity per goods receipt")
    if _totals_differ(task, inv):
        out.append(_Repair(10_000, totals=True, why="recompute amounts"))
    return out


def _recompute(task: Mapping[str, Any], inv: Mapping[str, Any]) -> dict[str, float]:
    net = _money(
        sum(
            float(inv.get(f"line{n}.quantity") or 0) * float(inv.get(f"line{n}.unit_price") or 0)
            for n in _line_numbers(task)
        )
    )
    tax = _money(net * float(inv.get("tax_rate") or 0))
    total = _money(net + tax)
    return {"net_amount": net, "tax_amount": tax, "total_amount": total, "payment_amount": total}


def _totals_differ(task: Mapping[str, Any], inv: Mapping[str, Any]) -> bool:
    return any(not _same(inv.get(k), v) for k, v in _recompute(task, inv).items())


def _from_findings(ctx: lw.Context) -> list[_Repair]:
    task, notes = ctx.task, ctx.notes
    out: list[_Repair] = []
    seen: set[tuple[str, str]] = set()
    for f in ctx.findings:
        part = f.part or ""
        key = (f.artifact or "", part)
        if not part or key in seen:
            continue
        seen.add(key)
        ev = f.evidence
        if f.artifact == "evidence":
            out.append(
                _Repair(
                    _order(part), {}, {part: _source_for(task, part)}, f"cite the source for {part}"
                )
            )
        elif f.dimension == "conflicting_evidence":
            if _approved(notes, "conflicting_evidence"):
                continue  # a person decided; nothing left for the actor here
            src = ev.get("source")
            out.append(
                _Repair(
                    _order(part), {}, {part: [str(src)]}, f"{part}: sources disagree; citing {src}"
                )
            )
        elif f.dimension == "policy_ambiguity":
            if _approved(notes, "policy_ambiguity"):
                continue  # a person decided which rule governs
            out.append(
                _Repair(
                    _order(part),
                    {},
                    {part: [str(s) for s in ev.get("sources") or ()]},
                    f"{part}: the policy allows more than one value; citing the rules",
                )
            )
        elif f.dimension == "missing_evidence":
            out.append(
                _Repair(
                    _order(part),
                    {},
                    {part: _source_for(task, part)},
                    f"{part}: no receipt; citing the PO",
                )
            )
        elif f.dimension == "vendor_status":
            out.append(
                _Repair(
                    _order(part),
                    {},
                    {part: [str(_vm(task).get("doc_id"))]},
                    "vendor status per vendor master",
                )
            )
        elif part in TOTALS:
            if not any(r.totals for r in out):
                out.append(_Repair(10_000, totals=True, why="recompute amounts"))
        elif "expected" in ev and ev["expected"] is not None:
            src = ev.get("source")
            out.append(
                _Repair(
                    _order(part),
                    {part: ev["expected"]},
                    {part: [str(src)] if src else _source_for(task, part)},
                    f"{part} per {src}",
                )
            )
    return out


def _duplicate_of(task: Mapping[str, Any], inv: Mapping[str, Any]) -> Mapping[str, Any] | None:
    paid: Sequence[Mapping[str, Any]] = _sources(task).get("paid_invoices", ())
    for p in paid:
        if p.get("invoice_number") == inv.get("invoice_number") and p.get("vendor_id") in (
            inv.get("vendor_id"),
            _po(task).get("vendor_id"),
        ):
            return p
    return None


def _usage(ctx: lw.Context, n_edits: int) -> lw.Usage:
    """A simulated model call: prompt = instructions + invoice + documents + findings."""
    parts = sum(len(v) for v in ctx.artifacts.values())
    docs = len(_documents(ctx.task))
    tokens_in = 650 + 38 * parts + 55 * docs + 90 * len(ctx.findings) + 40 * len(ctx.history)
    tokens_out = 80 + 45 * n_edits
    cost = tokens_in * USD_PER_INPUT_TOKEN + tokens_out * USD_PER_OUTPUT_TOKEN
    return lw.Usage(cost_usd=round(cost, 6), tokens=tokens_in + tokens_out)


def propose(ctx: lw.Context) -> lw.Proposal:
    """The offline actor: a few local repairs per call, each with its evidence."""
    task = ctx.task
    sim = task.get("simulation") or {}
    inv = dict(ctx.artifacts.get("invoice", {}))
    original = (task.get("artifacts") or {}).get("invoice") or {}

    dup = _duplicate_of(task, inv)
    if dup is not None:
        return lw.Proposal(
            escalate=(
                f"duplicate invoice: {inv.get('invoice_number')} from {inv.get('vendor_id')} was "
                f"already paid on {dup.get('paid_on')} ({dup.get('doc_id')}, "
                f"{dup.get('total_amount')} {dup.get('currency')}); do not pay again"
            ),
            note=f"matches paid invoice {dup.get('doc_id')}",
            usage=_usage(ctx, 0),
        )

    repairs = _from_findings(ctx) if ctx.findings else _scan(task, inv)
    repairs.sort(key=lambda r: r.order)
    fields_first = [r for r in repairs if not r.totals]
    chosen = fields_first[:MAX_REPAIRS_PER_CALL]
    # Amounts are recomputed last, once no field they depend on is still being repaired.
    if not fields_first and any(r.totals for r in repairs):
        chosen = [r for r in repairs if r.totals][:1]

    edits: dict[str, Any] = {}
    cites: dict[str, list[str]] = {}
    why: list[str] = []
    for r in chosen:
        if r.totals:
            for part, value in _recompute(task, inv).items():
                if not _same(inv.get(part), value):
                    edits[part] = value
                    cites[part] = _totals_cites(task)
            why.append(r.why)
            continue
        for part, value in r.edits.items():
            first_try = _same(inv.get(part), original.get(part))
            misread = (sim.get("misreads") or {}).get(part)
            if first_try and misread is not None:
                value = misread
            edits[part] = value
            if first_try and part in (sim.get("forget_evidence") or ()):
                continue
            if first_try and part in (sim.get("cite") or {}):
                cites[part] = [str(sim["cite"][part])]
            else:
                cites[part] = r.cites.get(part) or _source_for(task, part)
        for part, c in r.cites.items():
            if part not in r.edits:
                cites[part] = c
        why.append(r.why)

    changes = [lw.Edit("invoice", k, v) for k, v in edits.items()]
    changes += [lw.Edit("evidence", k, sorted(set(v), key=v.index)) for k, v in cites.items()]
    note = "; ".join(why) if why else "no discrepancy found against PO, receipts and tax table"
    # Ask to pay the invoice as corrected; the engine pays only if this cycle is accepted.
    pay = _payment({**inv, **edits})
    return lw.Proposal(
        edits=tuple(changes),
        note=note,
        usage=_usage(ctx, len(changes)),
        effects=(pay,) if pay is not None else (),
    )
