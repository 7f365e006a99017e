"""hints55: the engine writes a run's advice (`loopwright unpause R`, `loopwright settle R KEY
--done`, a refusal's `(loopwright users add ana ...)`) knowing nothing of the CLI's --store:
copied as printed after `show R --store other.db`, it read the default store ("no store", or
another store's run). The CLI adds the store it was given to each command it prints, unless a
bare command reads that store here ($LOOPWRIGHT_STORE); a URL with a password is never
printed (`--store "$LOOPWRIGHT_STORE"`, which the person sets)."""

from __future__ import annotations

import html
import re
import shlex
from pathlib import Path

import pytest
from doc_loop import TASK
from support.dashboard import AUTH, dashboard
from test_keyless_effect_failures import _paying
from test_people import FOUR_EYES, make_loop, task

import loopwright as lw
from loopwright.cli import main


def _commands(text: str) -> list[list[str]]:
    """The commands in ``text`` as a person copies them: in backticks or in parentheses."""
    text = " ".join(text.replace("│", " ").split())
    found = re.findall(r"`(loopwright [^`]+)`|\((loopwright [^()]+)\)", text)
    return [shlex.split(a or b)[1:] for a, b in found]


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    capsys.readouterr()
    rc = main(list(argv))
    got = capsys.readouterr()
    return rc, got.out + got.err


@pytest.fixture
def elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A store that is not the default one here (no $LOOPWRIGHT_STORE, the default file in
    an empty working folder)."""
    monkeypatch.delenv("LOOPWRIGHT_STORE", raising=False)
    monkeypatch.setenv("COLUMNS", "400")  # (a long path is not folded inside a word)
    (tmp_path / "here").mkdir()
    monkeypatch.chdir(tmp_path / "here")
    return str(tmp_path / "other" / "s.db")


def _made(path: str) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)


def test_the_unpause_that_show_prints_acts_on_the_store_shown(
    elsewhere: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from test_pause_actions import _paused

    _made(elsewhere)
    rid = _paused(elsewhere)
    rc, out = _run(capsys, "show", rid[:12], "--store", elsewhere)
    assert rc == 0, out
    [unpause] = [c for c in _commands(out) if c[0] == "unpause"]
    assert unpause == ["unpause", rid[:12], "--store", elsewhere], out
    rc, said = _run(capsys, *unpause)  # as printed
    assert rc == 0, said
    with lw.Runtime(elsewhere) as rt:
        assert [a.status for a in rt.store.approvals(run_id=rid)] == ["approved"]
    assert not Path(".loopwright").exists()  # the default store was never read nor made


def test_the_settle_that_show_prints_acts_on_the_store_shown(
    elsewhere: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _made(elsewhere)
    with lw.Runtime(elsewhere) as rt:
        a = rt.run_sync(_paying([], lw.TransientError), TASK)
    assert a.status == "escalated"
    rc, out = _run(capsys, "show", a.run_id[:12], "--store", elsewhere)
    assert rc == 0, out
    done = [c for c in _commands(out) if c[0] == "settle" and "--done" in c]
    assert done and all(c[-2:] == ["--store", elsewhere] for c in done), out
    rc, said = _run(capsys, *done[0])
    assert rc == 0, said
    with lw.Runtime(elsewhere) as rt:
        settled = [e.data["done"] for e in rt.store.events(a.run_id) if e.kind == "effect_settled"]
    assert settled == [True]


def test_a_refusals_hint_names_the_store(
    elsewhere: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _made(elsewhere)
    with lw.Runtime(elsewhere) as rt:
        r = rt.run_sync(make_loop(FOUR_EYES), task("INV-4", 30000), task_key="t", by="sam")
    rc, said = _run(capsys, "approve", r.run_id[:12], "--by", "ana", "--store", elsewhere)
    assert rc != 0 and "no users: add them" in said, said
    [add] = [c for c in _commands(said) if c[:2] == ["users", "add"]]
    assert add[-2:] == ["--store", elsewhere], said
    rc, out = _run(capsys, *add)
    assert rc == 0, out
    with lw.Runtime(elsewhere) as rt:
        assert [u.name for u in rt.store.list_users()] == ["ana"]


def test_no_flag_where_a_bare_command_reads_the_store(
    elsewhere: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from test_pause_actions import _paused

    _made(elsewhere)
    rid = _paused(elsewhere)
    monkeypatch.setenv("LOOPWRIGHT_STORE", elsewhere)
    for given in ([], ["--store", elsewhere]):  # from the variable, or named as it is
        rc, out = _run(capsys, "show", rid[:12], *given)
        assert rc == 0, out
        [unpause] = [c for c in _commands(out) if c[0] == "unpause"]
        assert unpause == ["unpause", rid[:12]], out


def test_a_store_url_with_a_password_is_not_printed() -> None:
    from loopwright._hints import FROM_ENV, carry_store, hint_flag

    assert hint_flag(None) == ""
    url = "postgresql://ana:s3cret-pw@db.example/loops"
    assert hint_flag(url) == FROM_ENV
    text = carry_store(
        "settle it: `loopwright settle R1 pay --done` (loopwright resume R1)", FROM_ENV
    )
    assert text == (
        'settle it: `loopwright settle R1 pay --done --store "$LOOPWRIGHT_STORE"` '
        '(loopwright resume R1 --store "$LOOPWRIGHT_STORE")'
    )
    assert (
        hint_flag("postgresql://ana@db.example/loops")
        == " --store postgresql://ana@db.example/loops"
    )
    # typed with the variable unset, `--store ""`: refused in one line, the default not read
    rc = main(["runs", "--store", ""])
    assert rc == 2


def test_the_dashboard_advice_names_its_store(elsewhere: str) -> None:
    from test_pause_actions import TOKEN

    _made(elsewhere)
    with lw.Runtime(elsewhere) as rt:
        a = rt.run_sync(_paying([], lw.TransientError), TASK)
    c = dashboard(elsewhere, token=TOKEN)
    page = html.unescape(c.get(f"/runs/{a.run_id}").text)
    done = [x for x in _commands(page) if x[0] == "settle" and "--done" in x]
    assert done and all(x[-2:] == ["--store", elsewhere] for x in done), page
    # a dashboard of the store a bare command reads adds nothing
    c = dashboard(None, token=TOKEN)
    assert "--store" not in c.get("/").text


def test_the_run_pages_settle_commands_name_its_store(elsewhere: str) -> None:
    """notify56: the effects table's settle command was written in the page's template, with
    no --store: pasted, it settled (or refused) in the default store. Built by the one
    builder now (``_hints.settle_command``), it carries the store the page shows."""
    _made(elsewhere)
    with lw.Runtime(elsewhere) as rt:
        a = rt.run_sync(_paying([], lw.TransientError), TASK)
    c = dashboard(elsewhere)
    page = html.unescape(c.get(f"/runs/{a.run_id}", headers=AUTH).text)  # (an operator's)
    coded = [
        shlex.split(x)[1:] for x in re.findall(r"<code>(loopwright settle [^<]+)</code>", page)
    ]
    assert coded, page
    for cmd in coded:
        cut = cmd[: cmd.index("--result")] if "--result" in cmd else cmd
        assert cut[-2:] == ["--store", elsewhere], cmd


def _settles(text: str) -> list[list[str]]:
    return [c for c in _commands(text) if c[0] == "settle"]


def _names(cmds: list[list[str]], path: str) -> bool:
    """Each command ends with ``--store`` naming the file at ``path`` (as a path or a URL)."""
    from loopwright.store import sqlite_file

    def same(given: str) -> bool:
        f = sqlite_file(given)
        return f is not None and Path(f).resolve() == Path(path).resolve()

    return bool(cmds) and all(c[-2] == "--store" and same(c[-1]) for c in cmds)


def test_json_names_the_store_in_its_commands(
    elsewhere: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """notify56: `--json` handed out the engine's words as stored, so a command copied from
    `runs --json --store other.db` read the default store. It carries the store as the
    printed text does."""
    import json

    _made(elsewhere)
    with lw.Runtime(elsewhere) as rt:
        a = rt.run_sync(_paying([], lw.TransientError), TASK)
    rc, out = _run(capsys, "runs", "--json", "--store", elsewhere)
    assert rc == 0, out
    [run] = json.loads(out)
    listed = _settles(run["stop_cause"]) + _settles(str(run["packet"]["recommended_action"]))
    assert _names(listed, elsewhere), run
    assert _names([shlex.split(run["packet"]["trace"]["show"])], elsewhere), run["packet"]
    rc, out = _run(capsys, "show", a.run_id[:12], "--json", "--store", elsewhere)
    assert rc == 0, out
    shown = json.loads(out)["run"]
    cmds = _settles(str(shown["packet"]["recommended_action"]))
    assert _names(cmds, elsewhere), shown
    rc, said = _run(capsys, *cmds[0])  # as copied
    assert rc == 0, said
    # the store a bare command reads here: nothing added
    with lw.Runtime() as rt:
        rt.run_sync(_paying([], lw.TransientError), TASK)
    rc, out = _run(capsys, "runs", "--json")
    assert rc == 0 and "--store" not in out, out
