"""``loopwright diff RUN_A RUN_B``: two runs side by side (``loopwright._compare``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

import typer

from .._money_text import usd
from .._verdict import HeldOutWords, held_out_words
from ._app import JsonOpt, StoreOpt, app, print_json, run_ref
from ._stores import open_existing

__all__ = ["diff"]

_ROWS = 20  # score rows shown; longer runs are sampled evenly (all of them with --json)
_MIN_COL = 16  # narrowest column that shows a whole run id; narrower, A and B are stacked


def _short(v: Any, n: int = 36) -> str:
    from ._render import json_text

    text = v if isinstance(v, str) else json_text(v)
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"


def _held_words(side: Mapping[str, Any]) -> HeldOutWords:
    return held_out_words(side["held_out_passed"], side.get("held_out_self_reported"))


def _held(side: Mapping[str, Any]) -> str:
    """A held-out verdict as ``show`` and ``runs`` say it (JSON's ``null``/``true`` read as
    a value missing from the table; ``pass*``: resting on self-reported tests; ``fail*``:
    resting only on tests ``judged_only`` refused: ``_verdict.held_out_words``)."""
    return _held_words(side).cell


def _spend(side: Mapping[str, Any]) -> str:
    """A side's spend, starred past its cost or token budget (as ``loopwright runs`` stars
    it: a bill charged after its last budget check; over56b)."""
    past = side["over_budget_usd"] or side["over_budget_tokens"]
    return usd(side["cost_usd"]) + ("*" if past else "")


def _score(v: Any) -> str:
    return "-" if v is None else f"{float(v):.3f}"


@app.command(short_help="Two runs side by side: contract, cycles, scores, spend, artifacts.")
def diff(
    run_a: Annotated[
        str,
        typer.Argument(metavar="RUN_A", help="A run (id, prefix or task key).", callback=run_ref),
    ],
    run_b: Annotated[
        str,
        typer.Argument(metavar="RUN_B", help="Another run, e.g. its fork.", callback=run_ref),
    ],
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Compare two runs: contract differences, cycles and score per cycle, spend, how each
    stopped, and the final artifacts part by part."""
    from .._compare import compare_runs
    from ._say import console

    with open_existing(store) as st:
        doc = compare_runs(st, run_a, run_b)
    if as_json:
        print_json(doc)
        return
    out = console()
    a, b = doc["a"], doc["b"]
    rows = [
        ("run", a["run"], b["run"]),
        ("task", a["task_key"], b["task_key"]),
        ("status", a["status"], b["status"]),
        ("stop", a["stop_reason"] or "-", b["stop_reason"] or "-"),
        ("cycles", a["cycles"], b["cycles"]),
        ("best score", _score(a["best_score"]), _score(b["best_score"])),
        ("held-out", _held(a), _held(b)),
        ("spend", _spend(a), _spend(b)),
        ("tokens", a["tokens"], b["tokens"]),
    ]
    if a["forked_from"] or b["forked_from"]:
        rows.append(
            (
                "forked from",
                f"{a['forked_from']}@{a['forked_at']}" if a["forked_from"] else "-",
                f"{b['forked_from']}@{b['forked_at']}" if b["forked_from"] else "-",
            )
        )
    width = max(len(r[0]) for r in rows)
    # Side by side where two columns fit; narrower (COLUMNS=40), each of A and B on a line of
    # its own under the label: the terminal wrapped B's value under A's (outside49).
    col = min(30, (out.width - width - 4) // 2)
    for label, va, vb in rows:
        if col >= _MIN_COL:
            out.print(
                f"{label:<{width}}  {_short(va, col):<{col}}  {_short(vb, col)}", markup=False
            )
        else:
            out.print(label, markup=False)
            for side, v in (("A", va), ("B", vb)):
                out.print(f"  {side} {_short(v, max(_MIN_COL, out.width - 4))}", markup=False)
    # what a starred held-out cell means (as under ``loopwright runs``)
    for legend in dict.fromkeys(_held_words(s).legend for s in (a, b)):
        if legend:
            out.print(legend, markup=False)
    if any(s["over_budget_usd"] or s["over_budget_tokens"] for s in (a, b)):
        from .._stored_run_words import OVER_BUDGET_LEGEND  # (not at --help: the engine)

        out.print(OVER_BUDGET_LEGEND, markup=False)  # (a starred spend, as under runs)
    out.print("")
    if doc["contract"]:
        out.print("contract differences:", markup=False)
        for key, v in doc["contract"].items():
            out.print(f"  {key}: {_short(v['a'])} -> {_short(v['b'])}", markup=False)
    else:
        out.print("contracts: the same", markup=False)
    curve = doc["scores"]
    if curve:
        step = max(1, -(-len(curve) // _ROWS))
        shown = curve[::step]
        if shown[-1] is not curve[-1]:
            shown.append(curve[-1])
        out.print("", markup=False)
        out.print(f"{'cycle':>6}  {'score A':>8}  {'score B':>8}", markup=False)
        for c in shown:
            sa = _score(c["a"]) + ("*" if c["a_inherited"] else " ")
            sb = _score(c["b"]) + ("*" if c["b_inherited"] else " ")
            out.print(f"{c['cycle']:>6}  {sa:>9} {sb:>9}", markup=False)
        for name, side in (("A", a), ("B", b)):
            if side["inherited_cycles"]:
                n = side["inherited_cycles"]
                cycles = f"cycles 1-{n}" if n > 1 else "cycle 1"
                origin = side["forked_from"][:12]
                out.print(f"* {name}'s {cycles}: inherited from its origin {origin}", markup=False)
    out.print("", markup=False)
    out.print("final artifacts:", markup=False)
    for p in doc["parts"]:
        mark = "=" if p["same"] else "≠"
        va = "-" if p["a"] is None else f"{_short(p['a']['value'], 24)} ({p['a']['status']})"
        vb = "-" if p["b"] is None else f"{_short(p['b']['value'], 24)} ({p['b']['status']})"
        line = f"  {mark} {p['part']}: {va} | {vb}"
        if len(line) <= out.width:
            out.print(line, markup=False)
            continue
        out.print(f"  {mark} {p['part']}", markup=False)  # (wrapped, A and B ran together)
        for side, q in (("A", p["a"]), ("B", p["b"])):
            room = max(_MIN_COL, out.width - 11 - len(q["status"])) if q else 0
            shown = "-" if q is None else f"{_short(q['value'], min(24, room))} ({q['status']})"
            out.print(f"      {side} {shown}", markup=False)
