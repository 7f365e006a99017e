"""Invariant 9 for the forms stop 46's probe found stored in clear (secrets46): a key on the line
after an escaped line break in an exception's printed message, a known key in hex in a
verifier's evidence, and a model server echoing the configured key in hex and percent-encoded
in its 401 body. Each is planted through the engine; then the database files and ``trace`` are
searched for it byte by byte."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from support.deadline_clock import HANG_S
from support.fake_openai import FakeOpenAI, Reply, fail

import loopwright as lw
from loopwright import _redact
from loopwright.adapters import ChatActor
from loopwright.cli import main

AWS = "AKIAQPLANTED46ABCDEF"
ENV_KEY = "planted-env-key-46c1"
ADAPTER_KEY = "planted/adapter+key:46&x"


@pytest.fixture(autouse=True)
def _planted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SERVICE_API_KEY", ENV_KEY)
    _redact.reset()


TASK = {"artifacts": {"doc": {"a": 0}}}


def _loop(name: str, actor: Any, check: Any, *, cycles: int) -> lw.Loop:
    """One try a call (the first error escalates), ``cycles`` at most."""
    return lw.Loop(
        name=name,
        actor=actor,
        verifiers=[check],
        contract=lw.Contract(budget=lw.Budget(max_cycles=cycles)),
        retry=lw.RetryPolicy(attempts=1),
    )


def _stored(tmp: Path, needles: tuple[str, ...]) -> list[str]:
    raw = b"".join(p.read_bytes() for p in tmp.iterdir() if p.name.startswith("s.db"))
    return [n for n in needles if n.encode() in raw]


def test_an_escaped_key_and_a_hex_key_in_errors_and_evidence_are_not_stored(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    env_hex = ENV_KEY.encode().hex()

    def actor(ctx: lw.Context) -> lw.Proposal:
        if ctx.cycle == 2:
            # a printed multi-line string: its line breaks read ``\n``
            raise ValueError(repr(f"config was:\n{AWS}\nretry"))
        return lw.Proposal.edit("doc", {"a": ctx.cycle}, note=f"key bytes {env_hex}")

    def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        finding = lw.Finding(f"sent {env_hex.upper()}", evidence={"dump": f"0a{env_hex}0d"})
        return lw.Verdict(passed=False, score=0.5, findings=(finding,))

    loop = _loop("forms", actor, check, cycles=3)
    db = tmp_path / "s.db"
    with lw.Runtime(str(db)) as rt:
        r = rt.run_sync(loop, TASK, task_key="forms")
    assert r.status == "escalated" and r.cycles == 1
    assert "config was:\\\\n***\\\\nretry" in str(r.packet)  # the error is there, masked
    needles = (AWS, env_hex, env_hex.upper())
    assert _stored(tmp_path, needles) == []
    assert main(["trace", r.run_id, "--store", str(db)]) == 0
    out = capsys.readouterr()
    assert "key bytes ***" in out.out
    assert [n for n in needles if n in out.out + out.err] == []


def test_a_model_server_echoing_the_key_encoded_is_not_stored(tmp_path: Path) -> None:
    from urllib.parse import quote

    key_hex = ADAPTER_KEY.encode().hex()
    with FakeOpenAI() as server:
        server.script(
            fail(401, f"key {quote(ADAPTER_KEY, safe='')} (hex {key_hex}) is not valid"),
            model="m",
        )
        actor = ChatActor("m", base_url=f"{server.base_url}", api_key=ADAPTER_KEY, timeout_s=HANG_S)
        passes = lambda s, p: lw.Verdict(passed=True, score=1.0)  # noqa: E731
        with lw.Runtime(str(tmp_path / "s.db")) as rt:
            r = rt.run_sync(_loop("echo", actor, passes, cycles=1), TASK, task_key="echo")
    assert r.status == "escalated"
    assert "key *** (hex ***) is not valid" in str(r.packet)
    assert _stored(tmp_path, (quote(ADAPTER_KEY, safe=""), key_hex, ADAPTER_KEY)) == []


def test_a_model_servers_cookie_in_the_http_clients_debug_log_is_masked(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """httpcore logs a reply's headers at DEBUG from a logger of its own module
    (``httpcore2.http11``), whose records passed the adapters' masking filter by: it sat on
    ``httpcore``, and a filter sees only the records logged to its own logger."""
    cookie = "sid=planted-session-46f2"
    caplog.set_level(logging.DEBUG)
    with FakeOpenAI() as server:
        server.script(Reply(status=401, headers={"Set-Cookie": cookie}, error="no"), model="m")
        actor = ChatActor("m", base_url=server.base_url, api_key="planted-key-46", timeout_s=HANG_S)
        passes = lambda s, p: lw.Verdict(passed=True, score=1.0)  # noqa: E731
        with lw.Runtime(str(tmp_path / "s.db")) as rt:
            r = rt.run_sync(_loop("cookie", actor, passes, cycles=1), TASK, task_key="cookie")
    assert r.status == "escalated"
    heard = [rec.getMessage() for rec in caplog.records if "Set-Cookie" in rec.getMessage()]
    assert heard  # the headers were logged: the path is exercised
    assert all("b'Set-Cookie', b'***'" in m for m in heard)
    assert cookie not in caplog.text
