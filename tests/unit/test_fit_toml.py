"""A fitted contract's TOML holds a check name as itself: what TOML refuses raw (DEL) or a
terminal acts on when ``fit-stop`` prints it (C1 controls, bidirectional controls, line and
paragraph separators) written as ``\\uXXXX``. A check name with DEL, read from recorded runs,
made a contract no TOML reader would load; a C1 CSI or a right-to-left override reached the
terminal raw."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from loopwright.cli import main
from loopwright.replay import Call, CycleTrace, RunTrace, load_contract, write_traces
from loopwright.replay._fit import fit_stop

READABLE = " é 漢字 🙂"
# (the bidirectional marks U+200E, U+200F and U+061C too: the terminal's text writes them out)
NAME = "visible\x7f\x9b31m \u202eevil\u2066x\u2069\u2028\u2029\u200e\u200f\u061c" + READABLE
RAW = (
    "\x7f",
    "\x9b",
    "\u202e",
    "\u2066",
    "\u2069",
    "\u2028",
    "\u2029",
    "\u200e",
    "\u200f",
    "\u061c",
)


def _run(key: str, scores: list[float]) -> RunTrace:
    cycles = tuple(
        CycleTrace(
            cycle=k,
            calls=(Call("actor", 0.01, 100),),
            verdicts={NAME: {"passed": s >= 1.0, "score": s}},
            score=s,
        )
        for k, s in enumerate(scores, 1)
    )
    ok = scores[-1] >= 1.0
    return RunTrace(
        run_id=key,
        task_key=key,
        cycles=cycles,
        required=(NAME,),
        recorded={
            "status": "accepted" if ok else "stopped",
            "stop_reason": "success" if ok else "budget_cycles",
            "cycles": len(cycles),
            "cost_usd": 0.01 * len(cycles),
            "tokens": 100 * len(cycles),
        },
    )


def _traces() -> list[RunTrace]:
    return [_run(f"t{i:02d}", [0.5, 0.7, 1.0] if i % 3 else [0.3] * 6) for i in range(12)]


def _source(tmp_path: Path) -> Path:
    """The traces as a run-trace file, what ``fit-stop`` reads."""
    source = tmp_path / "runs.jsonl"
    with source.open("w", encoding="utf-8") as fh:
        write_traces(_traces(), fh)
    return source


def test_a_check_name_with_controls_is_written_escaped_and_reads_back_as_itself(
    tmp_path: Path,
) -> None:
    r = fit_stop(_traces(), keep=0.98)
    assert r.contract.success.required == (NAME,)
    text = r.to_toml()
    for raw in RAW:
        assert raw not in text, repr(raw)
    assert READABLE in text  # ordinary text is not escaped
    assert tomllib.loads(text)["contract"]["success"]["required"] == [NAME]
    path = tmp_path / "fitted.toml"
    path.write_text(text, encoding="utf-8")
    assert load_contract(path).to_dict() == r.contract.to_dict()


def test_fit_stop_prints_the_contract_without_raw_controls(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["fit-stop", str(_source(tmp_path))]) == 0
    out = capsys.readouterr().out
    for raw in RAW:
        assert raw not in out, repr(raw)
    toml_text = out[out.index("# Fitted by") :]
    assert tomllib.loads(toml_text)["contract"]["success"]["required"] == [NAME]


def test_a_check_name_with_a_lone_surrogate_is_a_bad_trace_file_and_nothing_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # TOML (UTF-8) cannot hold it: the fitted contract's write failed as an internal error
    # and left an empty file behind
    source = _source(tmp_path)
    text = source.read_text(encoding="utf-8")
    source.write_text(text.replace('"required":["visible', '"required":["\\ud800visible'))
    out = tmp_path / "fitted.toml"
    assert main(["fit-stop", str(source), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    # (refused where the line is read since stop 51, as any string of a trace line is)
    assert f"{source}, line 1: holds a lone surrogate (\\ud800), which is not text" in err
    assert not out.exists()


@pytest.mark.parametrize("optimise", ["spend", "attempts"])
def test_the_header_says_each_saving_once(optimise: str) -> None:
    """With spend optimised (the default), the header read "spend saved 70.6%, spend saved
    70.6%": one figure said twice, as if two."""
    r = fit_stop(_traces(), keep=0.98, optimise=optimise)
    [line] = [x for x in r.to_toml().splitlines() if x.startswith("# All runs:")]
    assert line.count("spend saved") == 1, line
    assert line.count(f"{optimise} saved") == 1, line
    assert "cost per accepted" in line


def test_fit_stop_says_when_the_runs_hold_too_few_outcomes_to_keep(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """On runs that reached no accepted outcome, every candidate "kept 100.0%" and fit-stop
    wrote `max_cycles = 1` as "spend saved 95%", saying nothing; on 8 accepted outcomes a keep
    of 0.98 cannot lose one (it takes 50), which nothing said either."""
    none = tmp_path / "none.jsonl"
    with none.open("w", encoding="utf-8") as fh:
        write_traces([_run(f"s{i:02d}", [0.3] * 4) for i in range(6)], fh)
    assert main(["fit-stop", str(none), "--folds", "2"]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert "note: the runs hold no accepted outcome" in err, err
    source = str(_source(tmp_path))  # 8 accepted outcomes of 12 runs
    assert main(["fit-stop", source]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert "note: the runs hold 8 accepted outcome(s): a keep of 0.98" in err, err
    assert "from 50 on" in err
    assert main(["fit-stop", source, "--keep", "0.5"]) == 0  # one of 2 may go: enough runs
    assert "note:" not in capsys.readouterr().err


def test_the_headers_dollars_read_as_the_table_beside_it() -> None:
    """polish54: the header read ``cost per accepted $0.04938 (reference $0.07407)`` beside
    the table's ``$0.0494``: one form for dollars (``_money_text.usd``) here too."""
    from dataclasses import replace

    from loopwright._money_text import usd

    def priced(t: RunTrace) -> RunTrace:  # a price with digits beyond a cent's
        cycles = tuple(replace(c, calls=(Call("actor", 0.0123457, 100),)) for c in t.cycles)
        return replace(
            t, cycles=cycles, recorded={**t.recorded, "cost_usd": 0.0123457 * len(cycles)}
        )

    r = fit_stop([priced(t) for t in _traces()], keep=0.98, optimise="attempts")
    [line] = [x for x in r.to_toml().splitlines() if x.startswith("# All runs:")]
    a = r.all_data
    said = (
        f"cost per accepted {usd(a.cost_per_accepted_usd or 0)} "
        f"(reference {usd(a.reference_cost_per_accepted_usd or 0)})."
    )
    assert line.endswith(said), (line, said)
