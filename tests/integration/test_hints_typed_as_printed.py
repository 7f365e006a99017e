"""polish54: the hints of `approvals`, `pause` (and `cancel`, `rollback`) printed `--by NAME`,
which the CLI refuses when typed as printed (exit 2, "NAME is the hint's placeholder"). Each
now prints a command that works when copied: without users nothing (``--by`` defaults to the
OS user), with users the token as ``--token "$LOOPWRIGHT_TOKEN"`` (the shell fills it in).
The lines are run as a shell would: variables expanded, then split."""

from __future__ import annotations

import os
import shlex

import pytest
from test_pause_audit import _people, _tok
from test_pause_surface import _parked_on_risk

import loopwright as lw
from loopwright.cli import main


def _typed(line: str, after: str) -> list[str]:
    """The command of ``line`` after ``after``, as a shell hands it over (optional parts
    in brackets and alternatives in parentheses left out)."""
    cmd = line.split(after, 1)[1].split(" [", 1)[0].split(" (", 1)[0]
    words = shlex.split(os.path.expandvars(cmd))
    assert words[0] == "loopwright", line
    return words[1:]


def _said(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    capsys.readouterr()
    assert main(list(argv)) == 0
    return capsys.readouterr().out


def test_the_pause_and_approvals_hints_work_when_copied(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    rid = _parked_on_risk(url)
    out = _said(capsys, "approvals", "--store", url)
    [line] = [x for x in out.splitlines() if x.startswith("decide with: ")]
    assert "NAME" not in line, line
    assert main(_typed(line, "decide with: ")) == 0, capsys.readouterr()
    with lw.Runtime(url) as rt:
        assert [a.status for a in rt.store.approvals(run_id=rid)] == ["approved"]
    out = _said(capsys, "pause", rid, "--store", url)
    [line] = [x for x in out.splitlines() if x.startswith("let it go on with: ")]
    assert main(_typed(line, "let it go on with: ")) == 0, capsys.readouterr()


def test_with_users_the_hint_names_the_token_the_shell_fills_in(
    url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    rid = _parked_on_risk(url)
    _people(url)
    monkeypatch.setenv("LOOPWRIGHT_TOKEN", _tok("ap"))
    out = _said(capsys, "approvals", "--store", url)
    [line] = [x for x in out.splitlines() if x.startswith("decide with: ")]
    assert '--token "$LOOPWRIGHT_TOKEN"' in line, line
    assert main(_typed(line, "decide with: ")) == 0, capsys.readouterr()
    with lw.Runtime(url) as rt:
        [a] = rt.store.approvals(run_id=rid)
    assert (a.status, a.decided_by) == ("approved", "ap")
