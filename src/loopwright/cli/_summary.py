"""The outcome summary a batch ends with (``run``/``run-many``): runs by stop reason and
status, their spend, and the false-success caption (moved out of ``_render``)."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from rich.table import Table

from .._money_text import usd, usd_digits
from .._verdict import held_out_words
from ._render import status_text

if TYPE_CHECKING:
    from ..store import RunRecord

__all__ = ["summary_table"]


def summary_table(runs: list[RunRecord]) -> Table:
    from .._metrics import false_successes

    t = Table(title="Outcome", title_justify="left")
    t.add_column("stop reason")
    t.add_column("status")
    t.add_column("runs", justify="right")
    t.add_column("spend $", justify="right")
    groups: dict[tuple[str, str], list[RunRecord]] = {}
    for r in runs:
        groups.setdefault((r.stop_reason or "-", r.status), []).append(r)
    for (reason, status), rs in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        t.add_row(
            reason, status_text(status), str(len(rs)), usd_digits(sum(r.cost_usd for r in rs))
        )
    accepted = [r for r in runs if r.status == "accepted"]
    # the metric's own basis: accepted runs without an independent held-out verdict (none,
    # a pass resting on self-reported tests, a failure only on refused ones) are left out
    false_success, judged = false_successes(r.held_out_independent for r in accepted)
    marked = Counter(
        w.kind
        for r in accepted
        if (w := held_out_words(r.held_out_passed, r.held_out_self_reported)).independent is None
    )
    forgeable, unjudged = marked["pass_self_reported"], marked["fail_not_judged"]
    total = sum(r.cost_usd for r in runs)
    t.add_section()
    t.add_row("total", "", str(len(runs)), usd_digits(total))
    t.caption = (
        f"accepted {len(accepted)}/{len(runs)}; false successes (accepted on visible checks, "
        f"failed held-out): {false_success}"
        + (f" (false_success_rate {false_success / judged:.3f})" if judged else "")
        + (
            f"; held-out passes resting on self-reported tests, not counted: {forgeable}"
            if forgeable
            else ""
        )
        + (
            f"; held-out failures resting only on tests judged_only refused, not counted: "
            f"{unjudged}"
            if unjudged
            else ""
        )
        + "; cost per accepted outcome: "
        + (usd(total / len(accepted)) if accepted else "n/a")
    )
    return t
