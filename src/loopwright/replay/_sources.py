"""Where run traces come from: this project's store, a run-trace file, or LDB recordings."""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from .._decide import no_attempt
from .._errors import ConfigError
from .._inherited import NOTHING, inherited
from .._json import without_bom
from .._proposal import Verdict
from .._verdict import held_out_mark, independent, stored_mark
from ..importers.ldb import USD_PER_TOKEN, read_ldb
from ..store import RunRecord, Store, existing_store_url, open_store
from ._format import ABORTED, TRACE_FORMAT, Call, CycleTrace, RunTrace, added_up, read_traces

# Below this a difference of recorded dollar sums is the floats' rounding, not a call.
_EPS = 1e-9

__all__ = [
    "iter_source",
    "load_source",
    "mixed_loops",
    "trace_of_run",
    "traces_from_ldb",
    "traces_from_store",
]


def _calls(record: dict[str, Any]) -> tuple[Call, ...]:
    if "calls" in record:
        return tuple(
            Call(
                str(x["who"]),
                float(x.get("cost_usd", 0.0)),
                int(x.get("tokens", 0)),
                bool(x.get("unknown_cost", False)),
            )
            for x in record["calls"]
        )
    # Records written before the engine listed its calls: actor, then visible and held-out
    # verifiers (the order between those two groups is not known).
    out = []
    usage = (record.get("proposal") or {}).get("usage") or {}
    out.append(Call("actor", float(usage.get("cost_usd", 0.0)), int(usage.get("tokens", 0))))
    for group in ("visible", "held_out"):
        for name, v in (record.get(group) or {}).items():
            u = v.get("usage") or {}
            out.append(
                Call(f"verifier:{name}", float(u.get("cost_usd", 0.0)), int(u.get("tokens", 0)))
            )
    return tuple(out)


def trace_of_run(store: Store, rec: RunRecord) -> RunTrace | None:
    """The run as a trace; ``None`` for a run rolled back (its cycles are not one line)."""
    cycles: list[CycleTrace] = []
    task: Any = None
    visible_names: dict[str, None] = {}  # every visible check judged, in order
    optional: set[str] = set()  # ... and those the loop did not require
    inh = NOTHING
    ended = False  # the last concluded cycle ended the run
    edited = False  # a person's edit before the run's first concluded cycle
    # What the run had spent after its last concluded cycle (its checkpoint's ``spent``; None
    # where a checkpoint does not say): a concluded cycle's checkpoint that spent more than its
    # own calls on top of it had a cycle end the run mid-way in between, reopened by a person.
    after: tuple[float, int] | None = None
    # The checkpoints a page at a time, their fields without parts (iter_fields): a long run's
    # every checkpoint listed at once held its whole history (289 MB at 20,000 cycles).
    for seq, _cycle, r, fields in store.iter_fields(rec.run_id):
        if seq == 0:  # a fork's first checkpoint: the accounting it inherited
            inh = inherited(rec, fields)
            after = _spent(fields)
        # (a head holds no task since schema 4: the run's row does)
        task = fields.get("task", rec.task) if task is None else task
        if not r:
            continue
        if r.get("decision") == "rollback":
            return None
        if r.get("decision") == "edit" and cycles and ended:
            # a person's edit reopened the run its last cycle had ended: a decision of the
            # person's, which replay takes as recorded
            cycles[-1] = replace(cycles[-1], reopened=True)
            ended = False
        elif r.get("decision") == "edit" and not cycles:
            edited = True  # (before the run's first concluded cycle: a fork's, its own)
        if "proposal" not in r:
            continue
        ended = bool(r.get("ended"))
        calls = _calls(r)
        now = _spent(fields)
        if after is not None and now is not None:
            # in the order the engine added them up: the cycles before, then this cycle's calls
            cost = now[0] - math.fsum((after[0], *(c.cost_usd for c in calls)))
            tokens = now[1] - after[1] - sum(c.tokens for c in calls)
            if cost > _EPS or tokens > 0:
                calls = (Call(ABORTED, max(0.0, cost), max(0, tokens)), *calls)
        after = now
        visible = {k: Verdict.from_dict(v) for k, v in (r.get("visible") or {}).items()}
        visible_names.update(dict.fromkeys(visible))
        optional.update(str(x) for x in r.get("not_required") or ())
        # the held-out verdict as metrics count it: none where tests behind it were not
        # decided outside the candidate's process (``_verdict.held_out_mark``)
        held_out = [v for v in (r.get("held_out") or {}).values() if isinstance(v, Mapping)]
        held = independent(
            all(bool(v.get("passed")) for v in held_out) if held_out else None,
            held_out_mark(stored_mark(v) for v in held_out),
        )
        checked = bool(r.get("check_only"))
        attempt = not no_attempt(checked, (c.who for c in calls))
        cycles.append(
            CycleTrace(
                cycle=int(r["cycle"]),
                calls=calls,
                verdicts={
                    k: {
                        "passed": v.passed,
                        "score": v.value,
                        **({"vacuous": True} if v.vacuous else {}),
                    }
                    for k, v in visible.items()
                },
                score=r.get("score"),
                held_out_passed=held,
                refused=r.get("decision") == "refused",
                duplicate=bool(r.get("duplicate")),
                asked=r.get("decision") == "asked",
                seconds=float((r.get("usage") or {}).get("seconds", 0.0)),
                improved=r.get("improved"),
                # (a request denied after a person's edit beside it: its cycle judged the edit,
                # check-only, but it started as the actor's, after the checks an attempt makes)
                check_only=not attempt,
                # ...and short of success it escalates on the denial, whatever the contract
                # (``_judge_denied``): recorded accepted, a contract it falls short of ends it
                # escalated there too, never by the plateau or a budget (review48c)
                escalated=checked and attempt,
            )
        )
    if ended and rec.status == "escalated":
        # the last cycle's end escalated the run (a denial judged with the edit beside it, a
        # person's version failing a check): no rule of the contract, which replay applies
        cycles[-1] = replace(cycles[-1], escalated=True)
    # What the run spent after its last concluded cycle: the calls of a cycle it never
    # concluded (and, in seconds, time spent outside the cycles' own records).
    # A fork's own figures: its row's less what it inherited (counted in its origin's trace).
    own_cost = max(0.0, rec.cost_usd - inh.cost_usd)
    own_tokens = max(0, rec.tokens - inh.tokens)
    extra: dict[str, Any] = {
        "cost_usd": max(0.0, own_cost - added_up(x.cost_usd for c in cycles for x in c.calls)),
        "tokens": max(0, own_tokens - sum(c.tokens for c in cycles)),
        "seconds": max(0.0, rec.seconds - inh.seconds - sum(c.seconds for c in cycles)),
    }
    if rec.status == "awaiting_approval":
        tail = {"kind": "parked", **extra}
    elif rec.status == "cancelled":
        tail = {"kind": "cancelled", **extra}
    elif rec.status in ("escalated", "failed"):
        tail = {"kind": "escalated", **extra}  # user code, a person or an effect ended it
    elif rec.status == "stopped" and _stopped_mid_cycle(store, rec):
        # A budget crossed between the calls of a cycle, or its time ran out during one.
        tail = {"kind": "crossed", "reason": rec.stop_reason, **extra}
        budget = rec.contract.get("budget") or {}
        if rec.stop_reason == "budget_time" and budget.get("max_seconds") is not None:
            tail["max_seconds"] = budget["max_seconds"]
    elif rec.status in ("running", "pending"):
        tail = {"kind": "unfinished", **extra}
    elif extra["cost_usd"] > _EPS or extra["tokens"] > 0:
        # A cycle ended the run mid-way, a person reopened it, and it ended before another
        # cycle concluded (the checks before the next cycle stopped it)
        tail = {"kind": "reopened", **extra}
    else:
        tail = {"kind": "none"}
    if edited and not cycles:
        # A run with no concluded cycle of its own (a fork stopped before its first), edited:
        # the cycle its resume owes is check-only, which only a budget used up forbids
        # (``_decide.check_stop``), not the cycle cap or a projection (review49b: replay said
        # budget_cycles where the run stopped on its used-up cost budget, and left out what
        # the check-only cycle spent before a budget stopped it inside)
        tail["edited"] = True
    # The loop's required checks (``Check.required``), as the engine judged progress with
    # them. A record written before cycles noted the checks the loop does not require
    # (``not_required``) reads as every visible check required, the ``Check`` default.
    required = tuple(n for n in visible_names if n not in optional)
    recorded: dict[str, Any] = {
        "status": rec.status,
        "stop_reason": rec.stop_reason,
        "cycles": max(0, rec.cycle - inh.cycle),
        "cost_usd": own_cost,
        "tokens": own_tokens,
        "held_out_passed": rec.held_out_independent,
        "max_cycles": _own_cap(rec, task),
        "loop": rec.loop_name,
        "project": rec.project,
    }
    listed = (rec.contract.get("success") or {}).get("required")
    if listed:  # the recorded contract's own success rule named its checks
        recorded["success_required"] = [str(x) for x in listed]
    return RunTrace(
        run_id=rec.run_id,
        task_key=rec.task_key,
        cycles=tuple(cycles),
        required=required,
        recorded=recorded,
        tail=tail,
        source=f"store:{store.url}",
        start=inh.to_dict() if inh != NOTHING else {},
    )


# The stops a budget makes in the middle of a cycle (``_decide.call_stop``, and the time
# budget's deadline); ``budget_cycles`` is only ever decided between cycles.
_MID_CYCLE_BUDGETS = frozenset({"budget_cost", "budget_tokens", "budget_time"})


def _spent(fields: Mapping[str, Any]) -> tuple[float, int] | None:
    """A checkpoint state's ``spent`` (cost, tokens); None where it does not say."""
    spent = fields.get("spent")
    if not isinstance(spent, Mapping):
        return None
    try:
        return float(spent.get("cost_usd") or 0.0), int(spent.get("tokens") or 0)
    except (TypeError, ValueError):
        return None


def _stopped_mid_cycle(store: Store, rec: RunRecord) -> bool:
    """Whether a budget stopped the run inside a cycle: the run started a cycle (its
    ``cycle_started`` event) that it never concluded (``rec.cycle`` counts concluded ones).
    A stop between cycles starts none; nor does a cycle that had ended the run before a
    person's edit reopened it (its spend is the trace's ``aborted`` call or ``reopened`` tail)."""
    if rec.stop_reason not in _MID_CYCLE_BUDGETS:
        return False
    started = ended = False
    for e in store.iter_events(rec.run_id):  # a page at a time
        if e.kind == "cycle_started" and e.cycle > rec.cycle:
            started, ended = True, False
        elif e.kind == "stopped" and started:
            ended = True
        elif e.kind == "edited" and ended:
            started = ended = False
    return started


def _own_cap(rec: RunRecord, task: Any) -> int | None:
    """The run's own cycle budget, read from its task at the recorded contract's
    ``max_cycles_key`` (else ``recorded.max_cycles``, where ``import ldb`` writes it)."""
    key = (rec.contract.get("budget") or {}).get("max_cycles_key") or "recorded.max_cycles"
    node: Any = task
    for part in str(key).split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node if isinstance(node, int) and not isinstance(node, bool) and node >= 1 else None


def traces_from_store(
    store: Store | str | os.PathLike[str],
    *,
    project: str | None = None,
    loop: str | None = None,
) -> Iterator[RunTrace]:
    """The store's runs as traces, oldest first: every loop's and project's unless ``loop`` /
    ``project`` names one (a fit pooling loops learns from other actors' costs: see
    ``mixed_loops``). ``store`` is a ``Store``, or the path or URL of an existing store (as
    ``compute_metrics`` takes), which the iterator opens and closes; anything else, or a path
    with no store, is a ``ConfigError`` naming ``store`` here, at the call."""
    if isinstance(store, Store):
        return _traces_of(store, project, loop)
    if not isinstance(store, str | os.PathLike):
        raise ConfigError(
            f"must be a Store, a path or a store URL, got {type(store).__name__}", field="store"
        )
    return _traces_at(existing_store_url(store, reads="recorded runs"), project, loop)


def _traces_at(url: str, project: str | None, loop: str | None) -> Iterator[RunTrace]:
    with open_store(url) as st:  # opened at the first next(), closed when read or dropped
        yield from _traces_of(st, project, loop)


def _traces_of(store: Store, project: str | None, loop: str | None) -> Iterator[RunTrace]:
    for rec in reversed(store.list_runs(project=project, loop_name=loop)):
        t = trace_of_run(store, rec)
        if t is not None:
            yield t


def traces_from_ldb(
    path: str | Path, *, usd_per_token: float = USD_PER_TOKEN
) -> Iterator[RunTrace]:
    """LDB recordings as traces, as the code-repair loop runs them: cycle 1 judges the seed
    (free: LDB does not account for it), cycle ``k + 1`` the ``k``-th debugging attempt; the
    visible verdict is ``visible_tests`` (score = share of visible tests passing); the hidden
    verdict is known for the final program only (``is_solved``)."""
    for task in read_ldb(path, usd_per_token=usd_per_token):
        rec = task["recorded"]
        n_tests = len(task["visible_tests"])
        programs = [(rec["seed_feedback"], {"cost_usd": 0.0, "tokens": 0})] + [
            (a["feedback"], a["usage"]) for a in rec["attempts"]
        ]
        cycles = []
        verdict_extra = {"vacuous": True} if n_tests == 0 else {}
        for k, (feedback, usage) in enumerate(programs, 1):
            score = 1.0 if n_tests == 0 else max(0.0, 1.0 - len(feedback) / n_tests)
            last = k == len(programs)
            cycles.append(
                CycleTrace(
                    cycle=k,
                    calls=(
                        Call("actor", float(usage["cost_usd"]), int(usage["tokens"])),
                        Call("verifier:visible_tests"),
                        Call("verifier:hidden_tests"),
                    ),
                    verdicts={
                        "visible_tests": {"passed": not feedback, "score": score, **verdict_extra}
                    },
                    score=score,
                    held_out_passed=bool(task["held_out"]["recorded"]["is_solved"])
                    if last
                    else None,
                )
            )
        passing = bool(rec["is_passing"])
        yield RunTrace(
            run_id=task["task_key"],
            task_key=task["task_key"],
            cycles=tuple(cycles),
            required=("visible_tests",),
            recorded={
                "status": "accepted" if passing else "stopped",
                "stop_reason": "success" if passing else "budget_cycles",
                "cycles": len(programs),
                # as the loop would have added them up (and as replay does): see added_up
                "cost_usd": added_up(float(u["cost_usd"]) for _, u in programs),
                "tokens": sum(int(u["tokens"]) for _, u in programs),
                "held_out_passed": bool(task["held_out"]["recorded"]["is_solved"]),
                "max_cycles": rec.get("max_cycles"),
            },
            tail={"kind": "none"},
            source=f"ldb:{path}",
        )


def mixed_loops(traces: list[RunTrace]) -> str | None:
    """A line saying that ``traces`` are runs of more than one loop (naming each, with its
    number of runs), or ``None``: a replay or fit of them pools other actors' costs and
    outcomes, which the caller may not mean (``--loop`` picks one)."""
    counts: dict[str, int] = {}
    for t in traces:
        name = t.recorded.get("loop")
        if isinstance(name, str):
            counts[name] = counts.get(name, 0) + 1
    return loops_line(counts)


def loops_line(counts: Mapping[str, int]) -> str | None:
    """``mixed_loops``' line from the runs counted per loop (a reader of one run at a time
    counts them as it goes)."""
    if len(counts) < 2:
        return None
    listed = ", ".join(f"{k} ({n})" for k, n in sorted(counts.items(), key=lambda x: (-x[1], x[0])))
    return (
        f"note: the runs are of {len(counts)} loops, pooled: {listed}; "
        "give --loop NAME for one loop's runs"
    )


def load_source(
    source: str | os.PathLike[str],
    store: Store | str | os.PathLike[str] | None = None,
    *,
    loop: str | None = None,
    project: str | None = None,
) -> list[RunTrace]:
    """``store`` (runs in the given store, or the store at a path or URL; ``loop`` and
    ``project`` filter them), a run-trace JSONL file, or an LDB JSONL file (recognised by its
    first line)."""
    return list(iter_source(source, store, loop=loop, project=project))


def iter_source(
    source: str | os.PathLike[str],
    store: Store | str | os.PathLike[str] | None = None,
    *,
    loop: str | None = None,
    project: str | None = None,
) -> Iterator[RunTrace]:
    """``load_source``'s runs one at a time (a reader that judges each and keeps its outcome
    holds one run's cycles, not every run's: ``replay``); a source that is neither is refused
    here, before the first run is read."""
    if not isinstance(source, str | os.PathLike):
        raise ConfigError(
            f"must be 'store' or a path to a JSONL file, got {type(source).__name__}",
            field="SOURCE",
        )
    source = os.fspath(source)
    if source in ("store", "runs"):
        if store is None:
            raise ConfigError("no store to read runs from", field="SOURCE")
        return traces_from_store(store, project=project, loop=loop)
    if loop is not None or project is not None:
        raise ConfigError(
            "--loop and --project filter the runs of the store (SOURCE 'store'), not a file",
            field="--loop" if loop is not None else "--project",
        )
    p = Path(source)
    if not p.is_file():
        raise ConfigError(
            f"{source!r} is neither 'store' nor a file (run-trace or LDB JSONL)", field="SOURCE"
        )
    with p.open("rb") as fh:  # the first line only: the readers name a later bad line
        found = ((n, without_bom(x) if n == 1 else x) for n, x in enumerate(fh, 1))
        n, raw = next(((n, x) for n, x in found if x.strip()), (1, b""))
    try:
        first = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{p}, line {n}: not UTF-8 text ({exc.reason})", field="SOURCE") from None
    if f'"{TRACE_FORMAT}"' in first:
        return read_traces(p)
    if '"implementations"' in first and '"test_feedback"' in first:
        return traces_from_ldb(p)
    raise ConfigError(f"{p}: not a run-trace file ({TRACE_FORMAT}) nor LDB results", field="SOURCE")
