"""The process's own API key (a value given to ``register_secret``, as the model adapters do)
written by an actor into a part's value, whole or in a piece: masked when the proposal is
taken in, so the state, the verifiers, the stored version, the trace and ``show`` all hold the
same masked value (a part's value is otherwise the work itself, stored as written). Other
secret-looking text in the work is kept: only registered values are (stop 52)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from doc_loop import TASK

import loopwright as lw
from loopwright._redact import REDACTED
from loopwright.cli import main

KEY = "sk-proj-Wd5Gh8Jk2Lm4Np6Qr9St3Vx7Yz1Bc0Df4Hg"
SHAPED = "ghp_" + "k3" * 18  # a token's shape: the work may be about tokens, kept there


def test_a_registered_key_in_an_edit_is_masked_before_anything_sees_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lw.register_secret(KEY)
    seen: list[dict[str, object]] = []

    def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        seen.append(dict(state.artifacts["doc"].values()))
        seen.append({e.part: e.value for e in proposal.edits})
        return lw.Verdict(passed=True, score=1.0)

    loop = lw.Loop(
        name="work",
        actor=lambda ctx: lw.Proposal.edit(
            "doc",
            {"a": f"use {KEY} here", "b": {"env": [KEY[8:].upper()]}, "c": f"sample {SHAPED}"},
        ),
        verifiers=[lw.Check(fn=check, name="check")],
        contract=lw.Contract(budget=lw.Budget(max_cycles=1)),
    )
    db = tmp_path / "s.db"
    with lw.Runtime(db) as rt:
        r = rt.run_sync(loop, TASK)
    want = {"a": f"use {REDACTED} here", "b": {"env": [REDACTED]}, "c": f"sample {SHAPED}"}
    assert seen == [want, want]
    assert dict(r.state.artifacts["doc"].values()) == want
    raw = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith("s.db"))
    for piece in (KEY, KEY[8:], KEY[8:].upper(), KEY[-20:], KEY[-20:].upper()):
        assert piece.encode() not in raw, piece
    assert SHAPED.encode() in raw  # the work's own text, not registered: kept
    capsys.readouterr()
    assert main(["show", r.run_id, "--store", str(db), "--json"]) == 0
    shown = capsys.readouterr().out
    assert main(["trace", r.run_id, "--store", str(db)]) == 0
    traced = capsys.readouterr().out
    for out in (shown, traced):
        assert KEY[-20:].lower() not in out.lower()
    assert json.dumps(f"use {REDACTED} here") in shown
