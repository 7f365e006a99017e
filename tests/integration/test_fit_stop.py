"""fit-stop on the shared LDB recordings, and the ``loopwright fit-stop`` command end to end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from forkserver import run_cli

from loopwright.replay import RunTrace, load_contract, load_source, replay, write_traces
from loopwright.replay._fit import Grid, fit_stop, split_folds

ROOT = Path(__file__).resolve().parents[2]
GPT35 = ROOT / "tests/data/ldb/humaneval/gpt-3.5-turbo-0613/results.jsonl"
GPT4O = ROOT / "tests/data/ldb/humaneval/reflexion/gpt-4o-2024-05-13.jsonl"
LDB_POLICY = ROOT / "examples/code_repair/ldb_policy.toml"

# Every axis of the search with two or three values (the default grid's 13 cycle caps, 4 deltas,
# 4 cost quantiles and 7 marginal multiples are ≈ 14 s of CPU over the two fits that take this
# one, ≈ 1 s with it). What those tests assert is not about the grid's size: a base's cap and
# success rule kept (a cap above the base's, 20, is offered and must not be taken), a fold's
# cost caps and marginal values read off its training runs only (cost quantiles and marginal
# multiples are on the grid); planting either defect fails them with this grid as with the
# default one (stop 56). test_fit_on_ldb_keeps_outcomes_and_saves_spend keeps the default grid:
# what a user's fit of the LDB runs gives.
SMALL_GRID = Grid(
    no_progress_cycles=(1, 3),
    min_deltas=(0.0, 0.05),
    max_cycles=(2, 5, 20),
    cost_quantiles=(0.8, 0.9),
    marginal_multiples=(4.0, 32.0),
)


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop("LOOPWRIGHT_DEBUG", None)
    exe = Path(sys.executable).with_name("loopwright")
    return run_cli([str(exe), *args], env, timeout=120, cwd=cwd)  # (tests/forkserver.py)


@pytest.fixture(scope="module")
def gpt35() -> list[RunTrace]:
    return load_source(str(GPT35))


def test_fit_on_ldb_keeps_outcomes_and_saves_spend(gpt35: list[RunTrace], tmp_path: Path) -> None:
    r = fit_stop(gpt35, keep=0.95, folds=5, seed=0)
    assert r.feasible and r.reference == "recorded"
    assert r.all_data.reference_accepted == 144  # is_passing
    assert r.all_data.kept_share >= 0.95
    assert r.all_data.spend_saved_share > 0
    v = r.mean("validation")
    assert v["kept_share"] is not None and v["kept_share"] >= 0.9
    assert v["spend_saved_share"] is not None and v["spend_saved_share"] > 0
    assert r.validation_pooled.runs == 164
    # The written contract, replayed, gives the figures reported for all runs.
    path = tmp_path / "fitted.toml"
    path.write_text(r.to_toml())
    totals = replay(gpt35, {"fitted": load_contract(path)}).contracts[0][0]
    assert totals.accepted == r.all_data.accepted
    assert totals.accepted_kept == r.all_data.accepted_kept
    assert totals.cost_usd == pytest.approx(r.all_data.cost_usd, rel=1e-12)
    assert totals.cost_per_accepted_usd == pytest.approx(r.all_data.cost_per_accepted_usd)
    assert totals.stop_reasons == r.all_data.stop_reasons


def test_fit_against_the_ldb_policy_as_base(gpt35: list[RunTrace]) -> None:
    base = load_contract(LDB_POLICY)
    r = fit_stop(gpt35, keep=0.98, folds=3, base=base, grid=SMALL_GRID)
    assert r.reference == "base"
    assert r.all_data.reference_accepted == 144  # the LDB policy replays the record exactly
    assert r.all_data.reference_cost_usd == pytest.approx(5.9606055)
    assert r.contract.success == base.success
    assert r.contract.budget.max_cycles is not None and r.contract.budget.max_cycles <= 11
    assert r.all_data.kept_share >= 0.98 and r.all_data.spend_saved_share > 0


# --- the command ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def small_source(tmp_path_factory: pytest.TempPathFactory, gpt35: list[RunTrace]) -> Path:
    """The first 60 LDB runs as a run-trace file (a quicker fit)."""
    path = tmp_path_factory.mktemp("src") / "runs.jsonl"
    write_traces(gpt35[:60], path)
    return path


def test_cli_fit_stop_refuses_plot_without_matplotlib_before_fitting(
    small_source: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """In a core install (`make demo`), `--plot` was refused only after the whole fit (about
    a minute on the docs' example), its --out and --report already written: refused first."""
    import loopwright.replay._fit as fit_module
    from loopwright.cli import main

    def no_fit(*args: object, **kwargs: object) -> None:
        raise AssertionError("fitted although --plot cannot be written")

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as where it is not installed
    monkeypatch.setattr(fit_module, "fit_stop", no_fit)
    out, report = tmp_path / "c.toml", tmp_path / "r.json"
    args = ["fit-stop", str(small_source), "--out", str(out), "--report", str(report)]
    assert main([*args, "--plot", str(tmp_path / "f.png")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("loopwright: error: --plot: the plot needs matplotlib"), err
    assert "loopwright[plot]" in err and len(err.splitlines()) == 1
    assert not out.exists() and not report.exists()


def test_cli_fit_stop_writes_contract_report_and_plot(small_source: Path, tmp_path: Path) -> None:
    out, report, plot = tmp_path / "c.toml", tmp_path / "r.json", tmp_path / "f.png"
    p = cli(
        "fit-stop",
        str(small_source),
        "--keep",
        "0.95",
        "--folds",
        "3",
        "--out",
        str(out),
        "--report",
        str(report),
        "--plot",
        str(plot),
        cwd=tmp_path,
    )
    assert p.returncode == 0, p.stderr
    assert "validation" in p.stdout and "all runs" in p.stdout
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    data = json.loads(report.read_text())
    assert data["format"] == "loopwright.fit-stop/1"
    assert len(data["cross_validation"]["per_fold"]) == 3
    contract = load_contract(out)
    totals = replay(load_source(str(small_source)), {"fitted": contract}).contracts[0][0]
    assert totals.accepted_kept == data["all_data"]["accepted_kept"]
    assert totals.cost_usd == pytest.approx(data["all_data"]["cost_usd"])


def test_cli_fit_stop_json_and_printed_toml(small_source: Path, tmp_path: Path) -> None:
    p = cli("fit-stop", str(small_source), "--folds", "2", "--json", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    data = json.loads(p.stdout)
    assert data["keep"] == 0.98 and data["contract_toml"].count("[contract.") >= 2
    p = cli("fit-stop", str(small_source), "--folds", "2", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "[contract.success]" in p.stdout  # no --out: the contract is printed


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (("--keep", "1.5"), "--keep"),
        (("--keep", "0"), "--keep"),
        (("--folds", "1"), "--folds"),
        (("--base", "missing.toml"), "--base"),
        (("--optimise", "money"), "--optimise"),
        (("--optimise", "time"), "--optimise"),  # LDB runs record no time
        (("--kept", "hidden"), "--kept"),
        (("--choose", "median"), "--choose"),
    ],
)
def test_cli_fit_stop_bad_input_is_one_line_and_exit_2(
    small_source: Path, tmp_path: Path, args: tuple[str, ...], field: str
) -> None:
    p = cli("fit-stop", str(small_source), *args, cwd=tmp_path)
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"loopwright: error: {field}:"), p.stderr


def test_cli_fit_stop_missing_source(tmp_path: Path) -> None:
    p = cli("fit-stop", str(tmp_path / "nope.jsonl"), cwd=tmp_path)
    assert p.returncode == 2
    assert p.stderr.strip().splitlines() == [p.stderr.strip()]
    assert "SOURCE" in p.stderr


def test_cli_pools_sources_and_compares_with_the_fixed_rule(tmp_path: Path) -> None:
    """Both shared LDB files, pooled: attempts saved, held-out verdicts kept, the fold spread
    and the best fixed no-progress rule in the report."""
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    for src, dst in ((GPT35, a), (GPT4O, b)):  # every repaired run and 30 seeds that passed
        runs = load_source(str(src))
        seeds = [t for t in runs if len(t.cycles) == 1][:30]
        write_traces([t for t in runs if len(t.cycles) > 1] + seeds, dst)
    report = tmp_path / "r.json"
    args = ("--optimise", "attempts", "--kept", "held-out", "--keep", "0.95", "--folds", "3")
    p = cli("fit-stop", str(a), str(b), *args, "--report", str(report), cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "beside the fixed rules" in p.stdout and "spread" in p.stdout
    data = json.loads(report.read_text())
    assert data["runs"] > 100 and data["sources"] == [str(a), str(b)]
    assert data["optimise"] == "attempts" and data["kept_by"] == "held-out"
    spread = data["cross_validation"]["spread"]
    assert len(spread["rules_picked"]) == 3 and spread["validation"]["saved"]["sd"] is not None
    fixed = data["fixed_rule"]
    assert fixed["window"] in (1, 2, 3, 4, 5)
    assert " ".join(fixed["verdict"].split()) in " ".join(p.stdout.split())
    pooled = data["cross_validation"]["validation_pooled"]
    assert pooled["held_out_kept"] <= pooled["reference_held_out"]
    assert data["all_data"]["attempts"] < data["all_data"]["reference_attempts"]


def test_cli_scale_free_searches_no_usd_rules(small_source: Path, tmp_path: Path) -> None:
    p = cli("fit-stop", str(small_source), "--folds", "2", "--scale-free", "--json", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    data = json.loads(p.stdout)
    chosen = data["chosen"]["params"]
    assert chosen["max_cost_usd"] is None and chosen["value_per_success_usd"] is None
    assert all(f["max_cost_usd"] is None for f in data["frontier"])


def test_a_folds_candidates_are_read_off_its_training_runs_only(tmp_path: Path) -> None:
    """The cost caps (quantiles of accepted runs' costs) and marginal values (multiples of the
    median cycle cost) were read off all runs, the held fold's included: what a fold's contract
    was picked from changed with the runs it was then judged on (probe46e). Making one fold's
    runs 50 times as expensive must leave that fold's pick as it was."""
    every = GPT35.read_text().splitlines()
    # the runs that debugged, and 30 that passed at the seed (the first lines of the file)
    lines = [x for x in every if '"debug_iter": 0,' not in x] + every[:30]
    cheap, dear = tmp_path / "a" / "m" / "results.jsonl", tmp_path / "b" / "m" / "results.jsonl"
    for path in (cheap, dear):
        path.parent.mkdir(parents=True)
    cheap.write_text("\n".join(lines) + "\n")
    traces = load_source(str(cheap))
    fold = split_folds(traces, 3, 0)
    held = max(
        range(3),
        key=lambda f: sum(
            t.recorded["cost_usd"] for t, g in zip(traces, fold, strict=True) if g == f
        ),
    )
    recs = [json.loads(line) for line in lines]
    for rec, f in zip(recs, fold, strict=True):
        rec["token_nums"] *= 50 if f == held else 1
    dear.write_text("".join(json.dumps(rec) + "\n" for rec in recs))
    a = fit_stop(traces, folds=3, grid=SMALL_GRID)
    b = fit_stop(load_source(str(dear)), folds=3, grid=SMALL_GRID)
    assert b.folds[held].validation.reference_cost_usd > a.folds[held].validation.reference_cost_usd
    assert b.folds[held].params == a.folds[held].params
