"""A JSON Lines file that starts with a UTF-8 byte-order mark (Windows editors write one) is
read as the file without it, by every JSON Lines reader: a tasks file (``--tasks``), a run-trace
file and an LDB results file, replayed (``load_source``, which reads the first line to tell
them apart) or imported (outside probe, stop 51: the LDB and trace readers refused it in
Python's words, "Unexpected UTF-8 BOM (decode using utf-8-sig)")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import loopwright as lw
from loopwright.cli._tasks import load_tasks
from loopwright.importers.ldb import LdbFormatError, import_ldb
from loopwright.replay import load_contract, load_source, read_traces, write_traces

ROOT = Path(__file__).resolve().parents[2]
GPT35 = ROOT / "tests" / "data" / "ldb" / "humaneval" / "gpt-3.5-turbo-0613" / "results.jsonl"
BOM = b"\xef\xbb\xbf"


def _first_lines(path: Path, n: int) -> bytes:
    with path.open("rb") as fh:
        return b"".join(fh.readline() for _ in range(n))


@pytest.fixture
def ldb(tmp_path: Path) -> tuple[Path, Path]:
    """Three records of the shared LDB file, as they are and after a byte-order mark."""
    plain, marked = tmp_path / "plain.jsonl", tmp_path / "marked.jsonl"
    data = _first_lines(GPT35, 3)
    plain.write_bytes(data)
    marked.write_bytes(BOM + data)
    return plain, marked


def test_an_ldb_file_with_a_bom_imports_as_without(tmp_path: Path, ldb: tuple[Path, Path]) -> None:
    plain, marked = ldb
    assert import_ldb(marked, tmp_path / "a.jsonl") == import_ldb(plain, tmp_path / "b.jsonl") == 3
    # the same tasks (their keys and sources name the file)
    read = (tmp_path / "a.jsonl").read_text()
    assert read.replace("marked", "plain") == (tmp_path / "b.jsonl").read_text()


def test_an_ldb_file_with_a_bom_replays_as_without(ldb: tuple[Path, Path]) -> None:
    plain, marked = ldb
    got = json.dumps([t.to_dict() for t in load_source(str(marked))])
    want = json.dumps([t.to_dict() for t in load_source(str(plain))])
    assert got.replace("marked", "plain") == want  # (the file's name is in keys and sources)


@pytest.mark.parametrize("blank", [b"", b"\n", b"\r\n  \n"])
def test_a_trace_file_with_a_bom_replays_as_without(
    tmp_path: Path, ldb: tuple[Path, Path], blank: bytes
) -> None:
    runs = list(load_source(str(ldb[0])))
    plain, marked = tmp_path / "t.jsonl", tmp_path / "tm.jsonl"
    write_traces(runs, plain)
    marked.write_bytes(BOM + blank + plain.read_bytes())
    want = [t.to_dict() for t in runs]
    assert [t.to_dict() for t in read_traces(marked)] == want
    assert [t.to_dict() for t in load_source(str(marked))] == want


def test_a_bom_past_the_first_line_is_refused_naming_its_line(
    tmp_path: Path, ldb: tuple[Path, Path]
) -> None:
    """Two marked files joined: the second mark is no file's start; said as such, not in
    JSON's words."""
    joined = tmp_path / "joined.jsonl"
    data = ldb[1].read_bytes()
    joined.write_bytes(data + data)
    with pytest.raises(LdbFormatError) as info:
        import_ldb(joined, tmp_path / "out.jsonl")
    assert info.value.line == 4
    assert "byte-order mark (U+FEFF)" in str(info.value)
    assert "utf-8-sig" not in str(info.value)


def test_a_tasks_file_with_a_bom_reads_as_without(tmp_path: Path) -> None:
    path = tmp_path / "tasks.jsonl"
    path.write_bytes(BOM + b'{"task_key": "T-1"}\n{"task_key": "T-2"}\n')
    assert list(load_tasks(None, path, None)) == [{"task_key": "T-1"}, {"task_key": "T-2"}]
    one = tmp_path / "task.json"
    one.write_bytes(BOM + b'{"task_key": "T-1"}')
    assert list(load_tasks(one, None, None)) == [{"task_key": "T-1"}]


def test_a_bom_past_the_first_line_of_a_trace_file_is_refused(
    tmp_path: Path, ldb: tuple[Path, Path]
) -> None:
    plain, joined = tmp_path / "t.jsonl", tmp_path / "joined.jsonl"
    write_traces(list(load_source(str(ldb[0])))[:1], plain)
    joined.write_bytes(BOM + plain.read_bytes() + BOM + plain.read_bytes())
    with pytest.raises(lw.ConfigError) as info:
        list(read_traces(joined))
    assert "line 2" in str(info.value) and "byte-order mark" in str(info.value), info.value


def test_a_contract_file_with_a_bom_reads_as_without(tmp_path: Path) -> None:
    """As a loop spec (which read past a mark already): ``replay --contract`` refused it as
    "not valid TOML: Invalid statement (at line 1, column 1)"."""
    text = b"[contract.budget]\nmax_cycles = 3\n"
    plain, marked = tmp_path / "c.toml", tmp_path / "cm.toml"
    plain.write_bytes(text)
    marked.write_bytes(BOM + text)
    assert load_contract(marked) == load_contract(plain)
    assert load_contract(marked).budget.max_cycles == 3
