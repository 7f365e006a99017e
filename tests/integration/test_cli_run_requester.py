"""Who a run started from the command line is recorded as having started (its requester),
on SQLite and PostgreSQL (docs/permissions.md). Separation of duties keeps the requester from
approving the run's requests, so in a store with users the requester is the token's user:
``loopwright run`` without a token recorded the OS user, and with a token naming no user it
fell back to the OS user too, so rita started a run (recorded as ``root``) and approved its
payment herself."""

from __future__ import annotations

import getpass
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import loopwright as lw
from loopwright.cli import main

MODULE = """
import loopwright as lw

@lw.effect("spend", key=lambda a: a["invoice"])
def pay(invoice, amount, *, key):
    return {"paid": amount}

def actor(ctx):
    return lw.Proposal(
        edits=(lw.Edit("doc", "po", "PO-1"),),
        effects=(pay.call(invoice=ctx.task["invoice"], amount=ctx.task["amount"]),),
    )

def check(state, proposal):
    return lw.Verdict(passed=True, score=1.0)
"""

SPEC = """
name = "separated"
[actor]
ref = "{mod}.py:actor"
[[verifiers]]
ref = "{mod}.py:check"
[[effects]]
ref = "{mod}.py:pay"
[[approvals]]
name = "sep"
kind = "spend"
action = "require"
separate = true
[contract.budget]
max_cycles = 3
"""


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def spec(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Path]:
    mod = f"sepmod_{abs(hash(request.node.nodeid)) % 10**8}"
    (tmp_path / f"{mod}.py").write_text(MODULE)
    (tmp_path / "loop.toml").write_text(SPEC.format(mod=mod))
    (tmp_path / "task.json").write_text(json.dumps({"invoice": "I-1", "amount": 100}))
    yield tmp_path / "loop.toml"
    sys.modules.pop(mod, None)


@pytest.fixture
def tokens(
    url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> dict[str, str]:
    """root (admin), rita (operator and approver), ben (approver): their tokens."""
    monkeypatch.delenv("LOOPWRIGHT_TOKEN", raising=False)
    code, root, _ = cli(capsys, "users", "add", "root", "--role", "admin", "--store", url)
    assert code == 0
    out = {"root": root.strip()}
    for name, roles in {"rita": ("operator", "approver"), "ben": ("approver",)}.items():
        args = [a for r in roles for a in ("--role", r)]
        code, tok, err = cli(
            capsys, "users", "add", name, *args, "--token", out["root"], "--store", url
        )
        assert code == 0, err
        out[name] = tok.strip()
    return out


def _run(
    capsys: pytest.CaptureFixture[str], spec: Path, url: str, key: str, *extra: str
) -> tuple[int, str, str]:
    task = str(spec.parent / "task.json")
    return cli(capsys, "run", str(spec), "--task", task, "--task-key", key, "--store", url, *extra)


@pytest.mark.parametrize("executor", ["local", "ray"])
def test_a_run_started_without_a_valid_token_is_refused_in_a_store_with_users(
    url: str,
    spec: Path,
    tokens: dict[str, str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    executor: str,
) -> None:
    # On Ray too, refused before Ray is asked for (`import ray` would fail here).
    monkeypatch.setitem(sys.modules, "ray", None)
    on = ("--executor", executor)
    code, _, err = _run(capsys, spec, url, "k1", *on)
    assert code == 2 and "this store has users: give your token" in err
    code, _, err = _run(capsys, spec, url, "k2", *on, "--token", "lw_not-anyones")
    assert code == 2 and "the token is unknown or revoked" in err
    monkeypatch.setenv("LOOPWRIGHT_TOKEN", "lw_not-anyones")  # nor from the environment
    code, _, err = _run(capsys, spec, url, "k3", *on)
    assert code == 2 and "the token is unknown or revoked" in err
    monkeypatch.delenv("LOOPWRIGHT_TOKEN")
    code, _, err = _run(capsys, spec, url, "k4", *on, "--token", tokens["ben"])
    assert code == 2 and "ben (approver) may not start runs: it needs the operator role" in err
    with lw.Runtime(url) as rt:
        assert rt.store.list_runs() == []  # nothing was started under anyone's name
        said = [(a.actor, a.action, a.outcome) for a in rt.store.audit()]
    assert said.count(("(no token)", "start run", "refused")) == 1
    assert said.count(("(unknown token)", "start run", "refused")) == 2
    assert ("ben", "start run", "refused") in said


def test_who_starts_a_run_with_their_token_cannot_approve_it(
    url: str, spec: Path, tokens: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _run(capsys, spec, url, "k1", "--token", tokens["rita"])
    assert code == 4, err  # awaiting approval
    with lw.Runtime(url) as rt:
        [rec] = rt.store.list_runs()
        assert rec.created_by == "rita"
        assert ("rita", "start run", "allowed") in [
            (a.actor, a.action, a.outcome) for a in rt.store.audit()
        ]
    code, _, err = cli(capsys, "approve", rec.run_id, "--token", tokens["rita"], "--store", url)
    assert code == 2 and "separation of duties" in err
    code, out, err = cli(capsys, "approve", rec.run_id, "--token", tokens["ben"], "--store", url)
    assert code == 0 and "by ben" in out, err


def test_a_store_without_users_records_the_os_user_as_before(
    url: str, spec: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOOPWRIGHT_TOKEN", "lw_not-anyones")  # no users: a token is not read
    code, _, err = _run(capsys, spec, url, "k1")
    assert code == 4, err
    with lw.Runtime(url) as rt:
        [rec] = rt.store.list_runs()
        assert rec.created_by == getpass.getuser()


def test_the_demo_in_a_store_with_users_takes_the_token_its_refusal_names(
    url: str, tokens: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    # From review (review43): `loopwright demo` in a store with users was refused with "give
    # your token (--token or LOOPWRIGHT_TOKEN ...)", but had no --token ("No such option"),
    # and its next steps said `approve RUN --by you`, which such a store refuses.
    code, _, err = cli(capsys, "demo", "--store", url)
    assert code == 2 and "this store has users: give your token" in err
    code, out, err = cli(capsys, "demo", "--store", url, "--token", tokens["rita"])
    assert code == 0, err
    with lw.Runtime(url) as rt:
        runs = rt.store.list_runs()
    assert runs and {r.created_by for r in runs} == {"rita"}
    [approve] = [line for line in out.splitlines() if "loopwright approve " in line]
    assert '--token "$LOOPWRIGHT_TOKEN"' in approve and "--by" not in approve
