"""Throughput of what-if replay: synthetic recorded runs replayed under several stop contracts.

Usage:  python bench/replay_throughput.py [--runs 10000] [--cycles 10] [--seed 0] [--repeat 3]
                                          [--json out.json]

Generates ``--runs`` synthetic run traces (``loopwright.run-trace/1``) of exactly ``--cycles``
cycles each, seeded: every cycle has an actor call (priced), a visible and a held-out verifier
call, a visible verdict and score; the score climbs by a random walk with plateaus; about a third
of the runs pass their visible check at the last cycle (accepted), the rest end on the cycle
budget. Then ``loopwright.replay.replay`` (the public API: recorded totals, one ``simulate`` per
run and contract, totals per contract) runs them under three contracts:

* ``recorded`` — the policy they were recorded under (``max_cycles``): every cycle is replayed;
* ``plateau``  — ``no_progress`` (2 cycles, Δ 0.05) and a cost cap: most runs stop early;
* ``marginal`` — ``marginal_return`` ($0.30 per success) with a hazard table fitted
  (``fit_hazard``) on another seeded population whose runs may pass at any cycle.

Timing: the best of ``--repeat`` rounds of the whole ``replay`` call (trace generation and the
hazard fit are not timed). The last line is ``runs_per_second=<runs × contracts / seconds>``.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import sys
import time
from typing import Any

import loopwright
from loopwright import Budget, Contract, MarginalReturn, NoProgress, Success
from loopwright.replay import Call, CycleTrace, RunTrace, replay
from loopwright.replay._hazard import fit_hazard


def synthetic_runs(n: int, cycles: int, seed: int, *, spread: bool = False) -> list[RunTrace]:
    """``n`` runs of ``cycles`` cycles; about a third pass at the last cycle. ``spread``: a
    different population, whose runs may pass at any cycle (more likely right after an
    improvement) and end there — used to fit the marginal contract's hazard table."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        goal_at_end = rng.random() < 0.35
        score = rng.uniform(0.1, 0.5)
        cyc = []
        spent = 0.0
        tokens = 0
        for k in range(1, cycles + 1):
            last = k == cycles
            if last and goal_at_end and not spread:
                score = 1.0
            elif rng.random() < 0.45:  # an improvement, else a plateau cycle
                score = min(0.95, score + rng.uniform(0.02, 0.2))
                if spread and rng.random() < 0.15:
                    score = 1.0
            cost = round(rng.uniform(0.002, 0.03), 6)
            tok = int(cost * 100_000)
            spent += cost
            tokens += tok
            passed = score >= 1.0
            cyc.append(
                CycleTrace(
                    cycle=k,
                    calls=(
                        Call("actor", cost, tok),
                        Call("verifier:visible"),
                        Call("verifier:held_out"),
                    ),
                    verdicts={"visible": {"passed": passed, "score": score}},
                    score=score,
                    held_out_passed=(rng.random() < 0.9) if passed else False,
                    seconds=0.5,
                )
            )
            if passed:
                break
        accepted = cyc[-1].verdicts["visible"]["passed"]
        out.append(
            RunTrace(
                run_id=f"run-{i:06d}",
                task_key=f"task-{i:06d}",
                cycles=tuple(cyc),
                required=("visible",),
                recorded={
                    "status": "accepted" if accepted else "stopped",
                    "stop_reason": "success" if accepted else "budget_cycles",
                    "cycles": len(cyc),
                    "cost_usd": spent,
                    "tokens": tokens,
                    "held_out_passed": cyc[-1].held_out_passed,
                },
                source="bench:synthetic",
            )
        )
    return out


def contracts(cycles: int, seed: int) -> dict[str, Contract]:
    success = Success(required=("visible",))
    earlier = synthetic_runs(2000, cycles, seed + 1, spread=True)
    return {
        "recorded": Contract(success=success, budget=Budget(max_cycles=cycles)),
        "plateau": Contract(
            success=success,
            no_progress=NoProgress(cycles=2, min_delta=0.05),
            budget=Budget(max_cycles=cycles, max_cost_usd=0.15),
        ),
        "marginal": Contract(
            success=success,
            budget=Budget(max_cycles=cycles),
            marginal_return=MarginalReturn(
                value_per_success_usd=0.3,
                hazard=fit_hazard(earlier, success=success, max_cycles=cycles),
            ),
        ),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=10_000)
    ap.add_argument("--cycles", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=3, help="timed rounds; the best is reported")
    ap.add_argument("--json", dest="json_out", default=None, help="also write the figures here")
    args = ap.parse_args(argv)

    t = time.perf_counter()
    traces = synthetic_runs(args.runs, args.cycles, args.seed)
    gen_s = time.perf_counter() - t
    t = time.perf_counter()
    named = contracts(args.cycles, args.seed)
    fit_s = time.perf_counter() - t
    print(
        f"loopwright {loopwright.__version__}, Python {platform.python_version()}, "
        f"{platform.machine()} — {args.runs} runs × {args.cycles} cycles "
        f"(generated in {gen_s:.2f} s; contracts built in {fit_s:.2f} s)"
    )

    rounds: list[float] = []
    report = None
    for _ in range(max(1, args.repeat)):
        t = time.perf_counter()
        report = replay(traces, named)
        rounds.append(time.perf_counter() - t)
    assert report is not None
    best = min(rounds)
    n_eval = args.runs * len(named)
    print(f"{'contract':<10} {'accepted':>9} {'cycles':>9} {'cost USD':>10}  stop reasons")
    rows: list[dict[str, Any]] = []
    for totals in [tot for tot, _ in report.contracts]:
        reasons = ", ".join(f"{k} {v}" for k, v in sorted(totals.stop_reasons.items()))
        print(
            f"{totals.name:<10} {totals.accepted:>9} {totals.cycles:>9} "
            f"{totals.cost_usd:>10.2f}  {reasons}"
        )
        rows.append(totals.to_dict())
    simulated = sum(tot.cycles for tot, _ in report.contracts)
    print(
        f"replay(): {len(rounds)} round(s), best {best:.3f} s, all "
        + ", ".join(f"{r:.3f}" for r in rounds)
        + f" s; {simulated} cycles simulated per round "
        f"({simulated / best:,.0f} cycles/s, {1e6 * best / n_eval:.1f} µs per run and contract)"
    )
    rps = n_eval / best
    if args.json_out:
        with open(args.json_out, "w", encoding="utf-8") as fh:
            json.dump(
                {
                    "runs": args.runs,
                    "cycles": args.cycles,
                    "contracts": len(named),
                    "rounds_s": rounds,
                    "best_s": best,
                    "runs_per_second": rps,
                    "totals": rows,
                },
                fh,
                indent=2,
            )
    print(f"runs_per_second={rps:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
