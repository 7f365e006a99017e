"""Issue 16 items 1 and 2: planted secrets never come back out.

Secrets are planted where the issue's probes found them leaking: an environment variable of the
parent (``OPENAI_API_KEY``), a configured API key that a model server echoes in its 401 body, a
``base_url`` with ``user:password@``, a task field ``password``, and candidate code in the
sandbox reading the parent's ``/proc/<ppid>/environ`` by the four known ways. Then every
output is grepped for them: the run results, the logs, ``show --json``, ``runs --json``,
``trace``, both exports, the ``ui`` start-up line, and the database files.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.deadline_clock import HANG_S
from support.fake_openai import FakeOpenAI, fail, ok

import loopwright as lw
from loopwright import _redact
from loopwright.adapters import ChatActor, ChatReviewer, PriceOverride
from loopwright.cli import main
from loopwright.verifiers import CommandVerifier, sandbox

ENV_SECRET = "sk-test-planted-env-5c1e9a77d3"
ECHOED_KEY = "planted-configured-key-8f2b41"
URL_PASSWORD = "planted-url-pw-0d9e"
TASK_PASSWORD = "planted-task-pw-77aa"
# None of these may reach the database or any output: the task's password is masked when the
# run is created (the run works from the masked task), the others wherever they turn up.
STORED = (ENV_SECRET, ECHOED_KEY, URL_PASSWORD, TASK_PASSWORD)
EVERYWHERE = STORED

LEAK = """
import os
def leak():
    got = []
    pid = os.getppid()
    for path in ("/proc/self/root/proc/%d/environ" % pid,
                 "/proc/self/cwd/../../proc/%d/environ" % pid,
                 "/proc/self/root/proc/%d/task/%d/environ" % (pid, pid)):
        try:
            got.append(open(path, "rb").read().decode("latin-1"))
        except BaseException as exc:
            got.append(type(exc).__name__)
    try:
        fd = os.open("%d/environ" % pid, os.O_RDONLY, dir_fd=os.open("/proc", os.O_RDONLY))
        got.append(os.read(fd, 1 << 20).decode("latin-1"))
    except BaseException as exc:
        got.append(type(exc).__name__)
    return " | ".join(got)
"""


@pytest.fixture(autouse=True)
def _planted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", ENV_SECRET)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("LOOPWRIGHT_STORE", raising=False)
    monkeypatch.setenv(sandbox.ALLOW_UNISOLATED_ENV, "1")  # where no bwrap: hook
    _redact.reset()


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as s:
        yield s


def _task() -> dict[str, Any]:
    return {
        "goal": "Make leak() return nothing",
        "password": TASK_PASSWORD,
        "artifacts": {"program": {"code": "def leak():\n    return 'x'\n"}},
    }


def _runs(
    tmp_path: Path, server: FakeOpenAI
) -> tuple[Path, list[lw.RunResult], list[dict[str, Any]]]:
    db = tmp_path / "s.db"
    url = f"http://bob:{URL_PASSWORD}@127.0.0.1:{server.port}/v1"
    contract = lw.Contract(success=lw.Success(min_score=1.0), budget=lw.Budget(max_cycles=2))
    retry = lw.RetryPolicy(attempts=2, backoff_s=0.01, jitter=False)
    # 1: the model server echoes the configured key in its 401 body
    server.script(fail(401, f"Incorrect API key provided: {ECHOED_KEY}"), model="echo-m")
    echo = ChatActor("echo-m", base_url=url, api_key=ECHOED_KEY, timeout_s=HANG_S)
    # 2: the actor proposes code that reads the parent's environ; a reviewer behind a URL with
    # credentials judges it (its evidence names the URL)
    proposal = {"edits": [{"artifact": "program", "part": "code", "value": LEAK}], "note": "n"}
    server.script(ok(proposal), ok(proposal), model="actor-m")
    review = {"score": 0.1, "passed": False, "summary": "s", "findings": []}
    server.script(ok(review), ok(review), model="reviewer-m")
    price = PriceOverride(input_per_mtok=1.0, output_per_mtok=1.0)
    actor = ChatActor("actor-m", base_url=url, timeout_s=HANG_S, price=price)
    reviewer = ChatReviewer("reviewer-m", base_url=url, rubric="r", timeout_s=HANG_S, price=price)
    checks = [
        lw.Check(fn=CommandVerifier(tests=["assert leak() == ''"]), name="tests"),
        lw.Check(fn=reviewer, name="review"),
    ]
    results = []
    with lw.Runtime(str(db)) as rt:
        for name, a, vs in (
            ("echo", echo, [lw.Check(fn=_passes, name="ok")]),
            ("leak", actor, checks),
        ):
            loop = lw.Loop(name=name, actor=a, verifiers=vs, contract=contract, retry=retry)
            results.append(rt.run_sync(loop, _task(), task_key=name))
        states = [r.state.to_dict() for r in results]  # read while the store is open
    return db, results, states


def _passes(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
    return lw.Verdict(passed=True, score=1.0)  # never reached: the echo actor's call fails


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    code = main(list(argv))
    out = capsys.readouterr()
    assert code == 0, out.err
    return out.out + out.err


def _found(text: str, secrets: tuple[str, ...]) -> list[str]:
    return [s for s in secrets if s in text]


def test_planted_secrets_reach_no_output(
    tmp_path: Path,
    server: FakeOpenAI,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    db, (echo, leak), (_, visible) = _runs(tmp_path, server)
    assert echo.status == "escalated" and leak.cycles >= 1
    # the probes ran: the 401 came back, the candidate tried to read the parent's environ
    assert [r.model for r in server.requests].count("echo-m") == 1  # 401: needs a person
    assert "/proc/self/root/proc" in repr(visible)

    assert _found(repr(echo.packet) + repr(leak.packet), EVERYWHERE) == []
    assert _found(repr(visible), STORED) == []  # the state holds the task, its input, as given
    assert _found(caplog.text, EVERYWHERE) == []

    store = ["--store", str(db)]
    exports = _cli(capsys, "export", "eval-cases", *store)
    exports += _cli(capsys, "export", "preference-pairs", *store)
    assert re.search(r'"password":\s*"\*\*\*"', exports)
    assert _found(exports, EVERYWHERE) == []

    # show, runs and trace print what the store holds: no secret there
    shown = "".join(
        _cli(capsys, "show", run.run_id, "--json", *store)
        + _cli(capsys, "trace", run.run_id, *store)
        for run in (echo, leak)
    )
    shown += _cli(capsys, "runs", "--json", *store)
    assert _found(shown, STORED) == []

    files = [p for p in tmp_path.iterdir() if p.name.startswith("s.db")]
    raw = b"".join(p.read_bytes() for p in files)
    assert [s for s in STORED if s.encode() in raw] == []


def test_show_and_runs_mask_secret_task_fields(
    tmp_path: Path, server: FakeOpenAI, capsys: pytest.CaptureFixture[str]
) -> None:
    db, (echo, leak), _ = _runs(tmp_path, server)
    store = ["--store", str(db)]
    shown = _cli(capsys, "runs", "--json", *store)
    shown += "".join(_cli(capsys, "show", r.run_id, "--json", *store) for r in (echo, leak))
    assert _found(shown, EVERYWHERE) == []


def test_sandbox_output_never_carries_the_parent_environment(
    tmp_path: Path, server: FakeOpenAI
) -> None:
    _db, (_echo, leak), (_, state) = _runs(tmp_path, server)
    history = repr(state) + repr(leak.packet)
    assert ENV_SECRET not in history
    assert os.environ["OPENAI_API_KEY"] == ENV_SECRET  # it was there to be stolen


def test_ui_start_line_masks_the_store_password(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``loopwright ui`` printed a PostgreSQL password in clear; the app and server are stubbed
    (nothing listens), only the start-up line is read."""
    pytest.importorskip("uvicorn")
    import uvicorn

    import loopwright.web

    monkeypatch.setattr(loopwright.web, "create_app", lambda *a, **k: object())
    monkeypatch.setattr(uvicorn, "run", lambda *a, **k: None)
    monkeypatch.setenv("LOOPWRIGHT_UI_TOKEN", "t" * 32)
    url = f"postgresql://app:{URL_PASSWORD}@db.example:5432/loops"
    code = main(["ui", "--port", "0", "--store", url])  # any free port: nothing listens
    out = capsys.readouterr()
    assert code == 0, out.err
    assert "postgresql://***@db.example:5432/loops" in out.out
    assert URL_PASSWORD not in out.out + out.err


def test_a_base_url_password_echoed_by_the_server_is_not_stored(
    tmp_path: Path, server: FakeOpenAI
) -> None:
    """``user:password@`` in a ``base_url`` is sent as a Basic header, but neither the password
    nor the header's token was registered as a secret: a server echoing them in its error body
    had them stored (the packet, the journal, the model_call events). Now both are masked."""
    import base64

    password = "planted-base-pw-3e7c"
    token = base64.b64encode(f"bob:{password}".encode()).decode()
    server.script(
        fail(400, f"bad request from bob:{password}; header was 'Basic {token}'"), model="m"
    )
    url = f"http://bob:{password}@127.0.0.1:{server.port}/v1"
    actor = ChatActor("m", base_url=url, api_key="unused-key-value-1", timeout_s=HANG_S)
    loop = lw.Loop(
        name="echo",
        actor=actor,
        verifiers=[lambda s, p: lw.Verdict(passed=True, score=1.0)],
        contract=lw.Contract(budget=lw.Budget(max_cycles=1)),
        retry=lw.RetryPolicy(attempts=1),
    )
    with lw.Runtime(str(tmp_path / "s.db")) as rt:
        r = rt.run_sync(loop, _task(), task_key="echo")
    assert r.status == "escalated"
    assert "bob:***" in str(r.packet) and "Basic ***" in str(r.packet)
    raw = b"".join(p.read_bytes() for p in tmp_path.glob("s.db*"))
    assert password.encode() not in raw and token.rstrip("=").encode() not in raw


def test_secret_fields_of_a_spec_mask_the_task_of_loopwright_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A spec's ``secret_fields`` (docs/security.md: declare the task fields that hold secrets
    by name) reach the store masked through ``loopwright run``; before, the key was refused as
    unknown and there was no way to declare one in a spec."""
    _redact.reset()
    secret = "DE44500105175407324931"
    (tmp_path / "code.py").write_text(
        "import loopwright as lw\n"
        "def propose(ctx):\n"
        "    return lw.Proposal.edit('doc', {'a': 1})\n"
        "def check(state, proposal):\n"
        "    return lw.Verdict(passed=True, score=1.0)\n"
    )
    (tmp_path / "loop.toml").write_text(
        'name = "pay"\nsecret_fields = ["iban"]\n[actor]\nref = "code.py:propose"\n'
        '[[verifiers]]\nref = "code.py:check"\n[contract.budget]\nmax_cycles = 2\n'
    )
    task = tmp_path / "t.json"
    task.write_text(json.dumps({"iban": secret, "artifacts": {"doc": {"a": 0}}}))
    db = tmp_path / "s.db"
    code = main(["run", str(tmp_path / "loop.toml"), "--task", str(task), "--store", str(db)])
    out = capsys.readouterr()
    assert code == 0, out.err
    raw = b"".join(p.read_bytes() for p in tmp_path.glob("s.db*"))
    assert secret.encode() not in raw and secret not in out.out + out.err
    shown = _cli(capsys, "runs", "--json", "--store", str(db))
    assert json.loads(shown)[0]["status"] == "accepted"


def test_a_store_url_password_parameter_is_masked_in_cli_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--store 'postgresql://…?sslpassword=X'`` printed X in the error that the store could
    not be opened (and a file path the same way in "no store at …")."""
    secret = "planted-sslpw-6d1a"
    for url in (
        f"postgresql://app@127.0.0.1:1/loops?sslpassword={secret}&connect_timeout=5",
        f"{tmp_path}/missing.db?sslpassword={secret}",
    ):
        assert main(["runs", "--store", url]) != 0
        out = capsys.readouterr()
        assert "sslpassword=***" in out.err, out.err
        assert secret not in out.out + out.err


def test_a_dataclass_in_a_verdicts_evidence_prints_no_secret_into_the_store(
    tmp_path: Path,
) -> None:
    """A verifier's evidence holding a dataclass whose ``str()`` names an environment secret:
    the store writes the ``str()``, so that is what the redaction net must read."""
    import dataclasses

    @dataclasses.dataclass
    class Probe:
        status: int = 200

        def __str__(self) -> str:
            return f"Probe(status={self.status}, auth={os.environ['OPENAI_API_KEY']})"

    def propose(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal.edit("doc", {"a": ctx.cycle})

    def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        finding = lw.Finding(message="probed", evidence={"probe": Probe()})
        return lw.Verdict(passed=False, score=0.1, findings=[finding], evidence={"p": Probe()})

    db = tmp_path / "s.db"
    contract = lw.Contract(budget=lw.Budget(max_cycles=3))
    loop = lw.Loop(name="dc", actor=propose, verifiers=[check], contract=contract)
    with lw.Runtime(str(db)) as rt:
        r = rt.run_sync(loop, {"artifacts": {"doc": {"a": 0}}}, task_key="dc")
        assert r.cycles == 3
    raw = b"".join(p.read_bytes() for p in tmp_path.glob("s.db*"))
    assert b"Probe(status=200, auth=***)" in raw  # the str() is what is stored, masked
    assert ENV_SECRET.encode() not in raw


def test_an_unpriced_models_warning_masks_the_base_urls_password(
    tmp_path: Path, server: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    """A model genai-prices has no price for is warned about once, naming where it is: the
    ``base_url`` as given, ``user:password@`` and all, went to the log as it was."""
    caplog.set_level(logging.WARNING, logger="loopwright.adapters")
    url = f"http://bob:{URL_PASSWORD}@127.0.0.1:{server.port}/v1"
    fix = {"edits": [{"artifact": "program", "part": "code", "value": "x = 1"}], "note": "n"}
    server.script(ok(fix), model="unpriced-m")
    actor = ChatActor("unpriced-m", base_url=url, timeout_s=HANG_S)  # no price: not in the table
    loop = lw.Loop(
        name="unpriced",
        actor=actor,
        verifiers=[lw.Check(fn=_passes, name="ok")],
        contract=lw.Contract(budget=lw.Budget(max_cycles=1)),
    )
    with lw.Runtime(str(tmp_path / "s.db")) as rt:
        assert rt.run_sync(loop, _task(), task_key="unpriced").status == "accepted"
    warned = [r.getMessage() for r in caplog.records if "cost counted as 0" in r.getMessage()]
    assert len(warned) == 1  # the warning was given: the path is exercised
    assert _found(caplog.text, EVERYWHERE) == []
