"""polish55: hints a person copies printed placeholders that fail when typed as printed:
`loopwright settle RUN KEY --done --result JSON` (refused: "is not JSON"), `loopwright edit RUN
PART --value V` (no part PART; a text part given the text "V") and `loopwright users add NAME`
(a user called NAME). Each now names what the run knows (the key, the part, the person) and
runs as printed; a word left for the person (FILE) is said in words. Advice stored before
still prints the old placeholders: typed, they are refused in one line, exit 2."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest
from doc_loop import TASK
from test_keyless_effect_failures import _paying
from test_people import FOUR_EYES, make_loop, task

import loopwright as lw
from loopwright.cli import main

_PLACEHOLDERS = {"JSON", "NAME", "PART", "V", "RUN", "KEY"}


def _commands(text: str) -> list[list[str]]:
    return [shlex.split(c)[1:] for c in re.findall(r"`(loopwright [^`]+)`", text)]


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    capsys.readouterr()
    rc = main(list(argv))
    got = capsys.readouterr()
    return rc, got.out + got.err


def test_the_settle_commands_of_an_effect_in_doubt_run_as_printed(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with lw.Runtime(url) as rt:
        a = rt.run_sync(_paying([], lw.TransientError), TASK)
    assert a.status == "escalated" and a.packet is not None
    for field in ("recommended_action", "cause", "stop_cause"):
        text = a.packet[field]
        cmds = _commands(text)
        assert any(c[0] == "settle" and "--done" in c for c in cmds), (field, text)
        for c in cmds:
            assert not _PLACEHOLDERS & set(c), (field, c)
    # an old advice's `--result JSON`, typed: refused in one line, the effect still in doubt
    run = a.run_id[:12]
    rc, said = _run(capsys, "settle", run, "pay:I6", "--done", "--result", "JSON", "--store", url)
    assert rc == 2 and "JSON is the hint's placeholder" in said and "Traceback" not in said, said
    # the advice's own command, as printed
    [done] = [c for c in _commands(a.packet["recommended_action"]) if "--done" in c]
    rc, said = _run(capsys, *done, "--store", url)
    assert rc == 0, said
    with lw.Runtime(url) as rt:
        settled = [e.data["done"] for e in rt.store.events(a.run_id) if e.kind == "effect_settled"]
    assert settled == [True]


def _stuck() -> lw.Loop:
    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal.edit("doc", {"body": "the same draft"})

    def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        body = state.artifacts["doc"].values()["body"]
        ok = body == "fixed by a person"
        found = () if ok else (lw.Finding("still wrong", artifact="doc", part="body"),)
        return lw.Verdict(passed=ok, score=1.0 if ok else 0.2, findings=found)

    return lw.Loop(
        name="stuck",
        actor=actor,
        verifiers=[lw.Check(fn=check, name="c")],
        contract=lw.Contract(budget=lw.Budget(max_cycles=8), no_progress=lw.NoProgress(cycles=2)),
    )


def test_the_edit_command_of_a_stuck_run_names_its_part(
    url: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    with lw.Runtime(url) as rt:
        r = rt.run_sync(_stuck(), {"artifacts": {"doc": {"body": "draft"}}})
    assert r.stop_reason == "no_progress" and r.packet is not None
    [edit] = [c for c in _commands(r.packet["recommended_action"]) if c[0] == "edit"]
    assert edit == ["edit", r.run_id[:12], "doc/body", "--file", "FILE"], edit
    assert "(FILE: a file holding the part's new value" in r.packet["recommended_action"]
    # an old advice's `--value V`, typed: refused, the part left as it was
    rc, said = _run(capsys, "edit", r.run_id[:12], "doc/body", "--value", "V", "--store", url)
    assert rc == 2 and "V is the hint's placeholder" in said, said
    new = tmp_path / "body.txt"
    new.write_text("fixed by a person")
    rc, said = _run(capsys, *[str(new) if w == "FILE" else w for w in edit], "--store", url)
    assert rc == 0, said
    with lw.Runtime(url) as rt:
        done = rt.resume_sync(r.run_id, _stuck())
    assert done.status == "accepted", done.packet


def test_the_users_add_command_names_the_person_deciding(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with lw.Runtime(url) as rt:
        r = rt.run_sync(make_loop(FOUR_EYES), task("INV-4", 30000), task_key="t", by="sam")
    rc, said = _run(capsys, "approve", r.run_id[:12], "--by", "ana", "--store", url)
    assert rc != 0 and "no users: add them" in said, said
    found = re.search(r"\((loopwright users add [^)]+)\)", " ".join(said.split()))
    assert found is not None, said
    words = shlex.split(found.group(1))[1:]
    assert not _PLACEHOLDERS & set(words), words
    rc, out = _run(capsys, *words, "--store", url)
    assert rc == 0, out
    with lw.Runtime(url) as rt:
        [user] = rt.store.list_users()
    assert user.name == "ana" and {"admin", "approver", "finance"} <= set(user.roles)


def test_a_paused_runs_next_action_names_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "400")  # (the store's path is not folded inside a word)
    # `show` said "loopwright unpause RUN to let it go on": typed, no run RUN
    from test_pause_actions import _paused

    store = str(tmp_path / "s.db")
    rid = _paused(store)
    rc, out = _run(capsys, "show", rid, "--store", store)
    assert rc == 0, out
    said = " ".join(out.replace("│", " ").split())
    [unpause] = [c for c in _commands(said) if c[0] == "unpause"]
    # (and names the store it was shown for: hints55)
    assert unpause == ["unpause", rid[:12], "--store", store], said
    rc, out = _run(capsys, *unpause)
    assert rc == 0, out
    with lw.Runtime(store) as rt:
        assert [a.status for a in rt.store.approvals(run_id=rid)] == ["approved"]


def test_the_answer_a_refused_approval_names_runs_for_its_run_and_request(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """hints55: approving a question said `loopwright answer RUN ANSWER`: RUN is now the run,
    the request is named, and ANSWER (the person's, said in words) is refused if typed."""
    from test_answer_hint_typed import _parked_on

    rid = _parked_on(url, lw.Question("which tone?"))
    rc, said = _run(capsys, "approve", rid[:12], "--store", url)
    assert rc == 2 and "ANSWER being your answer" in said, said
    found = re.search(r"\((loopwright answer [^)]+)\)", " ".join(said.split()))
    assert found is not None, said
    words = shlex.split(found.group(1))[1:]
    assert words[1] == rid[:12] and "RUN" not in words, words
    rc, out = _run(capsys, *words)  # as printed: the placeholder answers nothing
    assert rc == 2 and "placeholder" in out, out
    rc, out = _run(capsys, *["formal" if w == "ANSWER" else w for w in words])
    assert rc == 0, out
    with lw.Runtime(url) as rt:
        [a] = rt.store.approvals(run_id=rid)
    assert (a.status, a.answer) == ("answered", "formal")


def test_one_proposed_memory_is_confirmed_by_its_id(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """hints55: `memory propose` said `loopwright memory confirm ID` for its one candidate."""
    store = str(tmp_path / "s.db")
    with lw.Runtime(store) as rt:
        mem = lw.FeedbackMemory(rt.store)
        for p in ("A", "B"):
            mem.add(scope="project", scope_key=p, signal="edit", text="Wide margins", by="a")
    rc, out = _run(capsys, "memory", "propose", "--min-projects", "2", "--store", store)
    assert rc == 0, out
    [line] = [x for x in out.splitlines() if x.startswith("confirm it with: ")]
    words = shlex.split(line.removeprefix("confirm it with: "))[1:]
    assert "ID" not in words and words[-2:] == ["--store", store], words
    rc, out = _run(capsys, *words)
    assert rc == 0, out
    with lw.Runtime(store) as rt:
        [item] = [it for it in lw.FeedbackMemory(rt.store).list() if it.scope == "global"]
    assert item.status == "active", item


def test_a_settle_command_quotes_a_key_that_is_not_one_plain_word(
    url: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A business key comes from the call's arguments (a model's choice, maybe): printed bare,
    `loopwright settle RUN INV 7; touch FILE --done` settled nothing (extra arguments) and,
    pasted into a shell, ran what the key held. Quoted, the command settles that key and runs
    nothing else (review56a; fails before: the key split over several words)."""
    pwned = tmp_path / "pwned"
    invoice = f"INV 7; touch {pwned}"

    @lw.effect("spend", name="pay", key=lambda a: a["invoice"])
    def pay(invoice: str, amount: float) -> dict[str, Any]:
        raise lw.TransientError("the ledger write after the charge failed")

    def actor(ctx: lw.Context) -> lw.Proposal:
        fix = tuple(lw.Edit("doc", k, v) for k, v in (("a", 1), ("b", 2), ("c", 3)))
        return lw.Proposal(edits=fix, effects=(pay.call(invoice=invoice, amount=5.0),))

    base = _paying([], None)
    loop = lw.Loop(
        name="quoted",
        actor=actor,
        verifiers=base.verifiers,
        contract=base.contract,
        effects=[pay],
        approvals=base.approvals,
    )
    with lw.Runtime(url) as rt:
        a = rt.run_sync(loop, TASK)
    assert a.status == "escalated" and a.packet is not None
    [done] = [c for c in _commands(a.packet["recommended_action"]) if "--done" in c]
    assert done[:3] == ["settle", a.run_id[:12], f"pay:{invoice}"] and done[3:] == ["--done"], done
    rc, said = _run(capsys, *done, "--store", url)
    assert rc == 0, said
    with lw.Runtime(url) as rt:
        settled = [e.data["done"] for e in rt.store.events(a.run_id) if e.kind == "effect_settled"]
    assert settled == [True] and not pwned.exists()
