"""People from the command line (docs/permissions.md): users and tokens, decisions under the
token's user, refusals with one line and exit 2, the audit log, and the earned-authority
walkthrough on the invoice workload."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from support.dashboard import dashboard

import loopwright as lw
from loopwright.cli import main

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "invoice_exceptions"


def lw_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """Two invoice runs parked on their payment (earned.toml: every payment needs a person)."""
    monkeypatch.setenv("INVOICE_LEDGER", str(tmp_path / "ledger.jsonl"))
    monkeypatch.delenv("LOOPWRIGHT_TOKEN", raising=False)
    db = str(tmp_path / "s.db")
    loop = lw.load_spec(EXAMPLE / "earned.toml")
    tasks = [json.loads(line) for line in (EXAMPLE / "tasks.jsonl").read_text().splitlines()[:2]]
    with lw.Runtime(db) as rt:
        for t in tasks:
            assert rt.run_sync(loop, t, task_key=str(t["id"]), by="clerk").status == (
                "awaiting_approval"
            )
    return db


def test_users_tokens_and_refusals(
    store: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    s = ("--store", store)
    code, _, err = lw_cli(capsys, "users", "add", "ana", "--role", "approver", *s)
    assert code == 2 and "first user must be an admin" in err
    code, root, _ = lw_cli(capsys, "users", "add", "root", "--role", "admin", *s)
    root = root.strip()
    assert code == 0 and root.startswith("lw_")
    code, _, err = lw_cli(capsys, "users", "add", "ana", "--role", "approver", *s)
    assert code == 2 and "give your token" in err  # the store has users now
    monkeypatch.setenv("LOOPWRIGHT_TOKEN", root)
    tokens = {}
    for name, roles in {"ana": ["approver", "--limit", "spend=5000"], "vic": ["viewer"],
                        "ben": ["approver"]}.items():  # fmt: skip
        code, out, _ = lw_cli(capsys, "users", "add", name, "--role", *roles, *s)
        assert code == 0
        tokens[name] = out.strip()
    code, out, _ = lw_cli(capsys, "users", "list", "--json", *s)
    listed = json.loads(out)
    assert [u["name"] for u in listed] == ["ana", "ben", "root", "vic"]
    assert all(tokens["ana"] not in json.dumps(u) for u in listed)  # never a token

    with lw.Runtime(store) as rt:
        runs = [r.run_id for r in rt.store.list_runs()]
    monkeypatch.delenv("LOOPWRIGHT_TOKEN")
    code, _, err = lw_cli(capsys, "approve", runs[0], "--by", "ana", *s)
    assert code == 2 and "give your token" in err  # a typed name is not enough
    code, _, err = lw_cli(capsys, "approve", runs[0], "--token", tokens["vic"], *s)
    assert code == 2 and "needs the approver role" in err
    code, _, err = lw_cli(capsys, "approve", runs[0], "--token", tokens["ana"], "--by", "ben", *s)
    assert code == 2 and "the token is ana's" in err
    code, out, _ = lw_cli(capsys, "approve", runs[0], "--token", tokens["ana"], *s)
    assert code == 0 and "by ana" in out
    monkeypatch.setenv("LOOPWRIGHT_TOKEN", root)
    code, _, _ = lw_cli(capsys, "users", "revoke", "ben", *s)
    assert code == 0
    code, _, err = lw_cli(capsys, "deny", runs[1], "--token", tokens["ben"], *s)
    assert code == 2 and "unknown or revoked" in err
    code, out, _ = lw_cli(capsys, "audit", "--jsonl", *s)
    lines = [json.loads(line) for line in out.splitlines()]
    seen = [(r["actor"], r["action"], r["outcome"]) for r in lines]
    assert ("vic", "approve", "refused") in seen and ("ana", "approve", "allowed") in seen
    assert ("root", "revoke user", "allowed") in seen and ("root", "add user", "allowed") in seen
    assert any(r["action"] == "policy" for r in lines)  # the loop's policy, first seen
    # a refusal for a missing or unknown token names what was asked (it said "cli")
    tokenless = [
        (r["actor"], r["action"], r["target"])
        for r in lines
        if r["detail"].get("reason") in ("no token", "unknown or revoked token")
    ]
    assert tokenless == [
        ("(no token)", "add user", "user ana"),
        ("(no token)", "approve", f"run {runs[0]}"),  # --by ana, no token: proves nothing
        ("(unknown token)", "deny", f"run {runs[1]}"),  # ben's, revoked
    ]
    assert all(r["origin"] in ("cli", "engine", "python") for r in lines)
    code, out, _ = lw_cli(capsys, "authority", "--json", *s)
    [row] = json.loads(out)
    assert row["kind"] == "spend" and row["clean_approvals"] == 1 and not row["earned"]


def test_the_walkthrough_earns_and_loses_authority(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(EXAMPLE / "earned_authority.py"), "--store", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    batch2 = out.split("== batch 2")[1].split("== clerk")[0]
    assert "paid on earned authority" in batch2  # small payments go through ...
    assert "approved by ana refused" in batch2 and "cy + ben" in batch2  # ... large ones wait
    assert "last revoked by: an accepted run failed its held-out checks" in batch2
    assert out.rstrip().count("a spend action was compensated") == 1
    with lw.Runtime(str(tmp_path / "store.db")) as rt:
        earned = [a for a in rt.store.approvals() if a.decided_by == "policy:earned"]
        assert earned and all(len(a.evidence["earned"]["approvals"]) == 5 for a in earned)


def test_the_first_user_in_a_fresh_checkout_makes_the_default_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/permissions.md begins with `loopwright users add root --role admin`, "before any
    run": in a folder without ./.loopwright it said "no folder .loopwright ... create it first",
    though `run` makes that folder itself. A folder named by --store is still refused."""
    monkeypatch.delenv("LOOPWRIGHT_TOKEN", raising=False)
    monkeypatch.delenv("LOOPWRIGHT_STORE", raising=False)
    monkeypatch.chdir(tmp_path)
    code, _, err = lw_cli(capsys, "users", "add", "ana", "--role", "approver")
    assert code == 2 and "first user must be an admin" in err
    assert not (tmp_path / ".loopwright").exists()
    code, out, err = lw_cli(capsys, "users", "add", "root", "--role", "admin")
    assert code == 0 and out.strip().startswith("lw_"), err
    assert "created the store .loopwright/loopwright.db" in err
    code, out, _ = lw_cli(capsys, "users", "list")
    assert code == 0 and "root" in out


def test_the_first_user_may_come_before_the_first_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``users add`` on a store that does not exist yet creates it for its first user, an
    admin, and says so; anything else leaves no file behind; the audit log of a narrow
    terminal is one record a line."""
    monkeypatch.delenv("LOOPWRIGHT_TOKEN", raising=False)
    monkeypatch.setenv("COLUMNS", "80")
    db = tmp_path / "new.db"
    code, _, err = lw_cli(capsys, "users", "add", "ana", "--role", "approver", "--store", str(db))
    assert code == 2 and "first user must be an admin" in err and not db.exists()
    missing = tmp_path / "no-such-folder" / "s.db"
    code, _, err = lw_cli(
        capsys, "users", "add", "root", "--role", "admin", "--store", str(missing)
    )
    assert code == 2 and "no folder" in err and not missing.parent.exists()
    code, out, err = lw_cli(capsys, "users", "add", "root", "--role", "admin", "--store", str(db))
    assert code == 0 and out.strip().startswith("lw_") and f"created the store {db}" in err
    code, out, _ = lw_cli(capsys, "audit", "--store", str(db))
    assert code == 0
    lines = out.strip().splitlines()
    assert lines[0] == "2 audit record(s)"
    records = [line.split() for line in lines[1:] if line.startswith(" ")]
    assert [r[3:6] for r in records] == [["root", "add", "user"], ["root", "issue", "token"]]


def test_a_store_without_users_or_authority_says_so_plainly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LOOPWRIGHT_TOKEN", raising=False)
    db = str(tmp_path / "s.db")
    lw.Runtime(db).close()
    code, out, _ = lw_cli(capsys, "authority", "--store", db)
    # Rich read "[[authority]]" as markup and printed "[]"
    assert code == 0 and "has [[authority]] in its spec" in " ".join(out.split())
    code, _, err = lw_cli(capsys, "users", "token", "nosuch", "--store", db)
    assert code == 2 and "this store has no users" in err  # was "root may replace only..."


def test_a_token_for_a_user_who_does_not_exist_is_refused(
    store: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only an admin learns that a name is no user's: without a token, or with another user's,
    `users token` and `users revoke` answer an unknown name as they answer a known one (`users
    token nosuch` said "no user 'nosuch'" before asking for a token: who exists, to anyone)."""
    s = ("--store", store)
    code, root, _ = lw_cli(capsys, "users", "add", "root", "--role", "admin", *s)
    assert code == 0
    monkeypatch.setenv("LOOPWRIGHT_TOKEN", root.strip())
    code, vic, _ = lw_cli(capsys, "users", "add", "vic", "--role", "viewer", *s)
    assert code == 0
    assert lw_cli(capsys, "users", "add", "ana", "--role", "viewer", *s)[0] == 0
    monkeypatch.delenv("LOOPWRIGHT_TOKEN")
    for cmd in ("token", "revoke"):
        answers = {}
        for name in ("ana", "nosuch"):
            for given in ((), ("--token", "lw_bogus"), ("--token", vic.strip())):
                code, out, err = lw_cli(capsys, "users", cmd, name, *given, *s)
                assert code == 2 and not out and "nosuch" not in err.replace(name, "NAME")
                answers.setdefault(given, []).append(err.replace(name, "NAME"))
        assert all(a == b for a, b in answers.values()), answers
        assert "give your token" in answers[()][0]
        assert "unknown or revoked" in answers[("--token", "lw_bogus")][0]
        assert "vic may" in answers[("--token", vic.strip())][0]
    code, out, err = lw_cli(capsys, "users", "token", "nosuch", "--token", root.strip(), *s)
    assert code == 2 and "no user 'nosuch' in this store" in err  # an admin is told
    code, out, err = lw_cli(capsys, "users", "revoke", "nosuch", "--token", root.strip(), *s)
    assert code == 2 and "no user 'nosuch'" in err
    code, out, _ = lw_cli(capsys, "users", "token", "vic", "--token", vic.strip(), *s)
    assert code == 0 and out.startswith("lw_")  # a user for themself


def test_a_limit_kind_not_in_lower_case_is_pointed_out_when_the_user_is_added(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LOOPWRIGHT_TOKEN", raising=False)
    s = ("--store", str(tmp_path / "s.db"))
    code, root, _ = lw_cli(capsys, "users", "add", "root", "--role", "admin", *s)
    assert code == 0
    args = ("users", "add", "cap", "--role", "approver", "--token", root.strip(), *s)
    code, out, err = lw_cli(capsys, *args, "--limit", "Spend=100", "--limit", "publish")
    assert code == 0 and out.strip().startswith("lw_")  # added as asked: kinds are not folded
    assert "--limit Spend: kinds are matched exactly, so cap may approve kind 'Spend'" in err
    assert "not 'spend'" in err and "--limit publish" not in err
    code, out, _ = lw_cli(capsys, "users", "list", "--json", *s)
    [cap] = [u for u in json.loads(out) if u["name"] == "cap"]
    assert cap["limits"] == {"Spend": 100.0, "publish": None}


def test_demo_refuses_a_missing_token_before_announcing_anything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`loopwright demo` in a store with users, without an operator's token, printed its
    banner ("loopwright demo: 25 invoice exceptions, ...") and only then the refusal: a
    workload announced that never ran. The refusal comes first, alone (stop 44)."""
    monkeypatch.delenv("LOOPWRIGHT_TOKEN", raising=False)
    monkeypatch.chdir(tmp_path)  # (the demo's payments file is written under .loopwright/)
    s = ("--store", str(tmp_path / "s.db"))
    code, root, _ = lw_cli(capsys, "users", "add", "root", "--role", "admin", *s)
    assert code == 0
    code, viewer, _ = lw_cli(capsys, "users", "add", "vic", "--role", "viewer", *s, "--token",
                             root.strip())  # fmt: skip
    assert code == 0
    for token in ((), ("--token", "lw_not-a-token"), ("--token", viewer.strip())):
        code, out, err = lw_cli(capsys, "demo", *s, *token)
        assert code == 2, (out, err)
        assert out == "", out  # no banner, no table, no "Try next"
        assert err.startswith("loopwright: error: ") and len(err.splitlines()) == 1, err
    code, out, err = lw_cli(capsys, "runs", "--json", *s)
    assert code == 0 and json.loads(out) == [], (out, err)


def _earned_after(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, after: int) -> tuple[Path, Path]:
    """A copy of the invoice example whose authority is earned after ``after`` approvals."""
    import shutil

    example = tmp_path / "example"
    shutil.copytree(EXAMPLE, example)
    spec = example / "earned.toml"
    spec.write_text(spec.read_text().replace("after = 5", f"after = {after}"))
    monkeypatch.setenv("INVOICE_LEDGER", str(tmp_path / "ledger.jsonl"))
    monkeypatch.delenv("LOOPWRIGHT_TOKEN", raising=False)
    return example, spec


def test_approvals_past_the_threshold_are_not_shown_as_a_fraction(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`loopwright authority` showed "2 of 1 clean approvals" once a loop had more approvals
    than its grant's `after`, as if `after` were the total. Past it: "2 (1 needed)"; --json
    keeps both counts."""
    example, spec = _earned_after(tmp_path, monkeypatch, 1)
    monkeypatch.setenv("COLUMNS", "200")
    db = str(tmp_path / "s.db")
    loop = lw.load_spec(spec)
    tasks = [json.loads(line) for line in (example / "tasks.jsonl").read_text().splitlines()[:2]]
    with lw.Runtime(db) as rt:
        runs = [rt.run_sync(loop, t, task_key=str(t["id"]), by="clerk") for t in tasks]
    assert [r.status for r in runs] == ["awaiting_approval"] * 2
    s = ("--store", db)
    code, before, _ = lw_cli(capsys, "authority", *s)
    assert code == 0 and "0 of 1" in before
    for r in runs:
        assert lw_cli(capsys, "approve", r.run_id, "--by", "ana", *s)[0] == 0
    code, out, _ = lw_cli(capsys, "authority", "--json", *s)
    [row] = json.loads(out)
    assert (row["clean_approvals"], row["needed"], row["earned"]) == (2, 1, True)
    code, out, _ = lw_cli(capsys, "authority", *s)
    assert code == 0 and "2 (1 needed)" in out and "2 of 1" not in out

    page = dashboard(db, token="t" * 24).get("/authority")
    assert page.status_code == 200 and "2 (1 needed)" in page.text and "2 of 1" not in page.text


def test_a_revoked_earners_approvals_leave_the_standing_shown(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`loopwright authority` (and /authority) counted the approvals of a user revoked since:
    it said "earned" while no request could use them (the engine drops a revoked person's
    approvals), so a team read a standing the loop did not have."""
    example, spec = _earned_after(tmp_path, monkeypatch, 2)
    db = str(tmp_path / "s.db")
    s = ("--store", db)
    tokens = {}
    for name, roles in {"root": ["admin"], "ana": ["approver"], "ben": ["approver"]}.items():
        code, out, _ = lw_cli(capsys, "users", "add", name, "--role", *roles, *s)
        assert code == 0
        tokens[name] = out.strip()
        monkeypatch.setenv("LOOPWRIGHT_TOKEN", tokens["root"])
    monkeypatch.delenv("LOOPWRIGHT_TOKEN")
    loop = lw.load_spec(spec)
    tasks = [json.loads(line) for line in (example / "tasks.jsonl").read_text().splitlines()[:3]]
    with lw.Runtime(db) as rt:
        runs = [rt.run_sync(loop, t, task_key=str(t["id"]), by="clerk") for t in tasks]
    assert [r.status for r in runs] == ["awaiting_approval"] * 3
    for r, who in zip(runs, ["ana", "ana", "ben"], strict=True):
        assert lw_cli(capsys, "approve", r.run_id, "--token", tokens[who], *s)[0] == 0
    code, out, _ = lw_cli(capsys, "authority", "--json", *s)
    [row] = json.loads(out)
    assert (row["clean_approvals"], row["earned"]) == (3, True)
    monkeypatch.setenv("LOOPWRIGHT_TOKEN", tokens["root"])
    assert lw_cli(capsys, "users", "revoke", "ana", *s)[0] == 0
    code, out, _ = lw_cli(capsys, "authority", "--json", *s)
    [row] = json.loads(out)
    assert (row["clean_approvals"], row["earned"]) == (1, False)  # ben's alone
    with lw.Runtime(db) as rt:  # what the engine says of a small payment: the same
        small = rt.run_sync(loop, {**tasks[0], "id": "NEW-1"}, task_key="NEW-1", by="clerk")
    assert small.status == "awaiting_approval"
    # Added again, ana earns from her new start: her approvals before the revocation (which
    # may have been for cause) count for no request, in the standing shown or in the engine.
    assert lw_cli(capsys, "users", "add", "ana", "--role", "approver", *s)[0] == 0
    code, out, _ = lw_cli(capsys, "authority", "--json", *s)
    [row] = json.loads(out)
    assert (row["clean_approvals"], row["earned"]) == (1, False)
    with lw.Runtime(db) as rt:
        again = rt.run_sync(loop, {**tasks[0], "id": "NEW-2"}, task_key="NEW-2", by="clerk")
    assert again.status == "awaiting_approval"


def test_the_list_of_requests_says_when_each_expires_and_which_expired(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`loopwright approvals` listed a request past its expiry as pending, with no expiry, and
    said "decide with: loopwright approve", which then refused it as expired: an approver could
    not tell a live request from a dead one (the dashboard's card says "expired")."""
    example, spec = _earned_after(tmp_path, monkeypatch, 5)
    monkeypatch.setenv("COLUMNS", "200")
    text = spec.read_text().replace(
        'reason = "every payment needs', 'expires_after_s = EXPIRY\nreason = "every payment needs'
    )
    db = str(tmp_path / "s.db")
    task = json.loads((example / "tasks.jsonl").read_text().splitlines()[0])
    runs = []
    for key, expiry in (("live", "86400"), ("dead", "0.000001")):  # 1 µs: past once listed
        spec.write_text(text.replace("EXPIRY", expiry))
        with lw.Runtime(db) as rt:
            runs.append(rt.run_sync(lw.load_spec(spec), task, task_key=key, by="clerk"))
    assert [r.status for r in runs] == ["awaiting_approval"] * 2
    code, out, _ = lw_cli(capsys, "approvals", "--store", db)
    assert code == 0
    listed = " ".join(out.split())
    dead, live = (listed.index(f"run {r.run_id[:12]}") for r in reversed(runs))
    assert dead < live  # newest first
    assert "expired at" in listed[dead:live] and "no longer be decided" in listed[dead:live]
    assert "expires" in listed[live:] and "expired" not in listed[live:]
    assert lw_cli(capsys, "deny", runs[0].run_id, "--by", "ana", "--store", db)[0] == 0
    code, out, _ = lw_cli(capsys, "approvals", "--store", db)  # the dead one alone
    assert code == 0 and "decide with" not in out
    assert f"escalate it with: loopwright resume {runs[1].run_id[:12]}" in out
    code, _, err = lw_cli(capsys, "approve", runs[1].run_id, "--by", "ana", "--store", db)
    assert code == 2 and "expired" in err


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("mallory\rben", "control character"),  # prints as "ben" over "mallory"
        ("\x1b[2Kben", "control character"),  # an escape sequence written to every terminal
        ("ben\u202e", "bidirectional control"),
        ("(no token)", "(…)"),  # the audit log's own word for a tokenless attempt
        ("be\u200bn", "same name spelled another way"),  # prints as "ben"
        ("\uff42en", "same name spelled another way"),  # fullwidth b: NFKC "ben"
        ("b\u0435n", "same name spelled another way"),  # a Cyrillic e: prints as "ben"
        ("\u0392\u0395\u039d", "same name spelled another way"),  # Greek capitals: "BEN"
    ],
)
def test_a_user_name_that_prints_as_another_or_as_terminal_control_is_refused(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    why: str,
) -> None:
    """`users add` took names with a carriage return, an escape sequence or an invisible
    character: `users list` and `audit` wrote the escape sequence raw to the reader's terminal,
    and "be\u200bn" beside "ben" was a second person that reads as the first (two votes on a
    four-eyes request by one person, as far as anyone reading the record could tell)."""
    monkeypatch.delenv("LOOPWRIGHT_TOKEN", raising=False)
    s = ("--store", str(tmp_path / "s.db"))
    code, root, _ = lw_cli(capsys, "users", "add", "root", "--role", "admin", *s)
    monkeypatch.setenv("LOOPWRIGHT_TOKEN", root.strip())
    assert lw_cli(capsys, "users", "add", "ben", "--role", "approver", *s)[0] == 0
    code, out, err = lw_cli(capsys, "users", "add", name, "--role", "approver", *s)
    assert code == 2 and why in err and out == ""
    assert "\x1b" not in err  # the refusal shows the name escaped
    code, out, _ = lw_cli(capsys, "users", "list", "--json", *s)
    assert [u["name"] for u in json.loads(out)] == ["ben", "root"]


def test_a_typed_name_with_terminal_control_is_refused_in_an_open_store(
    store: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--by` in a store without users went into the audit log as typed, escape sequence
    included, and `loopwright audit` printed it raw."""
    with lw.Runtime(store) as rt:
        run = rt.store.list_runs()[0].run_id
    code, _, err = lw_cli(capsys, "approve", run, "--by", "x\x1b[31mRED", "--store", store)
    assert code == 2 and "control character" in err
    code, out, _ = lw_cli(capsys, "audit", "--store", store)
    assert "\x1b" not in out


def test_a_note_with_terminal_control_is_refused_and_a_forms_crlf_kept_as_a_line_break(
    store: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A decision's note went into the append-only audit log as typed, ESC included, and
    `loopwright audit` and `show` wrote it raw to the terminal: an escape sequence there can
    clear the screen or rewrite the records above it."""
    with lw.Runtime(store) as rt:
        first, second = (r.run_id for r in rt.store.list_runs())
    s = ("--store", store)
    code, _, err = lw_cli(capsys, "deny", first, "--by", "carl", "--note", "ok\x1b[2J", *s)
    assert code == 2 and "control character (U+001B" in err
    # a bidirectional override too (the character rule of task keys and names)
    code, _, err = lw_cli(capsys, "deny", first, "--by", "carl", "--note", "ok\u202eko", *s)
    assert code == 2 and "bidirectional control (U+202E" in err
    for command in (["audit"], ["show", first]):
        assert "\x1b" not in lw_cli(capsys, *command, *s)[1]
    with lw.Runtime(store) as rt:  # the dashboard's textarea posts CRLF
        denied = rt.deny(second, by="carl", note="wrong vendor\r\nsee PO 7")
    assert denied.note == "wrong vendor\nsee PO 7"
