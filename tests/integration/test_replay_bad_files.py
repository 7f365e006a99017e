"""Malformed run-trace and LDB files (from an outside probe, probe41c): each is refused naming
the file and the line, where it used to replay silently as another run, or named a wrong line."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import loopwright as lw
from loopwright.cli import main
from loopwright.importers.ldb import LdbFormatError, import_ldb
from loopwright.replay import load_contract, load_source, read_traces, write_traces

ROOT = Path(__file__).resolve().parents[2]
GPT35 = ROOT / "tests" / "data" / "ldb" / "humaneval" / "gpt-3.5-turbo-0613" / "results.jsonl"
POLICY = ROOT / "examples" / "code_repair" / "ldb_policy.toml"


def _repaired() -> dict[str, Any]:
    """A recorded run of three cycles (the last one passed), as a trace file's object."""
    run = next(t for t in load_source(str(GPT35)) if len(t.cycles) == 3)
    return run.to_dict()


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(doc: dict[str, Any]) -> None:
        *parts, last = path.split(".")
        target: Any = doc
        for p in parts:
            target = target[int(p)] if p.isdigit() else target[p]
        target[last] = value

    return change


def _reverse(doc: dict[str, Any]) -> None:
    doc["cycles"].reverse()


def _renumber(doc: dict[str, Any]) -> None:
    for c in doc["cycles"]:
        c["cycle"] = 1


@pytest.mark.parametrize(
    ("change", "said"),
    [
        # bool("false") is True: every cycle replayed as refused (nothing accepted)
        (_set("cycles.0.refused", "false"), "refused must be true or false"),
        (_set("cycles.2.reopened", 0), "reopened must be true or false"),
        # a failed check recorded as "false" passed
        (_set("cycles.2.verdicts.visible_tests.passed", "false"), "passed must be true or false"),
        (_set("cycles.0.verdicts.visible_tests", 1), "verdicts.visible_tests must be an object"),
        (_set("cycles.0.verdicts.visible_tests.score", float("nan")), "score must be a number"),
        # a lone string: its characters were the required checks, none of which ever passed
        (_set("required", "visible_tests"), "required must be a list of check names"),
        # an unknown ending replayed as censored, adding its spend
        (_set("tail", {"kind": "crashed", "cost_usd": 1.0}), "tail.kind must be one of"),
        (_set("start", {"cycle": "2", "cost_usd": -5}), "start.cycle must be a whole number"),
        # a whole number no float holds: an internal OverflowError, exit 1 (probe46e)
        (_set("cycles.1.calls.0.tokens", 10**400), "calls[].tokens must be a whole number"),
        (_set("cycles.1.calls.0.cost_usd", 10**400), "calls[].cost_usd must be a number"),
        (_set("recorded.cycles", 10**400), "recorded.cycles must be a whole number"),
        (_set("start", {"passed_checks": "visible_tests"}), "start.passed_checks must be a list"),
        # not "accepted": the recorded column and fit-stop's reference lost the run in silence
        (_set("recorded.status", "Accepted"), "recorded.status must be one of"),
        (_set("recorded.stop_reason", 5), "recorded.stop_reason must be one of"),
        (_set("recorded.success_required", "visible_tests"), "recorded.success_required must"),
        # replay takes cycles in the order listed: reversed, the passing cycle came first
        (_reverse, "cycle numbers must increase, got [3, 2, 1]"),
        (_renumber, "cycle numbers must increase, got [1, 1, 1]"),
    ],
)
def test_a_field_of_the_wrong_type_or_order_is_refused_naming_the_line(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    change: Callable[[dict[str, Any]], None],
    said: str,
) -> None:
    doc = _repaired()
    good = json.dumps(doc)
    change(doc)
    bad = tmp_path / "bad.jsonl"
    bad.write_text(good.replace(doc["run_id"], "other") + "\n" + json.dumps(doc) + "\n")
    with pytest.raises(lw.ConfigError, match="malformed run trace") as info:
        list(read_traces(bad))
    assert said in str(info.value) and f"{bad}:2" in str(info.value)
    assert main(["replay", str(bad), "--contract", str(POLICY)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"{bad}:2: malformed run trace: " in err and said in err


def test_a_run_listed_twice_is_refused_not_counted_twice(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = load_source(str(GPT35))[:8]
    traces = tmp_path / "t.jsonl"
    write_traces(runs, traces)
    twice = tmp_path / "twice.jsonl"
    twice.write_text(traces.read_text() + traces.read_text().splitlines()[2] + "\n")
    with pytest.raises(lw.ConfigError, match=r"line 9: run .* is on line 3 too"):
        list(read_traces(twice))
    # the same runs pooled from two sources (a file given twice, the LDB file and its traces)
    for sources in ([traces, traces], [GPT35, traces]):
        assert main(["fit-stop", *map(str, sources), "--folds", "2"]) == 2
        err = " ".join(capsys.readouterr().err.split())
        assert f"run {runs[0].run_id!r} is in {sources[0]} and in {sources[1]}" in err, err


def test_an_ldb_file_listing_a_task_twice_is_refused_by_replay(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Import and fit-stop refused it; replay took the run twice, in every column (probe46e)."""
    lines = GPT35.read_text().splitlines()
    twice = tmp_path / "twice.jsonl"
    twice.write_text("\n".join([*lines[:5], lines[1]]) + "\n")
    assert main(["replay", str(twice), "--contract", str(POLICY)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"{twice}, line 6: task 'HumanEval/" in err and "is on line 2 too" in err, err


def test_bytes_that_are_not_utf8_are_refused_naming_their_line(tmp_path: Path) -> None:
    """Decoded by a text stream, the error came up with the 8 KB chunk holding the bad byte:
    lines before it (line 95 for a bad line 100), or with no line at all for a short file."""
    lines = [json.dumps(t.to_dict()).encode() for t in load_source(str(GPT35))[:120]]
    bad = tmp_path / "t.jsonl"
    bad.write_bytes(b"\n".join([*lines[:99], b'{"format": "\xff"}', *lines[99:]]) + b"\n")
    with pytest.raises(lw.ConfigError, match=r"line 100: not UTF-8"):
        load_source(str(bad))
    short = tmp_path / "s.jsonl"
    short.write_bytes(lines[0] + b"\n" + lines[1] + b'\n{"x": "\xff"}\n')
    with pytest.raises(lw.ConfigError, match=r"s.jsonl, line 3: not UTF-8"):
        load_source(str(short))
    ldb = GPT35.read_bytes().splitlines()
    bad_ldb = tmp_path / "ldb.jsonl"
    bad_ldb.write_bytes(b"\n".join([*ldb[:100], b'{"x": "\xff"}', *ldb[100:]]) + b"\n")
    with pytest.raises(LdbFormatError) as info:
        import_ldb(bad_ldb, tmp_path / "tasks.jsonl")
    assert info.value.line == 101 and "not UTF-8" in str(info.value)
    with pytest.raises(LdbFormatError, match="line 101: not UTF-8"):
        load_source(str(bad_ldb))


@pytest.mark.parametrize(
    ("text", "said"),
    [
        # a loop spec's [contract] with a misspelt rule: replayed without the plateau rule
        (
            "[contract.budget]\nmax_cycles = 3\n[contract.no_progres]\ncycles = 2\n",
            "contract.no_progres",
        ),
        ("[contrct.budget]\nmax_cycles = 3\n", "contrct"),  # was "no exit besides success"
        ("[budget]\nmax_cycles = 3\n[budgt]\nmax_cycles = 2\n", "budgt"),  # bare tables
    ],
)
def test_a_misspelt_contract_table_is_refused_not_dropped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, said: str
) -> None:
    path = tmp_path / "c.toml"
    path.write_text(text)
    with pytest.raises(lw.ConfigError, match=f"unknown table '{said}'"):
        load_contract(path)
    assert main(["replay", str(GPT35), "--contract", str(path)]) == 2
    assert f"unknown table '{said}'" in " ".join(capsys.readouterr().err.split())
    # a loop spec's own tables beside [contract], and bare tables, still load
    spec = tmp_path / "spec.toml"
    spec.write_text('name = "x"\n[actor]\nref = "a.py:f"\n[contract.budget]\nmax_cycles = 3\n')
    assert load_contract(spec).budget.max_cycles == 3
    assert load_contract(POLICY).success.required == ("visible_tests",)


@pytest.mark.parametrize(
    ("text", "said"),
    [
        # bare tables beside [contract]: the file replayed under [contract]'s alone
        ("[contract.budget]\nmax_cycles = 2\n[budget]\nmax_cycles = 3\n", "[budget] beside"),
        ("[contract.budget]\nmax_cycles = 2\n[no_progress]\ncycles = 1\n", "[no_progress]"),
        # risk rules are not replayed, but one a run would refuse is the file's mistake
        ('[budget]\nmax_cycles = 2\n[[risk]]\nname = "r"\n', "needs 'touches'"),
        ('[budget]\nmax_cycles = 2\n[risk]\nname = "r"\ntouches = ["a/b"]\n', "array"),
        (
            '[contract.budget]\nmax_cycles = 2\n[[contract.risk]]\nname = "r"\ntouches = "a/*"\n'
            '[[contract.risk]]\nname = "r"\ntouches = "b/*"\n',
            "unique",
        ),
    ],
)
def test_a_contract_file_a_run_would_refuse_is_refused_not_read_in_part(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, said: str
) -> None:
    path = tmp_path / "c.toml"
    path.write_text(text)
    with pytest.raises(lw.ConfigError, match=re.escape(said)):
        load_contract(path)
    assert main(["replay", str(GPT35), "--contract", str(path)]) == 2
    assert said in " ".join(capsys.readouterr().err.split())
    good = tmp_path / "good.toml"  # valid rules are still read and dropped
    good.write_text('[budget]\nmax_cycles = 2\n[[risk]]\nname = "r"\ntouches = ["a/*"]\n')
    assert load_contract(good).risk == ()
    assert load_contract(good, keep_risk=True).risk[0].touches == ("a/*",)


@pytest.mark.parametrize(
    "text",
    [
        "[budget]\nmax_cycles = 0\n",
        "[success]\nmin_score = 2\n[budget]\nmax_cycles = 3\n",
        '[budget]\nmax_cycles = 2\n[[risk]]\nname = "r"\n',
    ],
)
def test_of_several_contract_files_the_refused_one_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str
) -> None:
    """replay takes several --contract files; a rule the contract refuses was said without
    the file ("contract.budget.max_cycles: must be at least 1"), as a misspelt table was not."""
    good = tmp_path / "fine.toml"
    good.write_text("[budget]\nmax_cycles = 3\n")
    bad = tmp_path / "wrong.toml"
    bad.write_text(text)
    assert main(["replay", str(GPT35), "--contract", str(good), "--contract", str(bad)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"--contract: {bad}: contract." in err, err
    assert str(good) not in err


def test_line_ends_a_bare_carriage_return_is_said_and_crlf_is_read(tmp_path: Path) -> None:
    """A run-trace (or LDB) file whose lines end in a bare \\r read as one line holding
    several values, refused as "line 1: not JSON (Extra data)", which said nothing of why.
    JSON Lines ends a line with \\n (\\r\\n too: JSON ignores the \\r); a bare \\r is JSON
    whitespace inside a line, so it is not taken for a line end: the message says so."""
    runs = load_source(str(GPT35))[:3]
    traces = tmp_path / "t.jsonl"
    write_traces(runs, traces)
    lines = traces.read_bytes().splitlines()
    crlf = tmp_path / "crlf.jsonl"
    crlf.write_bytes(b"\r\n".join(lines) + b"\r\n")
    assert [t.run_id for t in load_source(str(crlf))] == [t.run_id for t in runs]
    cr = tmp_path / "cr.jsonl"
    cr.write_bytes(b"\r".join(lines) + b"\r")
    with pytest.raises(lw.ConfigError) as info:
        load_source(str(cr))
    said = str(info.value)
    assert f"{cr}, line 1: not JSON (Extra data)" in said, said
    assert "bare carriage return" in said and "\\n or \\r\\n" in said
    ldb = GPT35.read_bytes().splitlines()[:3]
    cr_ldb = tmp_path / "ldb.jsonl"
    cr_ldb.write_bytes(b"\r".join(ldb) + b"\r")
    with pytest.raises(LdbFormatError, match="bare carriage return") as ldb_info:
        import_ldb(cr_ldb, tmp_path / "tasks.jsonl")
    assert ldb_info.value.line == 1
