"""The wide kill-comparison loop (stop 54): a four-part doc with a plan, repaired one part a
cycle, judged by a visible and a held-out check, with feedback memory, a reflector, an effect
keyed by a business key and a payment that parks for a person's approval.

Everything it does is a pure function of the checkpointed state, of the run's memory and of
the files in ``$KC_DIR``, so a run killed at any phase boundary and resumed must end where an
uninterrupted run ends.

* ``doc/a`` and ``doc/b`` (plan step ``s1``), ``doc/c`` (``s2``, after ``s1``), ``doc/d``
  (``s3``, after ``s2``); the actor fixes the first located finding's part only (a partial
  edit), ``doc/c`` with a near miss first (``C-OK~``);
* ``doc/d``'s target is not in the finding: the actor reads it from a person's correction in
  feedback memory (``rule: {"d": ...}``);
* every edit of a part asks for ``notify`` (kind ``send``, business key ``notify:<part>``,
  reconciled from ``calls.log``); the edit of ``doc/d`` asks for ``pay`` (kind ``spend``,
  key ``pay:INV-54``, approval required: the run parks until a second process decides);
* the held-out check passes only when every part is at its target;
* a reflector writes a note after each failed cycle (task-scoped memory).

``calls.log`` holds one line per real call of an effect: ``<effect> <key>``.

``KC_SELFKILL=WHERE:N`` (``actor``, ``fields``, ``audit``, ``notify``, ``pay``): the N-th call of
that function in this process SIGKILLs it (``notify`` and ``pay`` after their outside call,
before it returns): kill points for a process the kill harness cannot hook, ``loopwright run``
and ``loopwright resume``.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import loopwright as lw

TARGET = {"a": "A-OK", "b": "B-OK", "c": "C-OK", "d": "D-MEM"}
MEMORY_RULE = {"d": TARGET["d"]}
TASK: dict[str, Any] = {
    "goal": "make every part of the doc match its target",
    "artifacts": {"doc": dict.fromkeys(TARGET, "draft")},
    "plan": [
        {"id": "s1", "title": "head", "parts": ["doc/a", "doc/b"]},
        {"id": "s2", "title": "body", "depends_on": ["s1"], "parts": ["doc/c"]},
        {"id": "s3", "title": "tail", "depends_on": ["s2"], "parts": ["doc/d"]},
    ],
}


_SEEN: dict[str, int] = {}


def _maybe_die(where: str) -> None:
    spec = os.environ.get("KC_SELFKILL", "")
    _SEEN[where] = _SEEN.get(where, 0) + 1
    if spec == f"{where}:{_SEEN[where]}":
        os.kill(os.getpid(), signal.SIGKILL)


def _calls() -> Path:
    return Path(os.environ["KC_DIR"]) / "calls.log"


def _called(name: str, key: str) -> bool:
    p = _calls()
    return p.exists() and f"{name} {key}" in p.read_text().splitlines()


def _call(name: str, key: str) -> None:
    with open(_calls(), "a") as fh:  # one small appended line, in the file before the result
        fh.write(f"{name} {key}\n")


@lw.effect(
    "send",
    key=lambda a: f"notify:{a['part']}",
    requires_success=False,
    reconcile=lambda key: {"sent": key} if _called("notify", key) else None,
)
def notify(part: str, *, key: str) -> dict[str, Any]:
    _call("notify", key)
    _maybe_die("notify")
    return {"sent": key}


@lw.effect(
    "spend",
    key=lambda a: f"pay:{a['invoice']}",
    # what the call returns: a kill after the call leaves the result to this hook
    reconcile=lambda key: {"paid": key, "amount": 120.0} if _called("pay", key) else None,
)
def pay(invoice: str, amount: float, *, key: str) -> dict[str, Any]:
    _call("pay", key)
    _maybe_die("pay")
    return {"paid": key, "amount": amount}


def actor(ctx: lw.Context) -> lw.Proposal:
    _maybe_die("actor")
    usage = lw.Usage(cost_usd=0.01, tokens=100 + ctx.cycle)
    located = [f for f in ctx.findings if f.part and not ctx.is_accepted("doc", f.part)]
    if not located:
        return lw.Proposal(note="nothing to repair", usage=usage)
    f = sorted(located, key=lambda f: f.part or "")[0]
    part = f.part or ""
    if part == "d":
        rules = [
            m["rule"] for m in ctx.memory if isinstance(m.get("rule"), dict) and "d" in m["rule"]
        ]
        value = str(rules[0]["d"]) if rules else "D-GUESS"
    else:
        value = str(f.evidence.get("expected"))
        if part == "c" and not str(ctx.artifacts["doc"]["c"]).endswith("~"):
            value += "~"  # a near miss first
    effects = [notify.call(part=part)]
    if part == "d":
        effects.append(pay.call(invoice="INV-54", amount=120.0))
    return lw.Proposal(
        edits=(lw.Edit("doc", part, value),),
        effects=tuple(effects),
        note=f"repair {part}",
        usage=usage,
    )


def fields(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
    _maybe_die("fields")
    have = state.values()["doc"]
    bad = [
        lw.Finding(
            f"{p} is {have.get(p)!r}",
            "doc",
            p,
            "content",
            evidence={} if p == "d" else {"expected": want},
        )
        for p, want in TARGET.items()
        if have.get(p) != want and not (p == "b" and str(have.get(p)).startswith("B-OK"))
    ]
    return lw.Verdict(
        passed=not bad,
        score=1 - len(bad) / len(TARGET),
        findings=tuple(bad),
        usage=lw.Usage(cost_usd=0.001, tokens=3),
    )


def audit(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
    _maybe_die("audit")
    have = state.values()["doc"]
    right = sum(have.get(p) == want for p, want in TARGET.items())
    return lw.Verdict(passed=right == len(TARGET), score=right / len(TARGET))


def reflector(ctx: lw.Context, verdicts: Any) -> str:
    found = sorted(f.message for v in dict(verdicts).values() for f in v.findings)
    return f"cycle {ctx.cycle}: " + "; ".join(found or ["clean"])


def build_loop() -> lw.Loop:
    return lw.Loop(
        name="killcmp",
        project="kc",
        actor=actor,
        verifiers=[
            lw.Check(fn=fields, name="fields"),
            lw.Check(fn=audit, name="audit", held_out=True),
        ],
        contract=lw.Contract(
            success=lw.Success(min_score=0.99, accept_parts="when_clean"),
            no_progress=lw.NoProgress(cycles=4),
            budget=lw.Budget(max_cycles=14, max_cost_usd=5.0),
        ),
        effects=(notify, pay),
        approvals=lw.ApprovalPolicy(
            (
                lw.PolicyRule(kind="send", action="allow"),
                lw.PolicyRule(kind="spend", action="require", name="pay"),
            )
        ),
        reflector=reflector,
    )
