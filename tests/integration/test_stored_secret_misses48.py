"""Invariant 9 for the shapes docs/security.md listed as known misses until stop 48: a
``.netrc`` entry with an ``account`` (and one with its password first) in an actor's error, a
Twilio auth token written apart from its account's SID in a verifier's finding, and a short
registered secret (6 bytes) in base64 at an alignment stop 47 did not search, in evidence.
Each is planted through the engine into a SQLite store; then the database files and the trace
are searched for it byte by byte, and what was stored is read back masked."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

import loopwright as lw
from loopwright import _redact
from loopwright.trace import otlp_trace

NETRC_PW = "netrcPw48planted"
NETRC_FIRST_PW = "netrcFirst48pw"
TW_SID = "AC" + "7e2a" * 8
TW_TOKEN = "c4b9" * 8
SHORT = "Zq9!x7"  # 6 bytes: its base64 after one byte was not searched for
SHORT_B64 = base64.b64encode(b"x" + SHORT.encode() + b"-tail").decode()


@pytest.fixture(autouse=True)
def _clean_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_redact, "_registered", set())


def test_the_shapes_found_by_stop_48_are_not_stored(tmp_path: Path) -> None:
    lw.register_secret(SHORT)

    def actor(ctx: lw.Context) -> lw.Proposal:
        if ctx.cycle == 2:
            raise RuntimeError(
                f"~/.netrc: machine h login u account acme password {NETRC_PW}\n"
                f"machine g password {NETRC_FIRST_PW} login v"
            )
        return lw.Proposal.edit("doc", {"a": ctx.cycle})

    def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        finding = lw.Finding(
            f"twilio account {TW_SID} rejected token {TW_TOKEN}",
            evidence={"request": f"POST /v1 body={SHORT_B64}"},
        )
        return lw.Verdict(passed=False, score=0.5, findings=(finding,))

    loop = lw.Loop(
        name="misses48",
        actor=actor,
        verifiers=[check],
        contract=lw.Contract(budget=lw.Budget(max_cycles=3)),
        retry=lw.RetryPolicy(attempts=1),
    )
    db = tmp_path / "s.db"
    with lw.Runtime(str(db)) as rt:
        r = rt.run_sync(loop, {"artifacts": {"doc": {"a": 0}}}, task_key="misses48")
        assert r.status == "escalated"
        packet = str(r.packet)
        assert "account acme password ***" in packet  # the error, read back masked
        assert "machine g password *** login v" in packet
        trace = json.dumps(otlp_trace(rt.store, r.run_id))
    needles = (NETRC_PW, NETRC_FIRST_PW, TW_TOKEN, SHORT_B64)
    raw = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith("s.db"))
    assert [n for n in needles if n.encode() in raw] == []
    assert [n for n in needles if n in trace] == []
    # stored, masked: not dropped (the account's SID is an identifier and stays)
    assert f"account {TW_SID} rejected token ***".encode() in raw
    assert b"body=***" in raw
