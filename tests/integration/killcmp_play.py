"""Play the kill-comparison scenario (``killcmp/kc.py``) with real processes: engine steps run
``killcmp/runner.py`` and may be SIGKILLed at phase boundaries, a person's steps run the
``loopwright`` CLI in a second process; ``observe`` reads back what must not depend on the
kills through the CLI (``show --json``, ``trace``, ``memory list --json``) and the effects'
call log."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from crashpoints.killpoint import PHASES as CYCLE_PHASES

sys.path.insert(0, str(Path(__file__).resolve().parent / "killcmp"))
from kc import TASK

HERE = Path(__file__).resolve().parent
RUNNER = HERE / "killcmp" / "runner.py"
KEY = "KC-54"
# The phase boundaries a cycle reports (``crashpoints/killpoint.PHASES``) and the check-only
# cycle's own.
PHASES = (*CYCLE_PHASES, "before_check")
Point = tuple[str, int]

# The scenario: a person's correction in memory, the run (it parks on the payment), a second
# process approves, the resume ends it accepted; a person's edit, judged on resume; a rollback
# to cycle 3, and the resume that redoes cycles 4.. (reusing the effects done by key) and ends:
# the payment is done already by this run with the same arguments, so its redo pays nothing and
# asks no one (it parked for an approval that could change nothing before).
STEPS: tuple[str, ...] = (
    "memory",
    "run",
    "approve",
    "resume",
    "edit",
    "resume",
    "rollback",
    "resume",
)
ENGINE = ("run", "resume")


def _env(work: Path, url: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KC_")}
    return {**env, "KC_DIR": str(work), "LOOPWRIGHT_STORE": url, "PYTHONUNBUFFERED": "1", **extra}


def cli(work: Path, url: str, *args: str) -> str:
    """``loopwright ARGS`` in its own process; its stdout (a failure raises, with stderr)."""
    p = subprocess.run(
        [sys.executable, "-m", "loopwright", *args],
        env=_env(work, url),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if p.returncode not in (0, 1):
        raise AssertionError(f"loopwright {' '.join(args)}: rc {p.returncode}\n{p.stderr}")
    return p.stdout


SPEC = HERE / "killcmp" / "kc.toml"


SELF_KILLS = ("actor", "fields", "audit", "notify", "pay")  # kc.py's own (``KC_SELFKILL``)


def _engine(
    work: Path, url: str, step: str, k: int, point: Point | None, spec: bool = False
) -> bool:
    """One engine process; True when it died of SIGKILL. With ``spec``: ``loopwright run`` or
    ``loopwright resume`` of ``kc.toml``, killed by the loop's own code (``KC_SELFKILL``)."""
    extra = {"KC_STEP": step, "KC_K": str(k)}
    if point is not None:
        extra["KC_SELFKILL" if spec else "KC_CRASH"] = f"{point[0]}:{point[1]}"
    if spec:
        task = work / "task.json"
        task.write_text(json.dumps(TASK))
        args = ["run", str(SPEC), "--task", str(task), "--task-key", KEY]
        command = [
            sys.executable,
            "-m",
            "loopwright",
            *(args if step == "run" else ["resume", KEY]),
        ]
    else:
        command = [sys.executable, str(RUNNER), url, KEY]
    p = subprocess.run(
        command,
        env=_env(work, url, **extra),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if p.returncode == -signal.SIGKILL:
        return True
    if p.returncode not in ((0, 3, 4, 5) if spec else (0,)):  # (the CLI's: stopped, parked, …)
        raise AssertionError(f"{command[2:]} {point}: rc {p.returncode}\n{p.stderr[-3000:]}")
    return False


def person(work: Path, url: str, step: str) -> None:
    if step == "memory":
        cli(
            work,
            url,
            "memory",
            "add",
            "doc/d must read D-MEM",
            "--scope",
            "task",
            "--key",
            KEY,
            "--signal",
            "correction",
            "--by",
            "ann",
            "--rule",
            json.dumps({"d": "D-MEM"}),
        )
    elif step == "approve":
        cli(work, url, "approve", KEY, "--by", "bob", "--note", "ok")
    elif step == "edit":
        cli(work, url, "edit", KEY, "doc/b", "--value", "B-OK2", "--by", "ann")
    elif step == "rollback":
        cli(work, url, "rollback", KEY, "--to-cycle", "3", "--by", "ann")
    else:
        raise ValueError(step)


def play(url: str, work: Path, kills: list[list[Point]], k: int, spec: bool = False) -> int:
    """Play ``STEPS``; engine step ``i`` is SIGKILLed at each point of ``kills[i]`` in turn,
    then resumed (``Runtime.resume``) until it returns. Returns how many kills landed. With
    ``spec``, the loop is ``kc.toml`` (the same loop as a spec), every engine step is ``loopwright run`` or
    ``loopwright resume`` (the CLI's snapshot interval, the default) and a kill point is one of
    the loop's own functions (``SELF_KILLS``)."""
    landed = 0
    i = 0
    for step in STEPS:
        if step not in ENGINE:
            person(work, url, step)
            continue
        points = kills[i] if i < len(kills) else []
        i += 1
        killed = False
        for point in [*points, None]:
            if _engine(work, url, "resume" if killed else step, k, point, spec):
                landed += 1
                killed = True
                continue
            break  # it returned (before its kill point, or with none): the step is done
    return landed


def seeded_kills(seed: int, per_step: int = 2, spec: bool = False) -> list[list[Point]]:
    """Kill points for each engine step, drawn from a seeded RNG over the phase hooks (the
    loop's own functions with ``spec``)."""
    rng = random.Random(seed)
    points = SELF_KILLS if spec else PHASES
    n = sum(s in ENGINE for s in STEPS)
    return [
        [(rng.choice(points), rng.randint(1, 3)) for _ in range(rng.randint(0, per_step))]
        for _ in range(n)
    ]


# What differs between two processes by nature: ids, times, lease tokens and holders.
HEX = re.compile(r"\b[0-9a-f]{12,40}\b")
VOLATILE = {
    "run_id",
    "created_at",
    "updated_at",
    "ts",
    "at",
    "seconds",
    "started_at",
    "ended_at",
    "decided_at",
    "approval_id",
    "request_id",
    "memory_id",
    "fencing_token",
    "token",
    "lease_owner",
    "owner_id",
    "lease_expires_at",
    "deadline_at",
    "elapsed_s",
    "time_s",
    "span_id",
    "trace_id",
    "parent_span_id",
    "start_time_unix_nano",
    "end_time_unix_nano",
    "duration_s",
    "wall_s",
    "lease",
    "holder",
    "worker",
    "pid",
    "seq",
}


def plain(value: Any) -> Any:
    if isinstance(value, dict):  # (an event's "id" is its number: a resume's events shift it)
        return {
            k: plain(v)
            for k, v in value.items()
            if k not in VOLATILE and not (k == "id" and isinstance(v, int))
        }
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, str):
        return HEX.sub("ID", value)
    if isinstance(value, float):
        return round(value, 9)
    return value


def observe(url: str, work: Path) -> dict[str, Any]:
    calls = work / "calls.log"
    return {
        "show": plain(json.loads(cli(work, url, "show", KEY, "--json"))),
        "trace": [plain(json.loads(line)) for line in cli(work, url, "trace", KEY).splitlines()],
        "memory": plain(json.loads(cli(work, url, "memory", "list", "--json", "--limit", "0"))),
        "calls": sorted(calls.read_text().splitlines()) if calls.exists() else [],
    }


# Differences a kill makes by design (docs/concepts.md, invariants; docs/decisions.md, "A
# killed attempt's model calls"): the resume's own events, an effect settled by its reconcile
# hook or found done, the intent of an attempt a kill cut journaled again, and what a killed
# attempt of a call was billed (a ``retry`` event marked ``interrupted``, a row in its cycle's
# calls, the spend) — each taken out before comparing, the bill checked to add up.
RESUME_KINDS = {"resumed", "lease_taken", "recovered", "effect_recovered", "still_waiting"}
MOMENTS = {"requested_at", "first_at", "last_at", "owner", "recovered", "reconciled", "base_seq"}
MOMENTS |= {"hook_not_done"}  # (on an effect_started after the hook said "not done")


def _events(evs: list[dict[str, Any]]) -> tuple[list[Any], float, int]:
    kept: list[Any] = []
    cost, tokens = 0.0, 0
    for e in evs:
        kind, data = e["kind"], dict(e.get("data") or {})
        if kind in RESUME_KINDS:
            continue
        if kind == "retry" and data.get("interrupted"):
            cost += data["usage"]["cost_usd"]
            tokens += data["usage"]["tokens"]
            continue
        if kind == "effect_reconciled" and data.get("status") == "done":
            kind = "effect_done"
        item = (e.get("cycle"), kind, _drop(data))
        if kind == "effect_started" and item in kept:
            continue
        kept.append(item)
    return kept, cost, tokens


def _drop(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _drop(v) for k, v in value.items() if k not in MOMENTS}
    if isinstance(value, list):
        return [_drop(v) for v in value]
    return value


def _less(spent: dict[str, Any], cost: float, tokens: int) -> dict[str, Any]:
    return {
        **spent,
        "cost_usd": round(spent["cost_usd"] - cost, 9),
        "tokens": spent["tokens"] - tokens,
    }


def compared(
    obs: dict[str, Any], ref: dict[str, Any] | None = None
) -> tuple[dict[str, Any], list[str]]:
    """``obs`` with the by-design differences taken out (against ``ref``'s cycles, the calls
    an uninterrupted run made), and the bills that do not add up."""
    show = dict(obs["show"])
    events, cost, tokens = _events(show.pop("events"))
    trace = obs["trace"]
    trace_events, tcost, ttokens = _events([t for t in trace if t.get("kind") not in ("run",)])
    head = [_drop(t) for t in trace if t.get("kind") == "run"]
    problems: list[str] = []
    owed_cost, owed_tokens = 0.0, 0
    cycles = []
    for i, c in enumerate(show["cycles"]):
        c = _drop(c)
        want = ref["show"]["cycles"][i] if ref and i < len(ref["show"]["cycles"]) else None
        if want is not None and "calls" in c and "calls" in want:
            left = list(want["calls"])
            calls, again_cost, again_tokens = [], 0.0, 0
            for call in c["calls"]:
                if call.get("unknown_cost") and not call["cost_usd"] and not call["tokens"]:
                    # settled by its hook without a cost: the $0 the uninterrupted run was told
                    call = {k: v for k, v in call.items() if k != "unknown_cost"}
                if call in left:
                    left.remove(call)
                    calls.append(call)
                else:  # a killed attempt's call, billed again by the redone cycle
                    again_cost += call["cost_usd"]
                    again_tokens += call["tokens"]
            owed_cost += again_cost
            owed_tokens += again_tokens
            c = {**c, "calls": calls}
            if "usage" in c:
                c["usage"] = _less(c["usage"], again_cost, again_tokens)
        cycles.append(c)
    if abs(owed_cost - cost) > 1e-9 or owed_tokens != tokens:
        problems.append(
            f"cycles were billed {owed_cost}/{owed_tokens} again, events say {cost}/{tokens}"
        )
    if abs(tcost - cost) > 1e-9 or ttokens != tokens:
        problems.append(f"trace says {tcost}/{ttokens} interrupted, show {cost}/{tokens}")
    run = _drop(show["run"])
    run = {**run, **_less({"cost_usd": run["cost_usd"], "tokens": run["tokens"]}, cost, tokens)}
    state = _drop(show["state"])
    state["spent"] = _less(state["spent"], cost, tokens)
    if ref is not None and isinstance(state.get("billed"), dict):
        # an effect whose every call a kill left to its hook, settled without a cost, is not
        # known free here, known free there (support.crash.billed_told)
        billed = dict(state["billed"])
        for who, paid in ref["show"]["state"].get("billed", {}).items():
            if who.startswith("effect:") and who not in billed and paid is False:
                billed[who] = False
        state["billed"] = billed
    for h in head:
        h["data"] = {
            **h["data"],
            **_less(
                {"cost_usd": h["data"]["cost_usd"], "tokens": h["data"]["tokens"]}, cost, tokens
            ),
        }
        h["data"].pop("events", None)
    out = {
        "run": run,
        "state": state,
        "cycles": cycles,
        "approvals": _drop(show["approvals"]),
        "journal": _drop(show["journal"]),
        "lineage": show["lineage"],
        "events": events,
        "trace_head": head,
        "trace_events": trace_events,
        "memory": obs["memory"],
        "calls": obs["calls"],
    }
    return out, problems
