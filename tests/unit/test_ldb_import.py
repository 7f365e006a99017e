"""The LDB importer: fields, the cost proxy, and clear errors on malformed lines."""

from __future__ import annotations

import io
import json
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest

from loopwright import ConfigError, Contract
from loopwright.importers import (
    USD_PER_TOKEN,
    LdbFormatError,
    convert_record,
    import_ldb,
    import_ldb_report,
)
from loopwright.importers.ldb import default_label
from loopwright.replay._simulate import simulate
from loopwright.replay._sources import traces_from_ldb

DATA = Path(__file__).resolve().parents[1] / "data" / "ldb" / "humaneval"
GPT35 = DATA / "gpt-3.5-turbo-0613" / "results.jsonl"
REFLEXION = DATA / "reflexion" / "gpt-4o-2024-05-13.jsonl"


def record(**over: Any) -> dict[str, Any]:
    rec: dict[str, Any] = {
        "task_id": "HumanEval/0",
        "prompt": "def f(x):\n",
        "entry_point": "f",
        "given_tests": ["assert f(1) == 1", "assert g(1) == 1", "assert False"],
        "generated_test": ["assert f(1) == 1"],
        "test": "def check(candidate):\n    assert candidate(1) == 1\n",
        "seed": "def f(x): return 0",
        "implementations": ["def f(x): return 0", "def f(x): return 2", "def f(x): return x"],
        "test_feedback": [["assert f(1) == 1 # Real Execution Output: 0"], ["... 2"], []],
        "is_passing": True,
        "is_solved": True,
        "debug_iter": 2,
        "token_nums": 1001,
        "reflections": [],
        "solution": "def f(x): return x",
    }
    rec.update(over)
    return rec


def test_imports_both_shared_files(tmp_path: Path) -> None:
    for path, label in ((GPT35, "gpt-3.5-turbo-0613"), (REFLEXION, "reflexion-gpt-4o-2024-05-13")):
        out = tmp_path / f"{label}.jsonl"
        assert import_ldb(path, out) == 164
        tasks = [json.loads(line) for line in out.read_text().splitlines()]
        raw = [json.loads(line) for line in path.read_text().splitlines()]
        assert len({t["task_key"] for t in tasks}) == 164
        for t, r in zip(tasks, raw, strict=True):
            assert t["task_key"] == f"ldb/{label}/{r['task_id']}"
            assert t["artifacts"] == {"program": {"code": r["implementations"][0]}}
            assert t["visible_tests"] == r["generated_test"]
            assert t["held_out"]["tests"] == [f"{r['test']}\n\ncheck({r['entry_point']})\n"]
            assert [a["code"] for a in t["recorded"]["attempts"]] == r["implementations"][1:]
            assert t["recorded"]["is_passing"] == r["is_passing"]
            assert t["held_out"]["recorded"]["is_solved"] == r["is_solved"]
            assert sum(a["usage"]["tokens"] for a in t["recorded"]["attempts"]) == (
                r["token_nums"] if r["debug_iter"] else 0
            )


def test_cost_proxy_spreads_token_nums_evenly() -> None:
    t = convert_record(record())
    usages = [a["usage"] for a in t["recorded"]["attempts"]]
    assert [u["tokens"] for u in usages] == [501, 500]
    assert usages[0]["cost_usd"] == pytest.approx(501 * USD_PER_TOKEN)
    assert (
        convert_record(record(), usd_per_token=0.0)["recorded"]["attempts"][0]["usage"]["cost_usd"]
        == 0.0
    )
    assert t["recorded"]["attempts"][1]["feedback"] == []
    assert t["recorded"]["seed_feedback"] == ["assert f(1) == 1 # Real Execution Output: 0"]


def test_missing_generated_test_rebuilds_ldb_filter() -> None:
    rec = record()
    del rec["generated_test"]
    assert convert_record(rec)["visible_tests"] == ["assert f(1) == 1"]


def test_stream_output_and_labels(tmp_path: Path) -> None:
    src = tmp_path / "x.jsonl"
    src.write_text(json.dumps(record()) + "\n\n")
    buf = io.StringIO()
    assert import_ldb(src, buf, label="mine") == 1
    assert json.loads(buf.getvalue())["task_key"] == "ldb/mine/HumanEval/0"
    assert default_label(Path("a/gpt-4/results.jsonl")) == "gpt-4"
    assert default_label(Path("a/reflexion/gpt-4o.jsonl")) == "reflexion-gpt-4o"


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "expected a JSON object"),
        (json.dumps({k: v for k, v in record().items() if k != "test"}), "missing field 'test'"),
        (json.dumps(record(debug_iter="2")), "'debug_iter' must be int"),
        (json.dumps(record(is_passing=1)), "'is_passing' must be bool"),
        (json.dumps(record(debug_iter=5)), "'debug_iter' is 5"),
        (json.dumps(record(implementations=[])), "non-empty list"),
        (json.dumps(record(test_feedback=[[]])), "'test_feedback'"),
        # counted as 0 tokens: the run's spend dropped in silence (from probe41c)
        (json.dumps(record(token_nums=-5000)), "'token_nums' must be 0 or more, got -5000"),
        # no float holds its cost: an internal OverflowError, exit 1 (from probe46e)
        (json.dumps(record(token_nums=10**400)), "'token_nums' is too large (401 digits)"),
        # past Python's int-from-text limit: json.loads raised a bare ValueError (probe46e)
        (json.dumps(record()).replace("1001", "9" * 5000), "a number has too many digits"),
        # half an emoji, escaped: read, then an internal error writing --out (outside probe 51)
        (json.dumps(record(prompt="def f(x):\n    # \ud83d\n")), "lone surrogate (\\ud83d)"),
        (json.dumps(record(task_id="HumanEval/\udc80")), "lone surrogate (\\udc80)"),
        # a task key `loopwright run` refuses: imported, exit 0, no run made of it (probe 51)
        (json.dumps(record(task_id="HumanEval/\x1b[2J0")), "must not hold a control character"),
        (json.dumps(record(task_id="HumanEval/" + "9" * 300)), "must be at most 256 characters"),
        # an older file's lone string: its characters were the visible tests
        (
            json.dumps({**record(given_tests="assert f(1) == 1"), "generated_test": None}),
            "'given_tests' must be a list of strings",
        ),
    ],
)
def test_malformed_lines_name_their_line(tmp_path: Path, line: str, message: str) -> None:
    src = tmp_path / "bad.jsonl"
    out = tmp_path / "out.jsonl"
    src.write_text(json.dumps(record()) + "\n" + line + "\n")
    with pytest.raises(LdbFormatError) as info:
        import_ldb(src, out)
    assert info.value.line == 2
    assert "line 2" in str(info.value) and message in str(info.value)
    assert not out.exists()  # nothing half-written


def test_duplicate_task_ids_are_refused(tmp_path: Path) -> None:
    """By import, and by replay and fit-stop too: replay counted the run twice (probe46e)."""
    src = tmp_path / "dup.jsonl"
    other = record(task_id="HumanEval/1")
    src.write_text("".join(json.dumps(r) + "\n" for r in (record(), other, record())))
    said = "line 3: task 'HumanEval/0' is on line 1 too (it would be counted twice)"
    with pytest.raises(LdbFormatError, match=re.escape(said)):
        import_ldb(src, tmp_path / "o.jsonl")
    assert not (tmp_path / "o.jsonl").exists()
    with pytest.raises(LdbFormatError, match=re.escape(said)):
        list(traces_from_ldb(src))


# --- round budgets, vacuous checks and the hidden script (issue 17) -------------------------


def _write(tmp_path: Path, *records: dict[str, Any]) -> Path:
    src = tmp_path / "runs.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in records))
    return src


def _failing(task_id: str, rounds: int) -> dict[str, Any]:
    return record(
        task_id=task_id,
        implementations=["def f(x): return 0"] * (rounds + 1),
        test_feedback=[["assert f(1) == 1 # Real Execution Output: 0"]] * (rounds + 1),
        is_passing=False,
        is_solved=False,
        debug_iter=rounds,
    )


def test_round_budget_is_read_from_the_recording(tmp_path: Path) -> None:
    """A run that never passed used up its rounds (9 here, as many LDB runs did); a run that
    passed gets the budget read off the file's others, or --rounds."""
    src = _write(tmp_path, _failing("MBPP/1", 9), record())
    report = import_ldb_report(src, tmp_path / "o.jsonl")
    failing, passing = report.tasks
    assert (failing["recorded"]["rounds"], failing["recorded"]["max_cycles"]) == (9, 10)
    assert (passing["recorded"]["rounds"], passing["recorded"]["max_cycles"]) == (9, 10)
    assert report.rounds == 9 and report.rounds_seen == {9: 1} and not report.warnings
    # --rounds sets the passing runs' budget; a run that never passed keeps its own, with a word
    report = import_ldb_report(src, tmp_path / "o.jsonl", rounds=10)
    assert [t["recorded"]["max_cycles"] for t in report.tasks] == [10, 11]
    assert any("other than --rounds 10" in w for w in report.warnings)
    # every run passed and no --rounds: unknown, said so; the contract's max_cycles applies
    only = import_ldb_report(_write(tmp_path, record()), tmp_path / "o.jsonl")
    assert only.tasks[0]["recorded"]["max_cycles"] is None
    assert any("unknown" in w for w in only.warnings)
    with pytest.raises(ValueError, match="whole number"):
        import_ldb(src, tmp_path / "o.jsonl", rounds=-1)


def test_runs_with_different_budgets_keep_their_own(tmp_path: Path) -> None:
    report = import_ldb_report(
        _write(tmp_path, _failing("a", 9), _failing("b", 10), record()), io.StringIO()
    )
    assert [t["recorded"]["max_cycles"] for t in report.tasks] == [10, 11, 11]
    assert any("different round budgets" in w for w in report.warnings)


def test_tasks_without_visible_tests_are_counted_and_marked(tmp_path: Path) -> None:
    vacuous = record(task_id="MBPP/2", generated_test=[], given_tests=["assert False"])
    report = import_ldb_report(_write(tmp_path, vacuous, record()), io.StringIO())
    assert report.vacuous == [report.tasks[0]["task_key"]]
    assert report.tasks[0]["vacuous"] is True and "vacuous" not in report.tasks[1]
    assert any("1 task(s) have no visible tests" in w for w in report.warnings)


def test_mbpp_hidden_script_calls_check_once() -> None:
    """MBPP's ``test`` already ends with ``check(f)``; appending another ran it twice."""
    mbpp = convert_record(
        record(test="def check(candidate):\n    assert candidate(1) == 1\n\ncheck(f)")
    )
    (script,) = mbpp["held_out"]["tests"]
    assert script.count("check(f)") == 1
    (script,) = convert_record(record())["held_out"]["tests"]
    assert script.rstrip().endswith("check(f)") and script.count("check(f)") == 1


def test_replay_of_a_nine_round_recording_stops_by_budget(tmp_path: Path) -> None:
    """What-if replay under LDB's policy (per-task budgets): a 9-round run that never passed
    ends ``budget_cycles`` where it was recorded, not ``censored``."""
    policy = Path(__file__).resolve().parents[2] / "examples" / "code_repair" / "ldb_policy.toml"
    contract = Contract.from_dict(tomllib.loads(policy.read_text())["contract"])
    src = _write(tmp_path, _failing("MBPP/3", 9), record())
    outcomes = [simulate(t, contract) for t in traces_from_ldb(src)]
    assert [(o.reason, o.cycles) for o in outcomes] == [("budget_cycles", 10), ("success", 3)]


@pytest.mark.parametrize("price", [float("nan"), float("inf"), 1e308])
def test_a_price_that_makes_a_cost_not_finite_is_refused(tmp_path: Path, price: float) -> None:
    """NaN passed the "not negative" check and a huge price overflowed: the tasks file got
    ``NaN`` or ``Infinity`` costs, which are not JSON (from probe41c). Nothing is written."""
    src = tmp_path / "runs.jsonl"
    src.write_text(json.dumps(record()) + "\n")
    out = tmp_path / "tasks.jsonl"
    with pytest.raises(ConfigError, match="finite") as info:
        import_ldb(src, out, usd_per_token=price)
    assert info.value.field == "usd_per_token"
    assert not out.exists()
    assert convert_record(record(), usd_per_token=1e-6)["recorded"]["attempts"][0]["usage"]


# --- lines that contradict themselves --------------------------------------------------------


@pytest.mark.parametrize(
    ("over", "message"),
    [
        # the last implementation failed a visible test, yet the line says it passed
        (
            {"test_feedback": [["a"], ["b"], ["assert f(1) == 1 # Real Execution Output: 2"]]},
            "'is_passing' is True but the last implementation failed visible tests",
        ),
        ({"is_passing": False}, "'is_passing' is False but the last implementation passed"),
        # LDB stops at the first visible pass: an earlier pass with rounds after it
        (
            {"test_feedback": [["a"], [], []]},
            "implementation 1 passed every visible test (test_feedback[1] is []), yet the run "
            "went on to 2",
        ),
        # tokens are counted only over debugging rounds
        (
            {"implementations": ["def f(x): return x"], "test_feedback": [[]], "debug_iter": 0},
            "'token_nums' is 1001 for 0 debugging rounds",
        ),
        ({"token_nums": 0}, "'token_nums' is 0 for 2 debugging rounds"),
    ],
)
def test_a_line_that_contradicts_itself_is_refused(
    tmp_path: Path, over: dict[str, Any], message: str
) -> None:
    """Such a line was imported as it stood: a replay then counted a visible pass, or a
    spend, that the recording never had (a run 'passing' with failures left, tokens billed
    for no round)."""
    src = _write(tmp_path, record(task_id="HumanEval/1"), record(**over))
    with pytest.raises(LdbFormatError, match=re.escape(message)) as info:
        import_ldb(src, tmp_path / "o.jsonl")
    assert info.value.line == 2
    assert not (tmp_path / "o.jsonl").exists()
    with pytest.raises(LdbFormatError, match=re.escape(message)):
        list(traces_from_ldb(src))


def test_the_tasks_file_is_written_masked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A key in a recorded program or test is masked in the tasks file, as a run masks its
    task: by the library call (a path or a stream) and by ``loopwright import ldb``."""
    from loopwright.cli import main

    key = "sk-proj-Pl4ntedOpenAIkey0123456789abcdefghij"
    rec = record(
        prompt=f'def f(x):\n    """calls the API with {key}"""\n',
        implementations=[f"def f(x):\n    k = '{key}'\n    return x", "def f(x): return x"],
        test_feedback=[["assert f(1) == 1"], []],
        debug_iter=1,
    )
    src = tmp_path / "ldb.jsonl"
    src.write_text(json.dumps(rec) + "\n", encoding="utf-8")
    stream = io.StringIO()
    report = import_ldb_report(src, stream)
    assert report.tasks and key in json.dumps(report.tasks)  # what was read: the recording
    written = [tmp_path / "lib.jsonl", tmp_path / "cli.jsonl"]
    import_ldb_report(src, written[0])
    assert main(["import", "ldb", str(src), "--out", str(written[1])]) in (0, None)
    capsys.readouterr()
    for text in (stream.getvalue(), *(p.read_text(encoding="utf-8") for p in written)):
        assert key not in text
        task = json.loads(text)
        assert "***" in task["artifacts"]["program"]["code"]
        assert task["artifacts"]["program"]["code"].startswith("def f(x):\n    k = '")


def test_the_code_repair_example_refuses_a_raw_ldb_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``loopwright run examples/code_repair/loop.toml --tasks <an LDB results file>`` escalated
    every task at its first check ("the task has no 'visible_tests'"): the example's ``init``
    converted a raw record into its state, but a run's checks read the task as given. Now the
    raw file is refused before any run is made, naming the import that turns it into tasks."""
    from loopwright.cli import main

    spec = Path(__file__).resolve().parents[2] / "examples" / "code_repair" / "loop.toml"
    raw = tmp_path / "results.jsonl"
    raw.write_text("\n".join(GPT35.read_text(encoding="utf-8").splitlines()[:2]) + "\n")
    store = tmp_path / "s.db"
    code = main(["run", str(spec), "--tasks", str(raw), "--store", str(store)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "loopwright import ldb" in err and "results.jsonl:1" in err
    assert "Traceback" not in err
    assert not store.exists()  # refused before the store, and any run, was made


def test_the_tasks_are_not_written_over_the_recording(tmp_path: Path) -> None:
    """``--out`` naming the file being imported (by any name: a relative path, a link) wrote
    the tasks over the recording, exit 0, the LDB file gone (outside probe, stop 51)."""
    src = tmp_path / "runs.jsonl"
    recording = json.dumps(record()) + "\n"
    src.write_text(recording)
    link = tmp_path / "link.jsonl"
    link.symlink_to(src)
    for out in (src, link, tmp_path / "." / "runs.jsonl"):
        with pytest.raises(ConfigError, match="is the file being imported") as info:
            import_ldb(src, out)
        assert info.value.field == "path_out"
        assert src.read_text() == recording
    assert import_ldb(src, tmp_path / "tasks.jsonl") == 1  # another file is written as before
    assert src.read_text() == recording


def test_an_escaped_surrogate_pair_is_its_character(tmp_path: Path) -> None:
    """The lone-surrogate refusal leaves a pair alone: JSON's "\\ud83d\\ude00" is one emoji."""
    src = tmp_path / "runs.jsonl"
    src.write_text(json.dumps(record(prompt="def f(x):\n    # \U0001f600\n")) + "\n")
    assert "\\ud83d\\ude00" in src.read_text()
    out = tmp_path / "tasks.jsonl"
    assert import_ldb(src, out) == 1
    assert "\U0001f600" in json.loads(out.read_text(encoding="utf-8"))["prompt"]


@pytest.mark.parametrize("label", ["a\nb", "a\x1b[2J", "\u202egpt"])
def test_a_label_no_task_key_may_hold_is_refused(tmp_path: Path, label: str) -> None:
    """``--label`` is in every task key: one holding a line break made 164 tasks, exit 0,
    whose every key ``loopwright run`` then refused (outside probe, stop 51)."""
    src = tmp_path / "runs.jsonl"
    src.write_text(json.dumps(record()) + "\n")
    with pytest.raises(ConfigError, match="label") as info:
        import_ldb(src, tmp_path / "tasks.jsonl", label=label)
    assert info.value.field == "label"
    assert not (tmp_path / "tasks.jsonl").exists()


def test_the_summary_line_is_one_line_in_a_pipe(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``loopwright import ldb``'s summary is one line whatever its length when stdout is no
    terminal (Rich folded it at 80 columns, and a script reading it for ``wrote N task(s)``
    found half of it)."""
    from loopwright.cli import main

    monkeypatch.setenv("COLUMNS", "80")
    src = tmp_path / "ldb.jsonl"
    src.write_text(json.dumps(record()) + "\n", encoding="utf-8")
    out = tmp_path / ("a-folder-with-a-long-name-" * 3) / "tasks.jsonl"
    out.parent.mkdir()
    assert main(["import", "ldb", str(src), "--out", str(out)]) in (0, None)
    lines = capsys.readouterr().out.splitlines()
    said = f"wrote 1 task(s) to {out} (round budget: "
    assert len(said) > 80
    assert [line for line in lines if line.startswith(said)] == [lines[0]]
    assert lines[0].endswith("; no visible tests: 0)")
