"""``loopwright trace`` and ``loopwright export`` as a user drives them: the CLI in its own
process, a real SQLite file, and a collector on loopback for ``--send``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from forkserver import run_cli


def lw(*args: str, cwd: Path, store: Path) -> subprocess.CompletedProcess[str]:
    """The installed ``loopwright`` in its own process (``run_cli``: forked from a process that
    imported the CLI once, or a real subprocess)."""
    env = {k: v for k, v in os.environ.items() if k != "LOOPWRIGHT_DEBUG"}
    env["LOOPWRIGHT_STORE"] = str(store)
    exe = Path(sys.executable).with_name("loopwright")
    return run_cli([str(exe), *args], env, timeout=120, cwd=cwd)


def _task(path: Path, pay: int = 10, **extra: object) -> Path:
    data = {"id": path.stem, "artifacts": {"doc": {"a": 0, "b": 0, "c": 3, "pay": pay}}, **extra}
    path.write_text(json.dumps(data))
    return path


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The e2e loop (tests/e2e/conftest.py), shared by this module's tests (they only read)."""
    from .conftest import LOOP_MODULE, SPEC

    path = tmp_path_factory.mktemp("cli_trace")
    (path / "loopmod.py").write_text(LOOP_MODULE)
    (path / "loop.toml").write_text(SPEC)
    return path


@pytest.fixture(scope="module")
def runs(project: Path) -> dict[str, str]:
    """Three runs in ``project/s.db``: accepted, stopped (stuck), parked for approval."""
    store = project / "s.db"
    ids = {}
    for name, task, code in (
        ("accepted", _task(project / "ok.json"), 0),
        ("stuck", _task(project / "stuck.json", stuck=True), 3),
        ("parked", _task(project / "park.json", pay=0), 4),
    ):
        r = lw("run", "loop.toml", "--task", str(task), "--json", cwd=project, store=store)
        assert r.returncode == code, r.stdout + r.stderr
        ids[name] = json.loads(r.stdout)[0]["run_id"]
    return ids


def _show(run_id: str, project: Path) -> dict[str, Any]:
    r = lw("show", run_id, "--json", cwd=project, store=project / "s.db")
    assert r.returncode == 0, r.stderr
    data: dict[str, Any] = json.loads(r.stdout)
    return data


def test_trace_jsonl_is_the_store_s_event_log(project: Path, runs: dict[str, str]) -> None:
    store = project / "s.db"
    for run_id in runs.values():
        r = lw("trace", run_id[:8], cwd=project, store=store)
        assert r.returncode == 0, r.stderr
        lines = [json.loads(x) for x in r.stdout.splitlines()]
        shown = _show(run_id, project)
        header, events = lines[0], lines[1:]
        assert (header["kind"], header["seq"], header["run_id"]) == ("run", 0, run_id)
        assert header["format"] == "loopwright.trace/1"
        assert header["data"]["status"] == shown["run"]["status"]
        assert header["data"]["events"] == len(shown["events"])
        assert [e["seq"] for e in events] == list(range(1, len(shown["events"]) + 1))
        assert [(e["event_id"], e["kind"], e["cycle"], e["data"]) for e in events] == [
            (e["id"], e["kind"], e["cycle"], e["data"]) for e in shown["events"]
        ]
        assert all(
            set(e) == {"format", "run_id", "seq", "ts", "cycle", "kind", "data", "event_id"}
            for e in events
        )


def test_trace_otlp_json_and_out_file(project: Path, runs: dict[str, str]) -> None:
    store = project / "s.db"
    run_id = runs["accepted"]
    r = lw("trace", run_id, "--format", "otlp-json", cwd=project, store=store)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    spans = doc["resourceSpans"][0]["scopeSpans"][0]["spans"]
    shown = _show(run_id, project)
    names = [s["name"] for s in spans]
    assert names.count("run e2e") == 1
    assert names.count("invoke_agent e2e") == len(shown["cycles"])
    assert sum(n.startswith("cycle ") for n in names) == len(shown["cycles"])
    assert sum(n.startswith("verify ") for n in names) == 2 * len(shown["cycles"])
    root = next(s for s in spans if "parentSpanId" not in s)
    attrs = {a["key"]: a["value"] for a in root["attributes"]}
    assert attrs["loopwright.stop_reason"] == {"stringValue": "success"}
    ids = {s["spanId"] for s in spans}
    assert all(s["parentSpanId"] in ids for s in spans if "parentSpanId" in s)

    out = project / "trace.json"
    r = lw("trace", run_id, "--format", "otlp-json", "--out", str(out), cwd=project, store=store)
    assert r.returncode == 0, r.stderr
    assert r.stdout == ""
    assert f"wrote {len(spans)} span(s)" in r.stderr
    assert json.loads(out.read_text()) == doc


def test_exports(project: Path, runs: dict[str, str]) -> None:
    store = project / "s.db"
    out = project / "cases.jsonl"
    r = lw("export", "eval-cases", "--out", str(out), cwd=project, store=store)
    assert r.returncode == 0, r.stderr
    cases = [json.loads(x) for x in out.read_text().splitlines()]
    assert {c["run_id"] for c in cases} == {runs["accepted"], runs["stuck"]}  # ended runs
    assert "wrote 2 eval case(s)" in r.stderr
    for c in cases:
        shown = _show(c["run_id"], project)
        concluded = [x for x in shown["cycles"] if "proposal" in x]
        assert [x["proposal"] for x in c["cycles"]] == [x["proposal"] for x in concluded]
        assert c["stop_reason"] == shown["run"]["stop_reason"]
    r = lw("export", "eval-cases", "--project", "elsewhere", cwd=project, store=store)
    assert (r.returncode, r.stdout) == (0, "")

    r = lw("export", "preference-pairs", cwd=project, store=store)
    assert r.returncode == 0, r.stderr
    pairs = [json.loads(x) for x in r.stdout.splitlines()]
    assert pairs, "the accepted run repaired what its earlier cycles got wrong"
    assert all(p["format"] == "loopwright.preference_pair/1" for p in pairs)
    assert f"wrote {len(pairs)} preference pair(s)" in r.stderr
    r = lw("export", "preference-pairs", "--match", "state", cwd=project, store=store)
    assert r.returncode == 0, r.stderr
    assert all(json.loads(x)["match"] == "state" for x in r.stdout.splitlines())


def test_bad_inputs_are_one_line_errors_with_exit_2(project: Path, runs: dict[str, str]) -> None:
    store = project / "s.db"
    run_id = runs["accepted"]
    cases = [
        (("trace", "no-such-run"), "no run"),
        (("trace", run_id, "--format", "xml"), "--format"),
        # a file where the folder should be is an error (a missing folder: test_cli_out_folders)
        (("trace", run_id, "--out", str(project / "s.db" / "t.jsonl")), "--out"),
        (("trace", run_id, "--send", "ftp://collector"), "--send: 'ftp://collector' is not"),
        (("trace", run_id, "--header", "A=b"), "--header"),
        (("trace", run_id, "--send", "http://127.0.0.1:9", "--header", "nope"), "--header"),
        (("trace", run_id, "--send", "http://127.0.0.1:9", "--encoding", "xml"), "--encoding"),
        (("export", "preference-pairs", "--match", "nope"), "--match"),
        (("export", "eval-cases", "--run", runs["parked"]), "not ended"),
        (("export", "eval-cases", "--run", "no-such-run"), "no run"),
        # the Python API names its parameter; the command its option
        (("export", "eval-cases", "--run", run_id, "--project", "x"), "--run: names the runs"),
        (("export", "eval-cases", "--run", runs["parked"]), "--run: run(s)"),
        (("export", "preference-pairs", "--run", run_id, "--loop", "x"), "--run: names the"),
    ]
    for args, what in cases:
        r = lw(*args, cwd=project, store=store)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("loopwright: error:"), (args, r.stderr)
        assert what in lines[0], (args, lines[0])
        assert r.stdout == "", args


def test_a_header_http_cannot_carry_is_one_line_that_hides_its_value(
    project: Path, runs: dict[str, str]
) -> None:
    """Outside probe, stop 51: a ``--header`` value holding a line break or a character
    outside Latin-1, or a name holding a colon, was an internal error (exit 1) whose text was
    the value: ``ValueError: Invalid header value b'tok3n…'``, a key on stderr, in CI logs.
    A header typed ``NAME: VALUE`` was echoed whole in the NAME=VALUE refusal."""
    key = "tok3nSECRETvalue99"
    cases = [
        (f"X-Api-Key={key}\nmore", "the value of X-Api-Key holds a line break"),
        (f"X-Api-Key={key}\u20ac", "outside Latin-1"),
        (f"X-Api-Key: {key}=x", "header name 'X-Api-Key' is followed by ':'"),
        (f"X-Api-Key: {key}", "'X-Api-Key'… is not NAME=VALUE"),
        (f"X-Api-Key {key}", "'X-Api-Key'… is not NAME=VALUE"),
    ]
    for header, what in cases:
        args = ("trace", runs["accepted"], "--send", "http://127.0.0.1:9", "--header", header)
        r = lw(*args, cwd=project, store=project / "s.db")
        assert r.returncode == 2, (header, r.stderr)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("loopwright: error: --header:"), r.stderr
        assert what in lines[0], (what, lines[0])
        assert key not in r.stderr + r.stdout


class _Collector:
    def __init__(self) -> None:
        self.bodies: list[tuple[str, bytes]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                outer.bodies.append((self.path, body))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)


@pytest.fixture
def collector() -> Iterator[_Collector]:
    col = _Collector()
    col.thread.start()
    try:
        yield col
    finally:
        col.server.shutdown()
        col.server.server_close()
        col.thread.join()


def test_send_posts_otlp_to_a_collector(
    project: Path, runs: dict[str, str], collector: _Collector
) -> None:
    store = project / "s.db"
    run_id = runs["parked"]
    r = lw("trace", run_id, "--send", collector.url, cwd=project, store=store)
    assert r.returncode == 0, r.stderr
    assert r.stdout == ""  # --send alone prints nothing
    [(path, body)] = collector.bodies
    assert path == "/v1/traces"
    expected = json.loads(
        lw("trace", run_id, "--format", "otlp-json", cwd=project, store=store).stdout
    )
    assert json.loads(body) == expected
    assert f"sent {len(expected['resourceSpans'][0]['scopeSpans'][0]['spans'])} span(s)" in (
        r.stderr
    )
    r = lw("trace", run_id, "--send", "http://127.0.0.1:9", cwd=project, store=store)
    assert r.returncode == 2
    assert "cannot reach the collector" in r.stderr
