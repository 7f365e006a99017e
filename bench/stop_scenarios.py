"""Seeded random runs of the stop contract, many: ``tests/support/stop_scenarios.py``'s
scenarios from ``--start`` for ``--seeds`` seeds, each on a fresh SQLite store, ``--jobs``
processes; prints every broken property with its seed, what the runs went through (stop
reasons, check-only cycles, questions answered with an edit beside, denied requests' cycles,
forks, cycles a budget ended inside, unknown costs), and exits 1 on any broken property. A
run past ``CYCLE_CAP`` cycles is one ("RunNeverEnds: a run that never ends"), not a hang.
``python bench/stop_scenarios.py [--start N] [--seeds N] [--jobs N]``. A failing seed
replays alone: ``--start SEED --seeds 1``."""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from support.stop_scenarios import check_run, play, scenario

# A store's commits fsync: in memory (tmpfs) where there is one, the trials are CPU-bound.
_TMP = "/dev/shm" if Path("/dev/shm").is_dir() else None


def _one(seed: int) -> tuple[int, list[str], Counter[str]]:
    import loopwright as lw
    from loopwright.replay import trace_of_run

    seen: Counter[str] = Counter()
    broken: list[str] = []
    with tempfile.TemporaryDirectory(dir=_TMP) as d:
        url = str(Path(d) / "s.db")
        try:
            sc = scenario(seed)
            runs = play(sc, url)
            for run_id in runs:
                check_run(sc, url, run_id, broken.append)
        except Exception as exc:  # a scenario the runtime refused: a finding too
            return seed, [f"{type(exc).__name__}: {exc}"], seen
        with lw.Runtime(url) as rt:
            for run_id in runs:
                rec = rt.store.get_run(run_id)
                seen[f"stop {rec.stop_reason or rec.status}"] += 1
                seen["fork" if rec.forked_from else "run"] += 1
                trace = trace_of_run(rt.store, rec)
                if trace is None:
                    continue
                prev = None
                for c in trace.cycles:
                    seen["cycle"] += 1
                    seen["check-only cycle"] += c.check_only
                    seen["denied request's cycle (escalated attempt)"] += (
                        c.escalated and not c.check_only
                    )
                    seen["question asked"] += c.asked
                    seen["answered question's check-only cycle"] += bool(
                        c.check_only and prev is not None and prev.asked
                    )
                    seen["reopened by an edit"] += c.reopened
                    seen["cycle with a run's end inside before it"] += bool(
                        c.calls and c.calls[0].who == "aborted"
                    )
                    seen["unknown cost row"] += sum(x.unknown_cost for x in c.calls)
                    prev = c
                seen[f"tail {trace.tail.get('kind')}"] += 1
    return seed, broken, seen


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--seeds", type=int, default=1000)
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    seen: Counter[str] = Counter()
    bad = 0
    with ProcessPoolExecutor(args.jobs) as pool:
        for seed, broken, counts in pool.map(
            _one, range(args.start, args.start + args.seeds), chunksize=8
        ):
            seen.update(counts)
            if broken:
                bad += 1
                print(f"seed {seed}:", *broken, sep="\n  ", flush=True)
    for key, n in sorted(seen.items()):
        print(f"{key:48} {n:8,}")
    print(f"seeds {args.seeds:,} from {args.start}: {bad} broke a property")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
