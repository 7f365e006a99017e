"""Who the audit log names for a refused CLI attempt, on SQLite and PostgreSQL
(docs/permissions.md). In a store with users a refusal for a missing or unknown token was
recorded under the typed ``--by``: anyone who could run the CLI wrote rows such as "ben
approve ... refused" or "policy:earned approve ... refused" (``loopwright audit --actor ben``
listed them as ben's), and a name with a bidirectional override reached the dashboard's audit
page as it was typed. A token's user naming someone else with ``--by`` (an attempt to act as
another person) was refused without any record. The actor is now what authenticated the
attempt; the typed name, where it prints as itself, is kept in the detail."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_cli_run_requester import _run, cli
from test_cli_run_requester import spec as requester_spec  # noqa: F401 (a fixture)
from test_cli_run_requester import tokens as requester_tokens  # noqa: F401 (a fixture)

import loopwright as lw


def _parked(
    url: str, spec: Path, tokens: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> str:
    code, _, err = _run(capsys, spec, url, "k1", "--token", tokens["rita"])
    assert code == 4, err  # awaiting approval
    with lw.Runtime(url) as rt:
        (run,) = rt.store.list_runs()
        assert rt.pending_approval(run.run_id) is not None
    return run.run_id


def test_a_refusal_is_recorded_under_what_authenticated_it_never_a_typed_name(
    url: str,
    request: pytest.FixtureRequest,
    capsys: pytest.CaptureFixture[str],
) -> None:
    tokens: dict[str, str] = request.getfixturevalue("requester_tokens")
    run = _parked(url, request.getfixturevalue("requester_spec"), tokens, capsys)
    with lw.Runtime(url) as rt:
        before = len(rt.store.audit())
    attempts = [
        ((), "ben", "this store has users: give your token"),
        (("--token", "lw_not-anyones"), "policy:earned", "the token is unknown or revoked"),
        ((), "ro\u202eot", "this store has users: give your token"),
        (("--token", tokens["ben"]), "rita", "the token is ben's"),
    ]
    for extra, typed, message in attempts:
        code, _, err = cli(capsys, "approve", run, "--by", typed, "--store", url, *extra)
        assert code == 2 and message in err, err
    with lw.Runtime(url) as rt:
        rows = rt.store.audit()[before:]
        assert rt.pending_approval(run) is not None  # nothing was decided
    said = [(a.actor, a.action, a.outcome, a.detail.get("typed_by")) for a in rows]
    assert said == [
        ("(no token)", "approve", "refused", "ben"),
        ("(unknown token)", "approve", "refused", "policy:earned"),
        ("(no token)", "approve", "refused", None),  # a bidi override is not kept
        ("ben", "approve", "refused", "rita"),  # ben, naming rita
    ]
    assert all(not a.target.startswith("cli") for a in rows)
