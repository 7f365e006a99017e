"""A spec's ``[reflector]``: a loop defined as a spec writes reflections as ``Loop(reflector=)``
does; a bad table is one line on stderr and exit 2 from ``loopwright check``, which names it."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

import loopwright as lw
from loopwright.cli import main

CODE = """
import loopwright as lw
from notes import prefix                # a sibling module, imported as the actor's are

def propose(ctx):
    return lw.Proposal.edit("doc", {"x": 1})

def check(state, proposal):
    return lw.Verdict(passed=False)

def reflect(ctx, verdicts):
    return f"{prefix()} {ctx.cycle}, shown {len(ctx.memory)}"  # the notes its actor was shown

def make(word):
    def reflect(ctx, verdicts):
        return f"{word} {ctx.cycle}"
    return reflect

def one_arg(ctx):
    return "x"
"""

SPEC = """
name = "reflecting"
[actor]
ref = "code.py:propose"
[[verifiers]]
ref = "code.py:check"
[contract.budget]
max_cycles = 3
"""


def _spec(tmp_path: Path, reflector: str) -> Path:
    d = tmp_path / "spec"
    d.mkdir(exist_ok=True)
    (d / "code.py").write_text(CODE)
    (d / "notes.py").write_text("def prefix():\n    return 'note on cycle'\n")
    p = d / "loop.toml"
    p.write_text(textwrap.dedent(SPEC) + textwrap.dedent(reflector))
    return p


def test_a_spec_reflector_writes_reflections_the_next_cycles_see(tmp_path: Path) -> None:
    loop = lw.load_spec(_spec(tmp_path, '[reflector]\nref = "code.py:reflect"\nkept = 5\n'))
    assert loop.reflections_kept == 5
    with lw.Runtime(tmp_path / "r.db") as rt:
        r = rt.run_sync(loop, {"artifacts": {"doc": {"x": 0}}}, task_key="k")
        notes = sorted(
            str(m["text"])
            for m in rt.store.memory_query(scopes=[("task", "k")])
            if m["signal"] == "reflection"
        )
    assert r.cycles == 3
    # the last cycle ends the run; cycle 2's actor was shown cycle 1's note
    assert notes == ["note on cycle 1, shown 0", "note on cycle 2, shown 1"]


def test_a_reflector_factory_takes_options(tmp_path: Path) -> None:
    spec = _spec(tmp_path, '[reflector]\nref = "code.py:make"\noptions = { word = "hm" }\n')
    loop = lw.load_spec(spec)
    assert loop.reflector is not None and loop.reflections_kept == 20


def test_check_reports_the_reflector(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(["check", "--json", str(_spec(tmp_path, '[reflector]\nref = "code.py:reflect"\n'))])
        == 0
    )
    answers = {a["question"]: a for a in json.loads(capsys.readouterr().out)["answers"]}
    note = answers["What does it note after a failed cycle?"]
    assert "reflect" in note["answer"] and "newest 20" in note["answer"]
    assert main(["check", "--json", str(_spec(tmp_path, ""))]) == 0
    questions = [a["question"] for a in json.loads(capsys.readouterr().out)["answers"]]
    assert "What does it note after a failed cycle?" not in questions


@pytest.mark.parametrize(
    ("table", "words"),
    [
        ("[reflector]\nkept = 3\n", "reflector.ref: is required"),
        ('[reflector]\nref = "code.py:one_arg"\n', "must take (ctx, verdicts)"),
        ('[reflector]\nref = "code.py:nothing"\n', "reflector.ref"),
        ('[reflector]\nref = "code.py:reflect"\nkept = 0\n', "reflector.kept: must be a positive"),
        ('[reflector]\nref = "code.py:reflect"\nkept = true\n', "reflector.kept"),
        ('[reflector]\nref = "code.py:reflect"\nevery = 2\n', "unknown key 'every'"),
        ('reflector = "code.py:reflect"\n', "reflector"),
    ],
)
def test_a_bad_reflector_table_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], table: str, words: str
) -> None:
    assert main(["check", str(_spec(tmp_path, table))]) == 2
    err = capsys.readouterr().err
    assert err.count("loopwright: error:") == 1 and "Traceback" not in err, err
    assert words in " ".join(err.split()), err
