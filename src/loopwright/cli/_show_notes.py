"""What ``show`` says of a run's events beside its timeline: accepted work an ``allow`` rule
let the loop write over, a worker's skip, payments it reused refunded since."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.markup import escape

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = ["REUSE_REFUND_EVENTS", "SKIP_EVENTS", "overwrites", "reuse_refunds", "worker_skip"]


def overwrites(events: Iterable[Any]) -> str | None:
    """What ``show`` says of accepted work an ``allow`` rule let the loop write over unasked
    (the run's ``overwrite_allowed`` events), naming whose version each was; ``None``: none."""
    lines = []
    for e in events:
        rule = escape(str(e.data.get("rule")))
        for p in e.data.get("parts") or ():
            by = p.get("accepted_by")
            whose = f"[bold]{escape(str(by))}[/]'s edit" if by else "accepted by its checks"
            lines.append(
                f"  cycle {e.cycle}: {escape(str(p.get('part')))} v{p.get('version')} "
                f"({whose}), allowed by rule {rule}"
            )
    if not lines:
        return None
    return "[yellow]Accepted work the loop was allowed to write over, no one asked:[/]\n" + (
        "\n".join(lines)
    )


#: A worker's skip of a run (``Worker._said_skipped``), and the events of a drive since.
SKIP_EVENTS = ("worker_skipped", "started", "resumed")


def worker_skip(events: Iterable[Any]) -> str | None:
    """What ``show`` says of a run a worker claimed and left (its newest ``worker_skipped``,
    when no drive started since, ``SKIP_EVENTS``): which worker, and why; ``None``: none."""
    last = list(events)[-1:]
    if not last or last[0].kind != "worker_skipped":
        return None
    data = last[0].data
    return (
        f"[yellow]Skipped by worker {escape(str(data.get('owner')))}:[/] "
        f"{escape(str(data.get('why')))}"
    )


#: The events a run that reused a payment gets of its refund (``Store.journal_put``).
REUSE_REFUND_EVENTS = (
    "effect_reuse_refunding",
    "effect_reuse_refunded",
    "effect_reuse_refund_refused",
)


def reuse_refunds(events: Iterable[Any]) -> str | None:
    """What ``show`` says of payments this run reused that their run refunded since, or
    started to (its ``effect_reuse_refunding``, ``effect_reuse_refunded`` and
    ``effect_reuse_refund_refused`` events, a person approving): the run may stand on a
    payment no longer there. A refund started and never said done may have happened (in
    doubt: its run's packet says so); one refused left the payment standing: not said."""
    last: dict[tuple[Any, Any, Any], Any] = {}
    for e in events:
        last[_claim_of(e)] = e  # each payment's latest event says where its refund stands
    lines = []
    for (kind, key, _gen), e in last.items():
        if e.kind not in ("effect_reuse_refunding", "effect_reuse_refunded"):
            continue  # refused: the payment stands
        how = "refunded" if e.kind == "effect_reuse_refunded" else "refund started (may be done)"
        lines.append(
            f"  {escape(str(key))} ({escape(str(kind))}): {how} by run "
            f"{escape(str(e.data.get('refunded_by')))}, a person approving"
        )
    if not lines:
        return None
    return "[red]Payments this run reused were refunded since (it may stand on none):[/]\n" + (
        "\n".join(lines)
    )


def _claim_of(e: Any) -> tuple[Any, Any, Any]:
    return e.data.get("kind"), e.data.get("key"), e.data.get("generation")
