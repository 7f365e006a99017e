"""review54c: `loopwright approvals` on a run parked on a question printed
``loopwright answer RUN TEXT`` (polish54 made the other hints work when copied). Typed as
printed, it answered the question "TEXT" and the run went on with that answer, as ``--by NAME``
once recorded decisions by "NAME". The placeholder is now the command's own metavar
(``ANSWER``), and an answer that is only a hint's placeholder is refused in one line (exit 2),
unless the question offers it as a choice. SQLite and PostgreSQL (``url``)."""

from __future__ import annotations

import os
import shlex

import pytest
from doc_loop import TASK
from test_engine_core import fixer, make_loop

import loopwright as lw
from loopwright.cli import main


def _parked_on(url: str, question: lw.Question) -> str:
    """A run parked on ``question`` at its cycle 2."""

    def asking(ctx: lw.Context) -> lw.Proposal:
        return fixer(ctx) if ctx.cycle != 2 else lw.Proposal(question=question)

    with lw.Runtime(url) as rt:
        r = rt.run_sync(make_loop(asking), TASK, task_key="k")
    assert r.status == "awaiting_approval"
    return r.run_id


def _hint(capsys: pytest.CaptureFixture[str], url: str) -> str:
    capsys.readouterr()
    assert main(["approvals", "--store", url]) == 0
    [line] = [x for x in capsys.readouterr().out.splitlines() if x.startswith("decide with: ")]
    return line.removeprefix("decide with: ")


def test_the_answer_hint_typed_as_printed_answers_nothing(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    rid = _parked_on(url, lw.Question("which tone?"))
    line = _hint(capsys, url)
    assert "  " not in line and not line.endswith(" "), repr(line)
    words = shlex.split(os.path.expandvars(line))
    assert words[:2] == ["loopwright", "answer"], line
    capsys.readouterr()
    assert main(words[1:]) == 2
    err = capsys.readouterr().err
    assert "placeholder" in err and "Traceback" not in err, err
    with lw.Runtime(url) as rt:
        assert [a.status for a in rt.store.approvals(run_id=rid)] == ["pending"]
    # the same command with an answer in the placeholder's place answers it
    [hole] = [w for w in words if w in ("ANSWER", "TEXT")]
    assert main(["formal" if w == hole else w for w in words[1:]]) == 0
    with lw.Runtime(url) as rt:
        [a] = rt.store.approvals(run_id=rid)
    assert (a.status, a.answer) == ("answered", "formal")


def test_a_choice_spelled_as_a_placeholder_is_an_answer(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    rid = _parked_on(url, lw.Question("which field?", choices=("TEXT", "IMAGE")))
    assert main(["answer", rid, "TEXT", "--store", url]) == 0, capsys.readouterr()
    with lw.Runtime(url) as rt:
        [a] = rt.store.approvals(run_id=rid)
    assert (a.status, a.answer) == ("answered", "TEXT")
