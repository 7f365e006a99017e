"""A person's edit made where the loop does not run (``loopwright edit``, the dashboard) is
masked for the loop's own secrets: the API key its model adapter reads from the environment
and the password of its ``base_url``. Those processes build no adapter of their own, so they
had registered nothing and stored a key pasted into an edit in clear (invariant 9); they now
build the run's loop from its spec first (``_spec.register_run_secrets``), which calls nothing.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.dashboard import dashboard

import loopwright as lw
from loopwright import _redact
from loopwright._redact import redact_text
from loopwright._spec import load_spec, register_run_secrets

from .conftest import cli

KEY = "Zq7Rm2Vx9Kp4Wt6Ly1Nb8Hd3Gs5Fj0Ce"  # the model key, in the environment only
PW = "Px8Lw3Qz6Rk1Vm9T"  # the password in the spec's base_url
TOKEN = "dashboard-token-0123456789"
LOCAL = "http://127.0.0.1"

SPEC = f"""
name = "keys"
[actor]
ref = "loopwright.adapters:ChatActor"
options = {{ model = "m", base_url = "http://bob:{PW}@127.0.0.1:9/v1" }}
[[verifiers]]
ref = "checks.py:check"
[contract.budget]
max_cycles = 2
"""

CHECKS = """
import loopwright as lw

def check(state, proposal):
    return lw.Verdict(passed=False, score=0.5)
"""


@pytest.fixture
def run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, str]:
    """A run created from the spec (not run: no model is called), in a store of its own; this
    process's registry emptied again after, as the CLI's or the dashboard's would be."""
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    (tmp_path / "checks.py").write_text(CHECKS)
    (tmp_path / "loop.toml").write_text(SPEC)
    db = tmp_path / "s.db"
    with lw.Runtime(db) as rt:
        rec, _ = rt.create(load_spec(tmp_path / "loop.toml"), {"artifacts": {"doc": {"a": ""}}})
    _redact.reset()
    return db, rec.run_id


PASTED = f"key {KEY} again {KEY[3:22].upper()} proxy {PW}"


def _stored_in_clear(db: Path) -> list[str]:
    raw = b"".join(p.read_bytes() for p in db.parent.iterdir() if p.name.startswith("s.db"))
    low = raw.lower()
    pieces = {KEY[i : i + 16] for i in range(len(KEY) - 15)} | {PW}
    return sorted(p for p in pieces if p.lower().encode() in low)


def test_a_key_pasted_into_an_edit_from_the_cli_is_not_stored(
    run: tuple[Path, str], tmp_path: Path
) -> None:
    db, run_id = run
    done = cli("edit", run_id, "doc/a", "--value", PASTED, "--by", "ann", cwd=tmp_path, store=db)
    assert done.returncode == 0, done.stderr
    assert _stored_in_clear(db) == []
    with lw.Runtime(db) as rt:
        assert rt.result(run_id).state.values()["doc"]["a"] == "key *** again *** proxy ***"


def test_a_key_pasted_into_an_edit_on_the_dashboard_is_not_stored(run: tuple[Path, str]) -> None:
    db, run_id = run
    c = dashboard(str(db), token=TOKEN, identity="ana")
    r = c.post(
        f"/api/runs/{run_id}/parts/doc/a",
        json={"value": PASTED},
        headers={"Authorization": f"Bearer {TOKEN}"},
    )
    assert r.status_code == 200, r.text
    assert _stored_in_clear(db) == []


def test_a_spec_loaded_once_registers_again_after_the_registry_is_reset(
    run: tuple[Path, str],
) -> None:
    # The dashboard loads a spec once per file as it is; the tests' reset of the registry
    # (tests/conftest.py) forgets what it registered, so the memo must not outlive it: a
    # later test editing a run of the same spec file found its key unmasked
    db, run_id = run
    with lw.Runtime(db) as rt:
        rec = rt.store.get_run(run_id)
    piece = KEY[2:20].upper()  # (the whole key is masked anyway: OPENAI_API_KEY's value)
    assert register_run_secrets(rec)
    assert redact_text(f"x {piece} {PW}") == "x *** ***"
    _redact.reset()
    assert redact_text(f"x {piece} {PW}") == f"x {piece} {PW}"
    assert register_run_secrets(rec)
    assert redact_text(f"x {piece} {PW}") == "x *** ***"


def _parked(project: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, dict[str, str]]:
    """A run parked on a request, of a loop that registers its own key where its spec's
    module is imported (as docs/security.md tells), from a variable whose name does not look
    secret; run by another process (this one has not imported the module)."""
    monkeypatch.setenv("MODEL_CRED", KEY)
    mod = project / "loopmod.py"
    mod.write_text("import os\nimport loopwright as lw\n" + mod.read_text())
    mod.write_text(mod.read_text() + "\nlw.register_secret(os.environ['MODEL_CRED'])\n")
    store = project / "s.db"
    task = project / "t.json"
    task.write_text(json.dumps({"artifacts": {"doc": {"a": 0, "b": 0, "c": 3, "pay": 0}}}))
    parked = cli("run", "loop.toml", "--task", str(task), cwd=project, store=store)
    assert parked.returncode == 4, parked.stdout + parked.stderr  # the payment's change waits
    (pending,) = json.loads(cli("approvals", "--json", cwd=project, store=store).stdout)
    return store, pending


def _key_pieces_in(store: Path) -> list[str]:
    raw = b"".join(p.read_bytes() for p in store.parent.iterdir() if p.name.startswith("s.db"))
    return [KEY[i : i + 16] for i in range(len(KEY) - 15) if KEY[i : i + 16].encode() in raw]


def test_a_key_pasted_into_a_decisions_note_from_the_cli_is_not_stored(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `loopwright approve` imported nothing of the loop: the note kept the key in clear
    store, pending = _parked(project, monkeypatch)
    note = f"ok, the key was {KEY}"
    done = cli(
        "approve", pending["run_id"], "--by", "ana", "--note", note, cwd=project, store=store
    )
    assert done.returncode == 0, done.stderr
    assert _key_pieces_in(store) == []


def test_a_key_pasted_into_a_decisions_note_on_the_dashboard_is_not_stored(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, pending = _parked(project, monkeypatch)
    c = dashboard(str(store), token=TOKEN, identity="ana")
    r = c.post(
        f"/api/approvals/{pending['approval_id']}/approve",
        json={"note": f"ok, the key was {KEY}"},
        headers={"Authorization": f"Bearer {TOKEN}"},
    )
    assert r.status_code == 200, r.text
    for t in c.app.state.resumes:  # type: ignore[attr-defined]  (the resume it started)
        t.join(60)
    assert _key_pieces_in(store) == []


def test_a_key_pasted_into_a_settled_result_is_not_stored(
    run: tuple[Path, str], tmp_path: Path
) -> None:
    """review53c: ``loopwright settle`` writes a person's result and note into the run, as an
    edit or a decision does (effects53b and secrets53b were merged side by side): it builds
    the run's loop first too, so a key the loop's adapter reads is masked in them."""
    db, run_id = run
    with lw.Runtime(db) as rt:  # an effect left in doubt (as a crash inside it leaves one)
        token = rt.store.acquire_lease(run_id, "test", 30.0)
        data = {"name": "pay", "kind": "spend", "cause": "may have acted"}
        rt.store.journal_put(
            run_id, token, key="effect:pay:1", kind="effect", cycle=1, status="in_doubt", data=data
        )
        rt.store.release_lease(run_id, token)
    _redact.reset()
    result = json.dumps({"bank": PASTED})
    args = ("settle", run_id, "pay", "--done", "--result", result, "--note", PASTED)
    done = cli(*args, "--by", "ann", cwd=tmp_path, store=db)
    assert done.returncode == 0, done.stderr
    assert _stored_in_clear(db) == []
    with lw.Runtime(db) as rt:
        [entry] = rt.store.journal(run_id, kind="effect")
        assert entry.data["result"] == {"bank": "key *** again *** proxy ***"}


def _admin_and_viewer(db: Path) -> dict[str, str]:
    """Users ``root`` (an admin) and ``vic`` (a viewer) in the store: each one's token."""
    import time

    from loopwright._authority import hash_token

    tokens = {"root": "tok-root-0123456789", "vic": "tok-vic-0123456789"}
    with lw.Runtime(db) as rt:
        for name, roles in (("root", ["admin"]), ("vic", ["viewer"])):
            rt.store.add_user(name, roles=roles, limits={}, by="test", now=time.time())
            rt.store.set_token(name, hash_token(tokens[name]), now=time.time())
    return tokens


def test_a_refused_person_makes_the_dashboard_build_no_loop(run: tuple[Path, str]) -> None:
    """review53c: the dashboard built the run's loop from its spec file (its modules imported,
    its adapters made) for every edit or decision posted, before the engine checked who asked:
    a viewer's refused request ran the loop's import-time code in the server. It is built for
    one who may make it only (the engine still checks and audits the request itself)."""
    db, run_id = run
    tokens = _admin_and_viewer(db)
    with lw.Runtime(db) as rt:
        pause = rt.pause(run_id, by="root")
    _redact.reset()
    c = dashboard(str(db), token=TOKEN, identity="server")
    vic = {"Authorization": f"Bearer {tokens['vic']}"}
    r = c.post(f"/api/runs/{run_id}/parts/doc/a", json={"value": "x"}, headers=vic)
    assert r.status_code == 403, r.text
    r = c.post(f"/api/approvals/{pause.approval_id}/approve", json={}, headers=vic)
    assert r.status_code == 403, r.text
    assert _redact.registry_state()[0] == frozenset()  # nothing of the loop's was built
    root = {"Authorization": f"Bearer {tokens['root']}"}
    r = c.post(f"/api/runs/{run_id}/parts/doc/a", json={"value": PASTED}, headers=root)
    assert r.status_code == 200, r.text
    assert _stored_in_clear(db) == []


def test_a_refused_cancel_on_the_dashboard_builds_no_loop(
    run: tuple[Path, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """polish53b: the dashboard's cancel builds the run's loop (its spec's modules imported)
    for one who may cancel only: a viewer's refused cancel runs none of the loop's code."""
    from loopwright.web import _operations

    built: list[str] = []
    real = _operations.loop_of_run
    monkeypatch.setattr(
        _operations, "loop_of_run", lambda rec: built.append(rec.run_id) or real(rec)
    )
    db, run_id = run
    tokens = _admin_and_viewer(db)
    c = dashboard(str(db), token=TOKEN, identity="server")
    vic = {"Authorization": f"Bearer {tokens['vic']}"}
    r = c.post(f"/api/runs/{run_id}/cancel", json={}, headers=vic)
    assert r.status_code == 403, r.text
    assert built == []
    root = {"Authorization": f"Bearer {tokens['root']}"}
    r = c.post(f"/api/runs/{run_id}/cancel", json={}, headers=root)
    assert r.status_code == 200, r.text
    assert built == [run_id]
