"""Generate ``tasks.jsonl``: the invoice exceptions of the loopwright demo.

Deterministic (fixed seed): running it again rewrites the same file byte for byte. The file is
committed; this script is here so that anyone can see how each case was built and regenerate it.

Every task is one accounts-payable exception raised by a three-way match (invoice against
purchase order and goods receipt). It carries:

* ``artifacts.invoice`` — the invoice as captured (OCR, EDI or keyed by hand): the thing the
  actor repairs, one field (part) at a time;
* ``sources`` — the evidence the invoice is reconciled against: the purchase order (lines),
  the goods receipts, the vendor master record, the tax table and earlier paid invoices;
* ``exception`` — what the ERP's match flagged;
* ``case`` — which kind of exception this is (used by the README and the tests);
* ``simulation`` — the offline actor's scripted imperfections (a stand-in for a model's
  misreads and sloppy citations, so that the demo is reproducible without a model).

    python examples/invoice_exceptions/generate.py           # rewrites tasks.jsonl beside it
"""

from __future__ import annotations

import json
import random
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SEED = 4004
PROJECT = "accounts-payable"

TAX_TABLE: list[dict[str, Any]] = [
    {
        "id": "TAX-DE-STD",
        "code": "DE-STD",
        "country": "DE",
        "rate": 0.19,
        "label": "Germany, standard VAT",
    },
    {
        "id": "TAX-DE-RED",
        "code": "DE-RED",
        "country": "DE",
        "rate": 0.07,
        "label": "Germany, reduced VAT",
    },
    {
        "id": "TAX-FR-STD",
        "code": "FR-STD",
        "country": "FR",
        "rate": 0.2,
        "label": "France, standard VAT",
    },
    {
        "id": "TAX-NL-STD",
        "code": "NL-STD",
        "country": "NL",
        "rate": 0.21,
        "label": "Netherlands, standard VAT",
    },
    {
        "id": "TAX-IT-STD",
        "code": "IT-STD",
        "country": "IT",
        "rate": 0.22,
        "label": "Italy, standard VAT",
    },
    {
        "id": "TAX-GB-STD",
        "code": "GB-STD",
        "country": "GB",
        "rate": 0.2,
        "label": "United Kingdom, standard VAT",
    },
    {
        "id": "TAX-SE-STD",
        "code": "SE-STD",
        "country": "SE",
        "rate": 0.25,
        "label": "Sweden, standard VAT",
    },
    {
        "id": "TAX-US-CA",
        "code": "US-CA",
        "country": "US",
        "rate": 0.0725,
        "label": "California sales tax",
    },
]

# A rate change: Finland's standard VAT went from 24% to 25.5% on 2024-09-01. Only the task
# that needs them carries these rows (every other task's tax table is TAX_TABLE as it was).
TAX_CHANGE: list[dict[str, Any]] = [
    {
        "id": "TAX-FI-STD-24",
        "code": "FI-STD",
        "country": "FI",
        "rate": 0.24,
        "valid_to": "2024-08-31",
        "label": "Finland, standard VAT (until 31 Aug 2024)",
    },
    {
        "id": "TAX-FI-STD-255",
        "code": "FI-STD",
        "country": "FI",
        "rate": 0.255,
        "valid_from": "2024-09-01",
        "label": "Finland, standard VAT (from 1 Sep 2024)",
    },
]

VENDORS: dict[str, dict[str, Any]] = {
    "kessler": {
        "id": "V-10023",
        "name": "Kessler Industrietechnik GmbH",
        "country": "DE",
        "currency": "EUR",
        "tax_code": "DE-STD",
        "prefix": "KIT",
    },
    "moreau": {
        "id": "V-10187",
        "name": "Atelier Moreau SARL",
        "country": "FR",
        "currency": "EUR",
        "tax_code": "FR-STD",
        "prefix": "AM",
    },
    "northwind": {
        "id": "V-20411",
        "name": "Northwind Packaging Ltd",
        "country": "GB",
        "currency": "GBP",
        "tax_code": "GB-STD",
        "prefix": "NWP",
    },
    "bayside": {
        "id": "V-30052",
        "name": "Bayside Office Supply Inc.",
        "country": "US",
        "currency": "USD",
        "tax_code": "US-CA",
        "prefix": "BOS",
    },
    "vandijk": {
        "id": "V-10244",
        "name": "Van Dijk Logistics B.V.",
        "country": "NL",
        "currency": "EUR",
        "tax_code": "NL-STD",
        "prefix": "VDL",
    },
    "rossi": {
        "id": "V-10310",
        "name": "Rossi Componenti S.p.A.",
        "country": "IT",
        "currency": "EUR",
        "tax_code": "IT-STD",
        "prefix": "RC",
    },
    "nordstrom": {
        "id": "V-10402",
        "name": "Nordström Verktyg AB",
        "country": "SE",
        "currency": "SEK",
        "tax_code": "SE-STD",
        "prefix": "NV",
    },
    "hoffmann": {
        "id": "V-10277",
        "name": "Hoffmann Laborbedarf GmbH",
        "country": "DE",
        "currency": "EUR",
        "tax_code": "DE-RED",
        "prefix": "HLB",
    },
    "meridian": {
        "id": "V-10560",
        "name": "Meridian Facility Services GmbH",
        "country": "DE",
        "currency": "EUR",
        "tax_code": "DE-STD",
        "prefix": "MFS",
    },
    "lahti": {
        "id": "V-10633",
        "name": "Lahden Teollisuustarvike Oy",
        "country": "FI",
        "currency": "EUR",
        "tax_code": "FI-STD",
        "prefix": "LTT",
    },
}

# sku, description, unit of measure, contract price (in the vendor's currency)
CATALOG: dict[str, list[tuple[str, str, str, float]]] = {
    "kessler": [
        ("KIT-HS-2040", "Hydraulic hose 20 mm, per metre", "M", 12.50),
        ("KIT-BV-0025", "Ball valve DN25, stainless", "EA", 48.90),
        ("KIT-GS-0716", "Flange gasket set PN16", "SET", 7.35),
        ("KIT-PF-1100", "Pressure filter element 10 µm", "EA", 18.45),
        ("KIT-QC-0012", "Quick coupling 1/2 in", "EA", 9.80),
    ],
    "moreau": [
        ("AM-TBL-180", "Oak meeting table 180 cm", "EA", 1240.00),
        ("AM-CHR-022", "Upholstered chair, grey wool", "EA", 286.50),
        ("AM-SHF-090", "Wall shelf 90 cm, walnut", "EA", 154.00),
    ],
    "northwind": [
        ("NWP-BX-4030", "Corrugated box 40x30x30, double wall", "EA", 0.86),
        ("NWP-TP-0048", "Packing tape 48 mm x 66 m", "ROLL", 1.92),
        ("NWP-PL-1208", "Stretch film 500 mm x 300 m", "ROLL", 14.40),
    ],
    "bayside": [
        ("BOS-PPR-A4", "Copy paper A4 80 g, ream", "REAM", 4.15),
        ("BOS-TNR-26X", "Toner cartridge 26X black", "EA", 142.00),
        ("BOS-PEN-BLU", "Gel pen blue, box of 12", "BOX", 11.60),
        ("BOS-BND-2IN", "Ring binder 2 in", "EA", 3.95),
        ("BOS-NTB-A5", "Notebook A5 ruled", "EA", 2.40),
        ("BOS-STP-24", "Stapler 24/6, metal", "EA", 17.25),
        ("BOS-ENV-C4", "Envelope C4, box of 250", "BOX", 38.00),
        ("BOS-LBL-L7", "Address labels, 21 per sheet, 100 sheets", "PACK", 24.90),
        ("BOS-FLD-HNG", "Hanging folder, box of 25", "BOX", 19.75),
        ("BOS-MRK-WB4", "Whiteboard markers, 4 colours", "PACK", 6.30),
    ],
    "vandijk": [
        ("VDL-FRT-PAL", "Pallet freight Rotterdam–Duisburg", "PAL", 64.00),
        ("VDL-WH-STOR", "Warehouse storage, pallet-week", "PW", 3.20),
        ("VDL-HND-IN", "Inbound handling per pallet", "PAL", 7.50),
    ],
    "rossi": [
        ("RC-BRG-6204", "Deep groove ball bearing 6204-2RS", "EA", 3.64),
        ("RC-SHF-2050", "Drive shaft 20x500 mm", "EA", 57.20),
        ("RC-GBX-R30", "Gearbox ratio 1:30", "EA", 412.00),
    ],
    "nordstrom": [
        ("NV-DRL-18V", "Cordless drill 18 V", "EA", 1890.00),
        ("NV-BIT-SET", "Bit set 32 pcs", "SET", 249.00),
        ("NV-GLV-L", "Work gloves, size L, pair", "PAIR", 79.00),
    ],
    "hoffmann": [
        ("HLB-PIP-1000", "Pipette tips 1000 µl, rack of 96", "RACK", 8.90),
        ("HLB-TUB-50", "Centrifuge tube 50 ml, pack of 25", "PACK", 14.75),
        ("HLB-GLV-M", "Nitrile gloves M, box of 100", "BOX", 6.40),
    ],
    "meridian": [
        ("MFS-CLN-MO", "Office cleaning, monthly", "MO", 2150.00),
        ("MFS-WIN-QT", "Window cleaning, quarterly", "EA", 680.00),
    ],
    "lahti": [
        ("LTT-WLD-100", "Welding wire 1.0 mm, 15 kg spool", "SPL", 86.40),
        ("LTT-GRD-125", "Grinding disc 125 mm, box of 25", "BOX", 42.75),
        ("LTT-HLM-E", "Safety helmet, class E", "EA", 31.90),
    ],
}

TOTALS = ("net_amount", "tax_amount", "total_amount", "payment_amount")


def money(x: float) -> float:
    return round(x + 0.0, 2)


def tax_rate(code: str) -> float:
    return next(float(r["rate"]) for r in (*TAX_TABLE, *TAX_CHANGE) if r["code"] == code)


def tax_doc(code: str) -> str:
    return next(str(r["id"]) for r in (*TAX_TABLE, *TAX_CHANGE) if r["code"] == code)


@dataclass
class Case:
    """One exception under construction: the true documents and the captured invoice."""

    n: int
    case: str
    vendor: dict[str, Any]
    po: dict[str, Any]
    grs: list[dict[str, Any]]
    invoice: dict[str, Any]
    paid: list[dict[str, Any]] = field(default_factory=list)
    exception: dict[str, Any] = field(default_factory=dict)
    simulation: dict[str, Any] = field(default_factory=dict)
    status: str = "active"
    block_reason: str | None = None
    note: str = ""
    tax_table: list[dict[str, Any]] | None = None  # None: TAX_TABLE

    @property
    def id(self) -> str:
        return f"INV-{self.n:04d}"

    def recompute(self) -> None:
        """Make the captured invoice's amounts consistent with its own lines (as a vendor's
        document would be)."""
        inv = self.invoice
        rate = float(inv["tax_rate"])
        net = money(sum(inv[f"line{i}.quantity"] * inv[f"line{i}.unit_price"] for i in self.lines))
        inv["net_amount"] = net
        inv["tax_amount"] = money(net * rate)
        inv["total_amount"] = money(net + inv["tax_amount"])
        inv["payment_amount"] = inv["total_amount"]

    @property
    def lines(self) -> list[int]:
        return [int(line["line"]) for line in self.po["lines"]]

    def to_task(self) -> dict[str, Any]:
        vm = {
            "doc_id": f"VM-{self.vendor['id']}",
            "vendor_id": self.vendor["id"],
            "name": self.vendor["name"],
            "country": self.vendor["country"],
            "currency": self.vendor["currency"],
            "tax_code": self.vendor["tax_code"],
            "payment_terms": "NET30",
            "status": self.status,
        }
        if self.block_reason:
            vm["block_reason"] = self.block_reason
        inv = self.invoice
        goal = (
            f"Reconcile invoice {inv['invoice_number']} from {self.vendor['name']} "
            f"({self.exception['code']}: {self.exception['message']}) against "
            f"{self.po['id']}, its goods receipts, the vendor master and the tax table. "
            "Correct only the fields that disagree with the source documents and cite the "
            "document behind every correction."
        )
        return {
            "task_key": f"invoice-exceptions/{self.id}",
            "id": self.id,
            "goal": goal,
            "project": PROJECT,
            "case": self.case,
            "exception": self.exception,
            "artifacts": {"invoice": dict(inv)},
            "sources": {
                "purchase_order": self.po,
                "goods_receipts": self.grs,
                "vendor_master": vm,
                "tax_table": self.tax_table or TAX_TABLE,
                "paid_invoices": self.paid,
            },
            "simulation": self.simulation,
        }


class Factory:
    """Builds consistent document sets from the catalog with one seeded RNG."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.n = 0
        self.used_po: set[int] = set()

    def _num(self, lo: int, hi: int) -> int:
        while True:
            x = self.rng.randint(lo, hi)
            if x not in self.used_po:
                self.used_po.add(x)
                return x

    def date(self, month: int) -> str:
        return f"2024-{month:02d}-{self.rng.randint(1, 28):02d}"

    def case(
        self,
        case: str,
        vendor: str,
        *,
        lines: int = 1,
        qty: tuple[int, int] = (10, 120),
        items: list[int] | None = None,
    ) -> Case:
        self.n += 1
        v = VENDORS[vendor]
        cat = CATALOG[vendor]
        picks = items if items is not None else self.rng.sample(range(len(cat)), lines)
        po_id = f"PO-{4500000000 + self._num(10000, 99999)}"
        po_lines: list[dict[str, Any]] = []
        for i, k in enumerate(picks, 1):
            sku, desc, uom, price = cat[k]
            po_lines.append(
                {
                    "line": i,
                    "sku": sku,
                    "description": desc,
                    "uom": uom,
                    "quantity": self.rng.randint(*qty),
                    "unit_price": price,
                }
            )
        po = {
            "id": po_id,
            "vendor_id": v["id"],
            "currency": v["currency"],
            "date": self.date(4),
            "buyer": self.rng.choice(["m.keller", "s.okafor", "l.brandt", "j.ruiz", "a.novak"]),
            "lines": po_lines,
        }
        gr = {
            "id": f"GR-{5000000000 + self._num(100000, 999999)}",
            "po_number": po_id,
            "date": self.date(5),
            "received_by": self.rng.choice(["warehouse-north", "warehouse-south", "site-office"]),
            "lines": [
                {"po_line": pl["line"], "sku": pl["sku"], "quantity": pl["quantity"]}
                for pl in po_lines
            ],
        }
        inv: dict[str, Any] = {
            "invoice_number": f"{v['prefix']}-24-{self.rng.randint(1000, 9999)}",
            "invoice_date": self.date(6),
            "vendor_id": v["id"],
            "vendor_name": v["name"],
            "po_number": po_id,
            "currency": v["currency"],
        }
        for pl in po_lines:
            i = pl["line"]
            inv[f"line{i}.sku"] = pl["sku"]
            inv[f"line{i}.quantity"] = pl["quantity"]
            inv[f"line{i}.unit_price"] = pl["unit_price"]
        inv["tax_rate"] = tax_rate(v["tax_code"])
        c = Case(self.n, case, v, po, [gr], inv)
        c.recompute()
        # Field order as on a captured document: header, lines, amounts.
        c.invoice = {
            k: c.invoice[k]
            for k in [
                *[
                    k
                    for k in c.invoice
                    if not k.startswith("line") and k not in (*TOTALS, "tax_rate")
                ],
                *[k for k in c.invoice if k.startswith("line")],
                "net_amount",
                "tax_rate",
                "tax_amount",
                "total_amount",
                "payment_amount",
            ]
        }
        return c

    def paid_invoice(
        self,
        c: Case,
        *,
        po: str,
        lines: dict[int, int],
        number: str | None = None,
        total: float | None = None,
        month: int = 5,
        invoice_date: str | None = None,
    ) -> dict[str, Any]:
        price = {pl["line"]: pl["unit_price"] for pl in c.po["lines"]}
        net = money(sum(q * price.get(n, 0.0) for n, q in lines.items()))
        rate = tax_rate(c.vendor["tax_code"])
        return {
            "doc_id": f"AP-2024-{self.rng.randint(10000, 99999)}",
            "invoice_number": number or f"{c.vendor['prefix']}-24-{self.rng.randint(1000, 9999)}",
            "invoice_date": invoice_date or self.date(month - 1),
            "vendor_id": c.vendor["id"],
            "po_number": po,
            "currency": c.vendor["currency"],
            "total_amount": total if total is not None else money(net * (1 + rate)),
            "paid_on": self.date(month),
            "lines": [{"po_line": n, "quantity": q} for n, q in lines.items()],
        }


def exc(code: str, message: str, captured_by: str = "ocr") -> dict[str, Any]:
    return {
        "code": code,
        "message": message,
        "captured_by": captured_by,
        "raised_by": "3-way match",
    }


def transpose(x: float) -> float:
    """Swap the last two digits of a price: 18.45 -> 18.54 (a classic keying error)."""
    cents = round(x * 100)
    s = str(cents)
    if len(s) < 2 or s[-1] == s[-2]:
        return money(x + 0.09)
    return money(int(s[:-2] + s[-1] + s[-2]) / 100)


# --- the cases --------------------------------------------------------------------------------
def build(f: Factory) -> list[Case]:
    out: list[Case] = []

    def add(c: Case) -> Case:
        out.append(c)
        return c

    # 1. Unit price keyed with a shifted decimal point; the vendor's totals are right.
    c = add(f.case("price_decimal_shift", "kessler", items=[0]))
    c.invoice["line1.unit_price"] = money(c.invoice["line1.unit_price"] * 10)
    c.exception = exc("PRICE_VARIANCE", "line 1 unit price 125.00 vs PO 12.50")

    # 2. Unit price digits transposed; the actor misreads the PO on its first try.
    c = add(f.case("price_misread", "kessler", lines=2, items=[1, 3]))
    right = c.invoice["line2.unit_price"]
    c.invoice["line2.unit_price"] = transpose(right)
    c.simulation = {"misreads": {"line2.unit_price": money(right - 0.02)}}
    c.exception = exc(
        "PRICE_VARIANCE", f"line 2 unit price {c.invoice['line2.unit_price']:.2f} vs PO {right:.2f}"
    )

    # 3. Quantity captured wrong (EDI mapped the ordered, not the delivered quantity); the
    #    vendor's amounts are for the delivered quantity.
    c = add(f.case("quantity_vs_receipt", "rossi", items=[0], qty=(200, 400)))
    got = c.invoice["line1.quantity"]
    c.invoice["line1.quantity"] = got + 20
    c.exception = exc("QTY_VARIANCE", f"line 1 quantity {got + 20} vs goods receipt {got}", "edi")

    # 4. Unit of measure: billed in cartons of 12 against a PO and receipt in eaches.
    c = add(f.case("unit_of_measure", "northwind", items=[1], qty=(120, 120)))
    each = c.invoice["line1.unit_price"]
    c.invoice["line1.quantity"] = 10
    c.invoice["line1.unit_price"] = money(each * 12)
    c.exception = exc("QTY_VARIANCE", "line 1 quantity 10 (cartons) vs goods receipt 120 (each)")

    # 5. Tax rate keyed as the reduced rate; the tax amount on the document is standard-rate.
    c = add(f.case("tax_rate_keyed", "kessler", lines=2))
    c.invoice["tax_rate"] = 0.07
    c.exception = exc("TAX_VARIANCE", "tax rate 7% vs tax code DE-STD (19%)", "manual")

    # 6. French vendor, German rate keyed.
    c = add(f.case("tax_rate_jurisdiction", "moreau", lines=2, qty=(2, 12)))
    c.invoice["tax_rate"] = 0.19
    c.exception = exc("TAX_VARIANCE", "tax rate 19% vs tax code FR-STD (20%)", "manual")

    # 7. Laboratory supplies at the reduced rate, keyed at the standard rate.
    c = add(f.case("tax_rate_reduced", "hoffmann", lines=3))
    c.invoice["tax_rate"] = 0.19
    c.exception = exc("TAX_VARIANCE", "tax rate 19% vs tax code DE-RED (7%)")

    # 8. Currency captured as USD on a EUR purchase order.
    c = add(f.case("currency_code", "vandijk", lines=2))
    c.invoice["currency"] = "USD"
    c.exception = exc("CURRENCY_MISMATCH", "invoice currency USD vs PO currency EUR")

    # 9. Sterling invoice captured as EUR.
    c = add(f.case("currency_code", "northwind", lines=2, qty=(500, 2000)))
    c.invoice["currency"] = "EUR"
    c.exception = exc("CURRENCY_MISMATCH", "invoice currency EUR vs PO currency GBP")

    # 10. Vendor number transposed by the scanner: V-10244 captured as V-10424.
    c = add(f.case("vendor_id_typo", "vandijk", lines=3))
    c.invoice["vendor_id"] = "V-10424"
    c.exception = exc("VENDOR_MISMATCH", "invoice vendor V-10424 vs PO vendor V-10244")

    # 11. Several fields at once; the actor misreads the price on its first try.
    c = add(f.case("multi_field", "nordstrom", lines=2, qty=(2, 20)))
    right = c.invoice["line1.unit_price"]
    c.invoice["currency"] = "EUR"
    c.invoice["tax_rate"] = 0.2
    c.invoice["line1.unit_price"] = money(right / 10)
    c.simulation = {"misreads": {"line1.unit_price": money(right * 10)}}
    c.exception = exc(
        "MULTIPLE", "currency, tax rate and line 1 unit price disagree with PO and tax table"
    )

    # 12. Four findings across four lines: more than one cycle's worth of repair.
    c = add(f.case("multi_line", "bayside", lines=4, qty=(5, 60)))
    c.invoice["tax_rate"] = 0.0825
    c.invoice["line2.unit_price"] = transpose(c.invoice["line2.unit_price"])
    rq = c.invoice["line3.quantity"]
    c.invoice["line3.quantity"] = rq + 10
    c.invoice["line4.unit_price"] = money(c.invoice["line4.unit_price"] + 1.0)
    c.simulation = {"misreads": {"line3.quantity": rq + 1}}
    c.exception = exc("MULTIPLE", "tax rate, two unit prices and one quantity disagree")

    # 13. OCR dropped a digit of the net amount and misread a unit price.
    c = add(f.case("net_amount_ocr", "rossi", lines=2, qty=(20, 90)))
    c.invoice["net_amount"] = transpose(c.invoice["net_amount"])
    c.invoice["line1.unit_price"] = transpose(c.invoice["line1.unit_price"])
    c.exception = exc("AMOUNT_VARIANCE", "net amount does not equal the sum of the lines")

    # 14. The actor forgets to cite the goods receipt for one correction at first.
    c = add(f.case("evidence_forgotten", "hoffmann", lines=2))
    c.invoice["line1.quantity"] += 4
    c.invoice["line2.unit_price"] = money(c.invoice["line2.unit_price"] * 10)
    c.simulation = {"forget_evidence": ["line1.quantity"]}
    c.exception = exc("MULTIPLE", "line 1 quantity and line 2 unit price disagree")

    # 15. The actor cites a document id that does not exist (one digit short) at first.
    c = add(f.case("evidence_hallucinated", "moreau", lines=1, qty=(4, 10)))
    c.invoice["line1.unit_price"] = money(c.invoice["line1.unit_price"] + 10.0)
    c.simulation = {"cite": {"line1.unit_price": c.po["id"][:-1]}}
    c.exception = exc("PRICE_VARIANCE", "line 1 unit price above PO price")

    # 16. Looks like a duplicate (same vendor, same amount, last month) but is the next month
    #     of a recurring service: a different invoice number and a different PO.
    c = add(f.case("recurring_not_duplicate", "vandijk", items=[1], qty=(300, 300)))
    prior_po = f"PO-{4500000000 + f._num(10000, 99999)}"
    c.paid = [f.paid_invoice(c, po=prior_po, lines={1: 300}, total=c.invoice["total_amount"])]
    c.invoice["currency"] = "USD"
    c.exception = exc(
        "CURRENCY_MISMATCH",
        "invoice currency USD vs PO currency EUR; possible duplicate of last month's invoice",
    )

    # 17. FALSE SUCCESS: the visible checks compare quantity with the goods receipt only. An
    #     earlier partial invoice already billed 60 of the 100 received units; this one bills
    #     all 100 again. The tax rate (the flagged exception) is fixed, everything visible
    #     agrees, and only the held-out audit's cumulative recomputation catches it.
    c = add(f.case("cumulative_overbilling", "kessler", items=[2], qty=(100, 100)))
    c.paid = [f.paid_invoice(c, po=c.po["id"], lines={1: 60})]
    c.invoice["tax_rate"] = 0.16
    c.exception = exc("TAX_VARIANCE", "tax rate 16% vs tax code DE-STD (19%)", "manual")

    # 18. FALSE SUCCESS: the quantity is corrected to the right value, but the cited goods
    #     receipt belongs to another purchase order of the same vendor (same quantity, same
    #     week). The visible check sees a document that exists; the audit sees that it does
    #     not support the value.
    c = add(f.case("evidence_wrong_document", "rossi", items=[1], qty=(40, 40)))
    other = {
        "id": f"GR-{5000000000 + f._num(100000, 999999)}",
        "po_number": f"PO-{4500000000 + f._num(10000, 99999)}",
        "date": c.grs[0]["date"],
        "received_by": c.grs[0]["received_by"],
        "lines": [{"po_line": 1, "sku": "RC-BRG-6204", "quantity": 40}],
    }
    c.grs.append(other)
    c.invoice["line1.quantity"] = 4
    c.simulation = {"cite": {"line1.quantity": other["id"]}}
    c.exception = exc("QTY_VARIANCE", "line 1 quantity 4 vs goods receipt 40")

    # 19. NO PROGRESS: no goods receipt has been posted; nothing the actor can do proves the
    #     quantity. It re-cites the PO, which changes nothing.
    c = add(f.case("missing_goods_receipt", "bayside", lines=2, qty=(5, 40)))
    c.grs = []
    c.exception = exc("NO_GOODS_RECEIPT", f"no goods receipt posted for {c.po['id']}")

    # 20. NO PROGRESS: the vendor is blocked for payment in the vendor master.
    c = add(f.case("vendor_blocked", "meridian", items=[0], qty=(1, 1)))
    c.status = "blocked"
    c.block_reason = "bank details changed 2024-06-03; call-back verification pending"
    c.exception = exc("VENDOR_BLOCKED", "vendor V-10560 is blocked for payment", "edi")

    # 21. BUDGET: a badly scanned ten-line invoice whose quantity and price columns were
    #     swapped on every line (the totals happen to be right). Twenty repairs at three per
    #     cycle do not fit in six cycles.
    c = add(f.case("scanned_columns_swapped", "bayside", lines=10, qty=(5, 40)))
    for i in c.lines:
        q, p = c.invoice[f"line{i}.quantity"], c.invoice[f"line{i}.unit_price"]
        c.invoice[f"line{i}.quantity"], c.invoice[f"line{i}.unit_price"] = p, float(q)
    c.exception = exc("MULTIPLE", "quantity and unit price disagree on all ten lines")

    # 22. PAYMENT CHANGE: the vendor billed 10.50 against a PO price of 9.80; the fix lowers
    #     the payment, which needs a person's approval.
    c = add(f.case("price_overbilled", "kessler", items=[4], qty=(150, 300)))
    c.invoice["line1.unit_price"] = 10.5
    c.recompute()
    c.exception = exc("PRICE_VARIANCE", "line 1 unit price 10.50 vs PO 9.80", "edi")

    # 23. PAYMENT CHANGE: billed 50, received 45 (a short delivery).
    c = add(f.case("short_delivery", "rossi", items=[2], qty=(50, 50)))
    c.grs[0]["lines"][0]["quantity"] = 45
    c.recompute()
    c.exception = exc("QTY_VARIANCE", "line 1 quantity 50 vs goods receipt 45", "edi")

    # 24. CONFLICTING EVIDENCE: the PO ordered 100, the goods receipt says 120 arrived, the
    #     vendor billed 120. Which document is right is a buyer's call.
    c = add(f.case("po_receipt_conflict", "northwind", items=[2], qty=(100, 100)))
    c.grs[0]["lines"][0]["quantity"] = 120
    c.invoice["line1.quantity"] = 120
    c.recompute()
    c.exception = exc("QTY_VARIANCE", "goods receipt 120 exceeds PO quantity 100")

    # 25. DUPLICATE: the same invoice number from the same vendor was paid last month.
    c = add(f.case("duplicate_invoice", "moreau", lines=2, qty=(2, 6)))
    c.paid = [
        f.paid_invoice(
            c,
            po=c.po["id"],
            lines={n: c.invoice[f"line{n}.quantity"] for n in c.lines},
            number=c.invoice["invoice_number"],
            total=c.invoice["total_amount"],
            invoice_date=c.invoice["invoice_date"],
        )
    ]
    c.exception = exc("DUPLICATE_SUSPECT", "invoice number already paid for this vendor")

    # 26. POLICY AMBIGUITY: the tax rate changed between delivery and invoice. The goods were
    #     received in August (24%), the invoice is dated September (25.5%), the vendor billed
    #     24%; the tax table has a row for each period and does not say whether the delivery or
    #     the invoice date governs. The documents agree; the policy does not decide.
    c = add(f.case("tax_rate_change", "lahti", lines=2, qty=(10, 40)))
    c.tax_table = [*TAX_TABLE, *TAX_CHANGE]
    c.po["date"] = "2024-07-16"
    c.grs[0]["date"] = "2024-08-27"
    c.invoice["invoice_date"] = "2024-09-03"
    c.exception = exc(
        "TAX_VARIANCE", "tax rate 24% vs tax code FI-STD (25.5% from 2024-09-01)", "edi"
    )

    return out


def generate(seed: int = SEED) -> list[dict[str, Any]]:
    return [c.to_task() for c in build(Factory(seed))]


def write(path: Path, seed: int = SEED) -> int:
    tasks = generate(seed)
    text = "".join(json.dumps(t, ensure_ascii=False) + "\n" for t in tasks)
    path.write_text(text, encoding="utf-8")
    return len(tasks)


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).with_name("tasks.jsonl")
    print(f"wrote {write(target)} tasks to {target}")
