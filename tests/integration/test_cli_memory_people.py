"""Feedback memory from the command line in a store with users, on SQLite and PostgreSQL
(docs/permissions.md, docs/memory.md). ``loopwright memory add|confirm|forget|propose`` took
``--by NAME`` and no token: anyone who could open the store — a viewer, a revoked user, no
user at all — added a "correction" under ana's name that every later run of the task was
shown, confirmed a global candidate (active for every project) or forgot a person's
feedback, and the audit log said nothing. They now need the token of a user who may operate,
record the token's user, and are audited either way."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_cli_run_requester import cli
from test_cli_run_requester import tokens as requester_tokens  # noqa: F401 (a fixture)

import loopwright as lw


@pytest.fixture
def users(
    url: str, request: pytest.FixtureRequest, capsys: pytest.CaptureFixture[str]
) -> dict[str, str]:
    """root (admin), rita (operator and approver), ben (approver), vic (viewer), zed (an
    operator, revoked): their tokens."""
    tokens: dict[str, str] = request.getfixturevalue("requester_tokens")
    root = ("--token", tokens["root"], "--store", url)
    for name, role in (("vic", "viewer"), ("zed", "operator")):
        code, tok, err = cli(capsys, "users", "add", name, "--role", role, *root)
        assert code == 0, err
        tokens[name] = tok.strip()
    code, _, err = cli(capsys, "users", "revoke", "zed", *root)
    assert code == 0, err
    return tokens


def _items(url: str) -> list[lw.MemoryItem]:
    with lw.Runtime(url) as rt:
        return lw.FeedbackMemory(rt.store).list(status=None)


def test_memory_changes_need_an_operators_token_in_a_store_with_users(
    url: str, users: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    with lw.Runtime(url) as rt:
        mem = lw.FeedbackMemory(rt.store)
        kept = mem.add(scope="task", scope_key="T-1", signal="correction", text="pay", by="ana")
        cand = mem.add(scope="global", scope_key="", signal="correction", text="x", by="ana")
    add = ("memory", "add", "never pay", "--scope", "task", "--key", "T-1", "--store", url)
    refusals = {
        None: "this store has users: give your token",
        "lw_not-anyones": "the token is unknown or revoked",
        users["zed"]: "the token is unknown or revoked",  # revoked
        users["vic"]: "vic (viewer) may not add feedback memory: it needs the operator role",
        users["ben"]: "ben (approver) may not add feedback memory: it needs the operator",
    }
    for token, message in refusals.items():
        extra = () if token is None else ("--token", token)
        code, _, err = cli(capsys, *add, "--by", "ana", *extra)
        assert code == 2, err
        code, _, err = cli(capsys, *add, *extra)
        assert code == 2 and message in err.replace("\n", " "), err
        for verb, item in (("confirm", cand), ("forget", kept)):
            code, _, err = cli(capsys, "memory", verb, item.memory_id, "--store", url, *extra)
            assert code == 2 and message.replace("add", verb) in err.replace("\n", " "), err
    code, _, err = cli(capsys, "memory", "propose", "--min-projects", "2", "--store", url)
    assert code == 2 and "give your token" in err
    # nothing was written, confirmed or forgotten under anyone's name
    assert {(i.memory_id, i.status) for i in _items(url)} == {
        (kept.memory_id, "active"),
        (cand.memory_id, "candidate"),
    }
    # an operator's own token: recorded under the token's user, never a typed name
    code, _, err = cli(capsys, *add, "--by", "ana", "--token", users["rita"])
    assert code == 2 and "the token is rita's" in err
    code, out, err = cli(capsys, *add, "--token", users["rita"], "--json")
    assert code == 0, err
    added = json.loads(out)
    assert added["by"] == "rita"
    for verb, item in (("confirm", cand), ("forget", kept)):
        code, out, err = cli(
            capsys,
            "memory",
            verb,
            item.memory_id,
            "--token",
            users["rita"],
            "--store",
            url,
            "--json",
        )
        assert code == 0, err
    status = {i.memory_id: i.status for i in _items(url)}
    assert status[cand.memory_id] == "active" and status[kept.memory_id] == "forgotten"
    with lw.Runtime(url) as rt:
        said = [(a.actor, a.action, a.outcome) for a in rt.store.audit()]
    for verb in ("add", "confirm", "forget"):
        assert ("rita", f"memory {verb}", "allowed") in said
        assert ("vic", f"memory {verb}", "refused") in said
    assert ("(no token)", "memory add", "refused") in said
    assert ("(unknown token)", "memory add", "refused") in said


def test_memory_in_a_store_without_users_still_takes_by(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = cli(
        capsys, "memory", "add", "x", "--scope", "global", "--by", "ann", "--store", url, "--json"
    )
    assert code == 0, err
    item = json.loads(out)
    assert item["by"] == "ann"
    code, _, err = cli(capsys, "memory", "confirm", item["memory_id"], "--store", url)
    assert code == 2 and "--by: say who decides (--by NAME)" in err
    code, out, err = cli(
        capsys, "memory", "confirm", item["memory_id"], "--by", "bo", "--store", url, "--json"
    )
    assert code == 0 and json.loads(out)["status"] == "active", err


def test_the_confirm_hint_names_a_token_in_a_store_with_users(
    url: str, users: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    # `memory add` of a global candidate says how to confirm it; in a store with users a
    # `--by NAME` alone is refused, so the hint names the token instead
    code, out, err = cli(
        capsys,
        *("memory", "add", "always cite", "--scope", "global", "--store", url),
        *("--token", users["rita"]),
    )
    assert code == 0, err
    assert "confirm it with: loopwright memory confirm" in out
    assert '--token "$LOOPWRIGHT_TOKEN"' in out and "--by" not in out


def test_the_operator_who_added_a_global_candidate_does_not_confirm_it(
    url: str, users: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """probe46c: in a store with users an operator added a global candidate (active for every
    project once confirmed) and confirmed it themself, so the candidate step checked nothing.
    Another operator confirms it; the refusal is in the audit log."""
    rita = ("--token", users["rita"], "--store", url)
    code, out, err = cli(
        capsys, "memory", "add", "always cite", "--scope", "global", *rita, "--json"
    )
    assert code == 0, err
    item = json.loads(out)["memory_id"]
    code, _, err = cli(capsys, "memory", "confirm", item, *rita)
    assert code == 2 and "rita added memory" in err and "separation of duties" in err, err
    assert {i.memory_id: i.status for i in _items(url)}[item] == "candidate"
    with lw.Runtime(url) as rt:
        said = [(a.actor, a.action, a.outcome) for a in rt.store.audit()]
        assert ("rita", "memory confirm", "refused") in said
        with pytest.raises(lw.NotPermittedError):  # the Python API alike
            lw.FeedbackMemory(rt.store).confirm(item, by="RITA")
    code, _, err = cli(capsys, "memory", "confirm", item, "--token", users["root"], "--store", url)
    assert code == 0, err
    assert {i.memory_id: i.status for i in _items(url)}[item] == "active"


def test_a_refused_confirm_or_forget_is_in_the_audit_log(
    url: str, users: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Outside probe, stop 51: an operator's confirm of a forgotten item, or a confirm or
    forget of an id the store lacks, was refused (exit 2) and left nothing in the audit log;
    only the adder's own confirm was recorded refused. Every refused attempt is recorded."""
    with lw.Runtime(url) as rt:
        mem = lw.FeedbackMemory(rt.store)
        gone = mem.add(scope="global", scope_key="", signal="correction", text="x", by="ana")
        mem.forget(gone.memory_id, by="ana")
    root = ("--token", users["root"], "--store", url)
    for verb, item, said in (
        ("confirm", gone.memory_id, "is forgotten"),
        ("confirm", "0123456789abcdef", "no memory item"),
        ("forget", "0123456789abcdef", "no memory item"),
    ):
        code, _, err = cli(capsys, "memory", verb, item, *root)
        assert code == 2 and said in err, err
        with lw.Runtime(url) as rt:
            last = rt.store.audit()[-1]
        assert (last.actor, last.action, last.target, last.outcome) == (
            "root",
            f"memory {verb}",
            f"memory {item}",
            "refused",
        )
        assert said in last.detail["reason"]
    assert {i.memory_id: i.status for i in _items(url)}[gone.memory_id] == "forgotten"


@pytest.mark.parametrize(
    ("args", "said", "field"),
    [
        (("--scope", "team", "--key", "T-1"), "must be one of", "--scope"),
        (("--scope", "task", "--key", "T-1", "--rule", "{"), "not JSON", "--rule"),
        (("--scope", "task", "--key", "T-1", "--rule", "[1]"), "a JSON object", "--rule"),
        (("--scope", "task", "--key", "T-1", "--signal", "meh"), "must be one of", "--signal"),
        (("--scope", "task"), "needs the task key", "--key"),
        (("--scope", "task", "--key", "T-1", "--strength", "2"), "[0, 1]", "--strength"),
        (("--scope", "task", "--key", "T-1", "--rule", '{"a": {"held_out": 1}}'), "held", "--rule"),
    ],
)
def test_a_memory_add_refused_for_its_input_is_in_the_audit_log(
    url: str,
    users: dict[str, str],
    capsys: pytest.CaptureFixture[str],
    args: tuple[str, ...],
    said: str,
    field: str,
) -> None:
    """Outside probe, stop 51: in a store with users a ``memory add`` refused for a token or a
    role was audited, one refused for its input (a scope, a rule) was not; a refused confirm or
    forget is. Every refused attempt is recorded, under the token's user, with the reason."""
    with lw.Runtime(url) as rt:
        before = len(rt.store.audit())
    code, out, err = cli(
        capsys, "memory", "add", "never pay", *args, "--token", users["rita"], "--store", url
    )
    assert code == 2 and said in err and f"{field}:" in err, err
    assert out == ""
    with lw.Runtime(url) as rt:
        new = rt.store.audit()[before:]
    assert [(a.actor, a.action, a.target, a.outcome) for a in new] == [
        ("rita", "memory add", "memory", "refused")
    ]
    assert said in new[0].detail["reason"] and field in new[0].detail["reason"]
    assert _items(url) == []


def test_a_memory_add_refused_for_its_input_creates_no_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The input is checked before the store is opened as it was: a refused add leaves no new
    store behind (a new store has no users, so there is no one to record it for)."""
    db = tmp_path / "new.db"
    code, _, err = cli(capsys, "memory", "add", "x", "--scope", "team", "--store", str(db))
    assert code == 2 and "--scope: must be one of" in err, err
    assert not db.exists()


def test_a_memory_propose_refused_for_its_input_is_in_the_audit_log(
    url: str, users: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """As an add: ``memory propose --min-projects 1`` was refused and not recorded."""
    with lw.Runtime(url) as rt:
        before = len(rt.store.audit())
    code, _, err = cli(
        capsys, "memory", "propose", "--min-projects", "1", "--token", users["rita"], "--store", url
    )
    assert code == 2 and "--min-projects: must be" in err, err
    with lw.Runtime(url) as rt:
        new = rt.store.audit()[before:]
    assert [(a.actor, a.action, a.target, a.outcome) for a in new] == [
        ("rita", "memory propose", "memory", "refused")
    ]
