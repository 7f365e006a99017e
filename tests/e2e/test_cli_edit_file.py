"""``loopwright edit --file`` reads the file as ``--value`` reads its text (newuser46): a file
for a part holding JSON was stored as one string where the loop reads a mapping, and an empty
file (a redirect gone wrong) silently emptied the part."""

from __future__ import annotations

from pathlib import Path

import pytest

import loopwright as lw
from loopwright.cli import main


@pytest.fixture
def run(tmp_path: Path) -> tuple[str, str]:
    loop = lw.Loop(
        name="prices",
        actor=lambda ctx: lw.Proposal.edit("doc", {"note": "draft"}),
        verifiers=[lw.Check(fn=lambda s, p: lw.Verdict(passed=False, score=0.5), name="c")],
        contract=lw.Contract.from_dict({"budget": {"max_cycles": 1}}),
    )
    db = str(tmp_path / "s.db")
    task = {"artifacts": {"doc": {"prices": {"tea": 2}, "note": ""}}}
    with lw.Runtime(db) as rt:
        return db, rt.run_sync(loop, task, task_key="k").run_id


def _value(db: str, run_id: str, part: str) -> object:
    with lw.Runtime(db) as rt:
        return rt.result(run_id).state.values()["doc"][part]


def test_a_file_for_a_part_holding_json_is_read_as_json(
    run: tuple[str, str], tmp_path: Path
) -> None:
    db, run_id = run
    f = tmp_path / "prices.json"
    f.write_text('{"tea": 3, "cake": 5}\n')
    assert main(["edit", run_id, "doc/prices", "--file", str(f), "--by", "ana", "--store", db]) == 0
    assert _value(db, run_id, "prices") == {"tea": 3, "cake": 5}
    # a text part keeps the file's text as it is, JSON-looking or not
    assert main(["edit", run_id, "doc/note", "--file", str(f), "--by", "ana", "--store", db]) == 0
    assert _value(db, run_id, "note") == '{"tea": 3, "cake": 5}\n'


def test_a_file_that_is_not_json_for_a_json_part_or_is_empty_is_refused(
    run: tuple[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db, run_id = run
    bad, empty = tmp_path / "bad.json", tmp_path / "empty.txt"
    bad.write_text("tea: 3")
    empty.write_text("\n")
    assert main(["edit", run_id, "doc/prices", "--file", str(bad), "--by", "a", "--store", db]) == 2
    assert "doc/prices holds JSON (dict) and" in capsys.readouterr().err
    assert main(["edit", run_id, "doc/note", "--file", str(empty), "--by", "a", "--store", db]) == 2
    assert "is empty; to give the part an empty text, use --value ''" in capsys.readouterr().err
    assert _value(db, run_id, "prices") == {"tea": 2}  # nothing was written
    assert _value(db, run_id, "note") == "draft"


def test_a_file_with_a_byte_order_mark_is_read_without_it(
    run: tuple[str, str], tmp_path: Path
) -> None:
    """An editor that writes a byte-order mark (Notepad's UTF-8): a JSON part's file was
    refused ("Unexpected UTF-8 BOM") and a text part's stored the mark at its start; a task
    file is read without it already (review46)."""
    db, run_id = run
    f = tmp_path / "prices.json"
    f.write_bytes(b'\xef\xbb\xbf{"tea": 4}\n')
    assert main(["edit", run_id, "doc/prices", "--file", str(f), "--by", "ana", "--store", db]) == 0
    assert _value(db, run_id, "prices") == {"tea": 4}
    assert main(["edit", run_id, "doc/note", "--file", str(f), "--by", "ana", "--store", db]) == 0
    assert _value(db, run_id, "note") == '{"tea": 4}\n'
