"""``examples/llm_repair`` end to end: the CLI runs it against a scripted OpenAI-compatible server
on loopback, as a user would run it against Ollama or vLLM (only the environment differs)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from loopwright.testing import FakeOpenAI, fail, garbage, ok

from .conftest import cli

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "llm_repair"
WEB, WORKER, API = '"id": "web-prod"', '"id": "worker-staging"', '"id": "api-prod"'
PASS = {"score": 0.95, "passed": True, "summary": "suits the workload", "findings": []}
ACTOR_CALL = (120 * 1.5 + 30 * 6.0) / 1e6  # the fake's default usage at LOOPWRIGHT_LLM_PRICE
REVIEW_CALL = (120 * 0.5 + 30 * 2.0) / 1e6  # ...and at LOOPWRIGHT_REVIEWER_PRICE


def edits(**parts: Any) -> dict[str, Any]:
    return {
        "edits": [{"artifact": "config", "part": k, "value": v} for k, v in parts.items()],
        "note": f"set {', '.join(parts)}",
    }


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as s:
        for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "LOOPWRIGHT_ALLOW_SELF_REVIEW"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("LOOPWRIGHT_LLM_BASE_URL", s.base_url)
        monkeypatch.setenv("LOOPWRIGHT_LLM_MODEL", "fake-actor")
        monkeypatch.setenv("LOOPWRIGHT_LLM_PRICE", "1.5,6")
        monkeypatch.setenv("LOOPWRIGHT_LLM_TIMEOUT_S", "5")
        monkeypatch.setenv("LOOPWRIGHT_REVIEWER_MODEL", "fake-reviewer")
        monkeypatch.setenv("LOOPWRIGHT_REVIEWER_PRICE", "0.5,2")
        yield s


def test_llm_repair_example_end_to_end(tmp_path: Path, server: FakeOpenAI) -> None:
    # web-prod: a 429 asking for 1 s, then one good repair
    server.script(
        fail(429, "rate limited", retry_after=1),
        ok(edits(port=8443, tls=True, replicas=3, log_level="warning", timeout_s=30)),
        model="fake-actor",
        when=WEB,
    )
    server.script(ok(PASS), model="fake-reviewer", when=WEB)
    # worker-staging: a malformed reply, a repair the reviewer rejects, then its fix
    server.script(
        garbage(),
        ok(edits(port=9000, replicas=2, log_level="info", timeout_s=30)),
        ok(edits(timeout_s=600)),
        model="fake-actor",
        when=WORKER,
    )
    too_short = {
        "score": 0.5,
        "passed": False,
        "summary": "timeout too short",
        "findings": [
            {
                "artifact": "config",
                "part": "timeout_s",
                "dimension": "workload",
                "message": "30 s is too short for long batch jobs",
                "severity": "error",
            }
        ],
    }
    server.script(ok(too_short), ok(PASS), model="fake-reviewer", when=WORKER)
    # api-prod: the reviewer's server fails once with a 500
    server.script(ok(edits(tls=True, replicas=4)), model="fake-actor", when=API)
    server.script(fail(500), ok(PASS), model="fake-reviewer", when=API)

    store = tmp_path / "s.db"
    r = cli("run", str(EXAMPLE / "loop.toml"), cwd=tmp_path, store=store)
    assert r.returncode == 0, r.stdout + r.stderr
    assert server.pending == 0

    runs = {
        x["task_key"]: x
        for x in json.loads(cli("runs", "--json", cwd=tmp_path, store=store).stdout)
    }
    assert len(runs) == 3
    by_task = {key.rsplit(":", 1)[-1]: run for key, run in runs.items()}
    assert set(by_task) == {"web-prod", "worker-staging", "api-prod"}, runs.keys()
    for run in by_task.values():
        assert run["status"] == "accepted" and run["held_out_passed"] is True
        assert run["cost_usd"] > 0
    # cost = usage × the override, every call counted (the malformed reply's too)
    assert by_task["web-prod"]["cost_usd"] == pytest.approx(ACTOR_CALL + REVIEW_CALL)
    assert by_task["worker-staging"]["cost_usd"] == pytest.approx(3 * ACTOR_CALL + 2 * REVIEW_CALL)
    assert by_task["api-prod"]["cost_usd"] == pytest.approx(ACTOR_CALL + REVIEW_CALL)
    assert by_task["worker-staging"]["tokens"] == 5 * 150

    # Retry-After honoured: the retry came at least 1 s after the 429
    web = [q for q in server.requests_for("fake-actor") if WEB in q.text]
    assert len(web) == 2 and web[1].at - web[0].at >= 1.0
    # the reviewer's located finding reached the actor's next request; nothing held out did
    worker = [q for q in server.requests_for("fake-actor") if WORKER in q.text]
    assert len(worker) == 3
    assert "too short for long batch jobs" not in worker[1].text
    assert "config/timeout_s (workload by review): 30 s is too short" in worker[2].text
    for q in server.requests:  # worker-staging's held-out policy: a 60 s timeout floor
        assert '"held_out"' not in q.text and '"min_timeout_s": 60' not in q.text
        assert "policy_audit" not in q.text

    shown = json.loads(
        cli("show", by_task["worker-staging"]["run_id"], "--json", cwd=tmp_path, store=store).stdout
    )
    assert [c["cycle"] for c in shown["cycles"]] == [1, 2]


def test_spec_checks_without_a_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    r = cli("check", str(EXAMPLE / "loop.toml"), cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr


def test_turning_tls_off_parks_for_a_person(tmp_path: Path, server: FakeOpenAI) -> None:
    task = {
        "id": "edge",
        "goal": "Plain HTTP on port 80 for the health-check sidecar, one replica.",
        "artifacts": {"config": {"port": 80, "tls": True, "replicas": 1, "log_level": "info"}},
        "requirements": {"port": 80, "tls": False, "min_replicas": 1, "max_replicas": 1},
    }
    (tmp_path / "task.json").write_text(json.dumps(task))
    server.script(ok(edits(tls=False, timeout_s=10)), model="fake-actor")
    server.script(ok(PASS), model="fake-reviewer")
    store = tmp_path / "s.db"
    r = cli("run", str(EXAMPLE / "loop.toml"), "--task", "task.json", cwd=tmp_path, store=store)
    assert r.returncode == 4, r.stdout + r.stderr
    pending = json.loads(cli("approvals", "--json", cwd=tmp_path, store=store).stdout)
    assert [p["rule"] for p in pending] == ["tls_off"]


def test_offline_mode_needs_no_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith(("LOOPWRIGHT_LLM_", "LOOPWRIGHT_REVIEWER_", "OPENAI_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("LOOPWRIGHT_OFFLINE", "1")
    store = tmp_path / "s.db"
    r = cli("run", str(EXAMPLE / "loop.toml"), cwd=tmp_path, store=store)
    assert r.returncode == 0, r.stdout + r.stderr
    runs = json.loads(cli("runs", "--json", cwd=tmp_path, store=store).stdout)
    by_task = {x["task_key"].rsplit(":", 1)[-1]: x for x in runs}
    assert {k: (v["status"], v["held_out_passed"]) for k, v in by_task.items()} == {
        "web-prod": ("accepted", True),
        "worker-staging": ("accepted", True),
        "api-prod": ("accepted", True),
    }
    assert all(v["cost_usd"] > 0 and v["tokens"] > 0 for v in by_task.values())
    # the offline reviewer's finding (30 s is too short for batch jobs) cost one more cycle
    shown = json.loads(
        cli("show", by_task["worker-staging"]["run_id"], "--json", cwd=tmp_path, store=store).stdout
    )
    assert [c["cycle"] for c in shown["cycles"]] == [1, 2]
    assert {p.name for p in tmp_path.iterdir()} <= {"s.db", "s.db-wal", "s.db-shm"}


@pytest.mark.parametrize(
    ("var", "value", "shown"),
    [
        # it read "could not convert string to float: 'abc'", naming no variable
        ("LOOPWRIGHT_LLM_TIMEOUT_S", "abc", "LOOPWRIGHT_LLM_TIMEOUT_S: must be a number"),
        ("LOOPWRIGHT_REVIEWER_TIMEOUT_S", "1m", "LOOPWRIGHT_REVIEWER_TIMEOUT_S: must be a number"),
        # these were read as "no" without a word: a run against Ollama instead of offline
        ("LOOPWRIGHT_OFFLINE", "on", "LOOPWRIGHT_OFFLINE: must be 1 or 0"),
        ("LOOPWRIGHT_ALLOW_SELF_REVIEW", "maybe", "LOOPWRIGHT_ALLOW_SELF_REVIEW: must be 1 or 0"),
    ],
)
def test_a_mistyped_variable_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, var: str, value: str, shown: str
) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "LOOPWRIGHT_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(var, value)
    r = cli("check", str(EXAMPLE / "loop.toml"), cwd=tmp_path)
    assert r.returncode == 2 and shown in r.stderr, r.stdout + r.stderr
    assert "Traceback" not in r.stderr
