"""In-process crashes at deterministic points: ``Crash`` is a ``BaseException`` no engine
handler catches, so nothing after the point where it is raised is written (a process death);
``phase_hook`` raises it at the N-th time the engine reports a phase (``Runtime._on_phase``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class Crash(BaseException):
    """A process death at a deterministic point: nothing after it is written."""


def phase_hook(crash: tuple[str, int] | None) -> Callable[[str], None]:
    """For ``Runtime._on_phase``: raises ``Crash`` the N-th time phase ``PHASE`` is reached
    (``crash=(PHASE, N)``); never with ``None``."""
    seen: dict[str, int] = {}

    def on_phase(phase: str) -> None:
        seen[phase] = seen.get(phase, 0) + 1
        if crash == (phase, seen[phase]):
            raise Crash(f"{phase}:{seen[phase]}")

    return on_phase


def cost_told(call: Any) -> Any:
    """A call row as a run that was told its cost records it: an effect the kill left to its
    reconcile hook, which settled it without a cost, is recorded ``unknown_cost`` (the run
    cannot know what the uninterrupted run was told, $0; docs/decisions.md, "The stop
    contract"). Its amounts are the $0 it counts, as the uninterrupted run's."""
    if isinstance(call, dict) and call.get("unknown_cost"):
        assert not call.get("cost_usd") and not call.get("tokens"), call
        return {k: v for k, v in call.items() if k != "unknown_cost"}
    return call


def told(value: Any) -> Any:
    """``value`` with each call row in it as ``cost_told`` has it (a record, an export)."""
    if isinstance(value, dict):
        return {k: told(v) for k, v in cost_told(value).items()}
    if isinstance(value, list):
        return [told(v) for v in value]
    return value


def billed_told(killed: dict[str, bool], ref: dict[str, bool]) -> dict[str, bool]:
    """A killed run's ``TaskState.billed`` as the uninterrupted run's, where it differs only by
    what a kill took (``cost_told``): an effect whose every call this run made was settled by
    its hook without a cost is not known free here, known free there."""
    out = dict(killed)
    for who, paid in ref.items():
        if who.startswith("effect:") and who not in out and paid is False:
            out[who] = False
    return out


def less_owed(record: dict[str, Any], ref: dict[str, Any]) -> tuple[dict[str, Any], list[Any]]:
    """A redone cycle's record as the uninterrupted run recorded it, and the calls it was
    charged beyond those: what the calls of its killed attempt were billed (invariant 7),
    each listed before the call made again in its place. The record's usage must add up all
    of its calls. A call whose cost the kill took is compared as the run told it
    (``cost_told``)."""
    calls = [cost_told(c) for c in record.get("calls") or ()]
    want = list(ref.get("calls") or ())
    record = {**record, "calls": calls}
    if calls == want:
        return record, []
    kept: list[Any] = []
    owed: list[Any] = []
    for c in calls:
        if len(kept) < len(want) and c == want[len(kept)]:
            kept.append(c)
        else:
            owed.append(c)
    assert kept == want, (calls, want)
    assert abs(record["usage"]["cost_usd"] - sum(c["cost_usd"] for c in calls)) < 1e-9
    assert record["usage"]["tokens"] == sum(c["tokens"] for c in calls)
    usage = {**record["usage"], "cost_usd": ref["usage"]["cost_usd"]}
    usage["tokens"] = ref["usage"]["tokens"]
    return {**record, "calls": want, "usage": usage}, owed
