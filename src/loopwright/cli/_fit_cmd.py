"""`loopwright fit-stop`: fit a stop contract to recorded runs, thin over ``fit_stop``."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NamedTuple

import typer

from .._errors import ConfigError
from .._money_text import usd
from ._app import JsonOpt, StoreOpt, app, print_json
from ._options import TracesLoopOpt, TracesProjectOpt, out_folder

if TYPE_CHECKING:
    from rich.table import Table

    from .._contract import Contract
    from ..replay import RunTrace
    from ..replay._fit import Figures, FitResult
    from ..replay._spill import SpilledRuns

__all__ = ["fit_stop_cmd"]


@app.command("fit-stop", short_help="Fit a stop contract to recorded runs.")
def fit_stop_cmd(
    sources: Annotated[
        list[str],
        typer.Argument(
            metavar="SOURCE...",
            help="Run-trace JSONL files, LDB results files, or 'store' (runs in the store); "
            "several are pooled.",
        ),
    ],
    keep: Annotated[
        float, typer.Option(help="Keep at least this share of the reference's accepted outcomes.")
    ] = 0.98,
    folds: Annotated[int, typer.Option(help="Cross-validation folds, split by task.")] = 5,
    seed: Annotated[int, typer.Option(help="Seed of the shuffle of tasks into folds.")] = 0,
    base: Annotated[
        Path | None,
        typer.Option(
            "--base",
            help="Reference contract (TOML) instead of the runs as recorded; the fitted contract "
            "keeps its success rule and other budgets.",
        ),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option("--out", help="Write the fitted contract here (TOML; default: print it)."),
    ] = None,
    report: Annotated[
        Path | None, typer.Option("--report", help="Write the full report here (JSON).")
    ] = None,
    plot: Annotated[
        Path | None,
        typer.Option(
            "--plot",
            help="Write a PNG of accepted outcomes against spend (needs loopwright[plot]).",
        ),
    ] = None,
    optimise: Annotated[
        str, typer.Option("--optimise", help="What to save: attempts, spend or time.")
    ] = "spend",
    kept: Annotated[
        str,
        typer.Option(
            "--kept", help="What --keep counts: accepted outcomes or held-out verdicts passed."
        ),
    ] = "accepted",
    choose: Annotated[
        str,
        typer.Option(
            "--choose",
            help="one-se: the simplest candidate within one standard error of the best across "
            "folds; best: the most saved.",
        ),
    ] = "one-se",
    scale_free: Annotated[
        bool,
        typer.Option(
            "--scale-free",
            help="Search only plateau rules and cycle caps (no cost caps, no marginal return, "
            "whose USD values hold only for cycles that cost the same): for other models' runs.",
        ),
    ] = False,
    loop: TracesLoopOpt = None,
    project: TracesProjectOpt = None,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Fit a stop contract: the most --optimise saved keeping --keep of the outcomes.

    Cross-validated by task; method and report: docs/fit-stop.md.
    """
    from ..replay import iter_source, load_contract
    from ..replay._fit import check_objective, check_plot
    from ..replay._spill import SpilledRuns

    if not 0 < keep <= 1:
        raise ConfigError(f"must be within (0, 1], got {keep!r}", field="--keep")
    check_objective(optimise, kept, choose)
    for path, option in ((out, "--out"), (report, "--report"), (plot, "--plot")):
        # before the fit, not after it (minutes of it, and the contract printed nowhere)
        if path is not None and path.is_dir():
            raise ConfigError(f"{path} is a directory: name a file to write", field=option)
    if plot is not None:
        check_plot()
    # (a missing folder refused before the fit, not after it: a typo's)
    inputs = [s for s in sources if s not in ("store", "runs")] + ([base] if base else [])
    for path, option in ((out, "--out"), (report, "--report"), (plot, "--plot")):
        out_folder(path, option, inputs)
    base_contract = None
    if base is not None:
        try:
            base_contract = load_contract(base)
        except ConfigError as exc:
            raise ConfigError(exc.message, field="--base") from None
    pooled: dict[str, str] = {}  # run id -> the source it came from
    keys: list[_Key] = []  # each run's task (its fold)

    def pooled_runs() -> Iterator[RunTrace]:
        for source in sources:
            if source in ("store", "runs"):
                from ._stores import iter_store_traces

                got = iter_store_traces(store, source, loop=loop, project=project)
            else:
                got = iter_source(source, loop=loop, project=project)
            read = 0
            for t in got:  # a file given twice, or runs saved from the store and the store
                if t.run_id in pooled:
                    raise ConfigError(
                        f"run {t.run_id!r} is in {pooled[t.run_id]} and in {source}: pooled, "
                        "it would be counted twice",
                        field="SOURCE",
                    )
                pooled[t.run_id] = source
                keys.append(_Key(t.task_key))
                read += 1
                yield t
            if not read:
                raise ConfigError(f"no runs in {source}", field="SOURCE")

    # The runs read once, one at a time, into a temporary file the fit reads them back from
    # (three times, one run at a time): a fit of many long runs holds one run's cycles, not
    # every run's (stop 50: 5 runs of 10,000 cycles were 134 MB).
    with SpilledRuns(pooled_runs()) as traces:
        _fit_and_say(
            traces,
            keys,
            sources,
            keep=keep,
            folds=folds,
            seed=seed,
            base_contract=base_contract,
            optimise=optimise,
            kept=kept,
            choose=choose,
            scale_free=scale_free,
            out=out,
            report=report,
            plot=plot,
            as_json=as_json,
        )


class _Key(NamedTuple):
    task_key: str


def _fit_and_say(
    traces: SpilledRuns,
    keys: list[_Key],
    sources: list[str],
    *,
    keep: float,
    folds: int,
    seed: int,
    base_contract: Contract | None,
    optimise: str,
    kept: str,
    choose: str,
    scale_free: bool,
    out: Path | None,
    report: Path | None,
    plot: Path | None,
    as_json: bool,
) -> None:
    from rich.markup import escape

    from ..replay._fit import Grid, fit_stop, plot_frontier, split_folds
    from ._say import console, say

    source = " + ".join(sources)
    split_folds(keys, folds, seed)  # bad --folds fails here, before the progress bar

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    with Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console(stderr=True),
        transient=True,
        disable=as_json,
    ) as bar:
        task = bar.add_task(f"fitting on {len(traces)} run(s)", total=None)

        def progress(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        result = fit_stop(
            traces,
            keep=keep,
            folds=folds,
            seed=seed,
            base=base_contract,
            progress=progress,
            optimise=optimise,
            choose=choose,
            keep_by=kept,
            grid=Grid(cost_quantiles=(), marginal_multiples=()) if scale_free else None,
        )

    thin = few_to_keep(result)
    if thin is not None:
        say(thin, stderr=True)
    toml_text = result.to_toml()
    _write(out, toml_text, "--out")
    if report is not None:
        data = {**result.report(), "source": source, "sources": sources, "contract_toml": toml_text}
        _write(report, json.dumps(data, indent=2) + "\n", "--report")
    if plot is not None:
        try:
            plot_frontier(result, plot)
        except OSError as exc:
            raise ConfigError(
                f"cannot write {plot}: {exc.strerror or exc}", field="--plot"
            ) from None
    if as_json:
        print_json(
            {**result.report(), "source": source, "sources": sources, "contract_toml": toml_text}
        )
        return
    con = console()
    con.print(_table(result))
    say(
        "pooled: every run judged once, by the contract picked without its fold; "
        "all runs: the contract written, picked on all of them",
        out=con,
        style="dim",
    )
    sp = result.spread()
    say(
        f"rules picked by the {len(result.folds)} folds: {sp['distinct_rules']} distinct, "
        f"{sp['distinct_families']} famil{'y' if sp['distinct_families'] == 1 else 'ies'}",
        out=con,
    )
    con.print(_fixed_table(result))
    if result.fixed is not None:
        say(result.fixed.verdict, out=con)
    # (the rule's words escaped: the one markup of this line is its own)
    say(
        f"chosen: [bold]{escape(result.params.describe())}[/]"
        + ("" if result.feasible else " [yellow](no candidate kept enough)[/]")
        + f"  ({len(result.candidates)} candidates, {result.seconds:.1f} s)",
        out=con,
        markup=True,
    )
    for path, what in ((out, "contract"), (report, "report"), (plot, "plot")):
        if path is not None:
            say(f"wrote {what} to {path}", out=con)
    if out is None:
        con.print()
        typer.echo(toml_text, nl=False)


def few_to_keep(result: FitResult) -> str | None:
    """A note when the runs hold too few outcomes to keep for the kept share to bound anything:
    with none, every candidate "keeps 100%" and the most frugal one (stop after 1 cycle) won,
    reported as spend saved; with fewer than ``1 / (1 - keep)``, no outcome may be lost, so the
    fit is one of those few runs."""
    a = result.all_data
    held = result.keep_by == "held-out"
    n = a.reference_held_out if held else a.reference_accepted
    what = "passed held-out verdict" if held else "accepted outcome"
    if n == 0:
        return (
            f"note: the runs hold no {what}: every contract keeps all of none, so the fit only "
            "saves spend (the cheapest rule wins); fit on runs that reached some"
        )
    need = math.ceil(1 / (1 - result.keep) - 1e-9) if result.keep < 1 else None
    if need is None or n >= need:
        return None
    return (
        f"note: the runs hold {n} {what}(s): a keep of {result.keep:g} lets a contract lose "
        f"one only from {need} on, so the fit keeps all {n} and says little until more runs "
        "are recorded"
    )


def _write(path: Path | None, text: str, option: str) -> None:
    if path is None:
        return
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot write {path}: {exc.strerror or exc}", field=option) from None


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def _usd(x: float | None) -> str:
    return "n/a" if x is None else usd(x)


def _kept_label(r: FitResult) -> str:
    return "held-out kept" if r.keep_by == "held-out" else "kept"


def _kept_cell(f: Figures, keep_by: str) -> str:
    if keep_by == "held-out":
        return f"{_pct(f.held_out_kept_share)} ({f.held_out_kept}/{f.reference_held_out})"
    return f"{_pct(f.kept_share)} ({f.accepted_kept}/{f.reference_accepted})"


def _table(r: FitResult) -> Table:
    from rich.table import Table

    ref = "as recorded" if r.reference == "recorded" else "under --base"
    o, kb = r.optimise, r.keep_by
    t = Table(
        title=f"fit-stop: {r.runs} run(s) of {r.tasks} task(s); keep ≥ {r.keep:g} of the "
        f"{'held-out verdicts' if kb == 'held-out' else 'accepted outcomes'} {ref}; save "
        f"{o}; choose {r.choose}; {len(r.folds)} folds by task (seed {r.seed}); "
        "train / validation",
        title_justify="left",
    )
    t.add_column("fold", no_wrap=True)
    t.add_column("rule picked on train")
    t.add_column(_kept_label(r), justify="right", no_wrap=True)
    t.add_column(f"{o} saved", justify="right", no_wrap=True)
    t.add_column("$ per accepted", justify="right", no_wrap=True)

    def pair(a: str, b: str) -> str:
        return f"{a} / {b}"

    for f in r.folds:
        tr, va = f.train, f.validation
        t.add_row(
            str(f.fold + 1),
            f.params.describe(),
            pair(_pct(tr.kept(kb)), _pct(va.kept(kb))),
            pair(_pct(tr.saved_share(o)), _pct(va.saved_share(o))),
            pair(_usd(tr.cost_per_accepted_usd), _usd(va.cost_per_accepted_usd)),
        )
    sp = r.spread()["validation"]
    t.add_section()
    t.add_row(
        "spread",
        "validation: sd (min–max)",
        f"{_pct(sp['kept']['sd'])} ({_pct(sp['kept']['min'])}–{_pct(sp['kept']['max'])})",
        f"{_pct(sp['saved']['sd'])} ({_pct(sp['saved']['min'])}–{_pct(sp['saved']['max'])})",
        "",
    )
    p = r.validation_pooled
    t.add_row(
        "pooled",
        "validation, each run once",
        _kept_cell(p, kb),
        _pct(p.saved_share(o)),
        _usd(p.cost_per_accepted_usd),
    )
    a = r.all_data
    t.add_section()
    t.add_row(
        "all runs",
        r.params.describe(),
        _kept_cell(a, kb),
        _pct(a.saved_share(o)),
        _usd(a.cost_per_accepted_usd),
        style="bold green",
    )
    c = r.spread()["chosen_by_fold"]
    t.add_row(
        "by fold",
        "that rule, fold by fold: sd",
        _pct(c["kept"]["sd"]),
        _pct(c["saved"]["sd"]),
        "",
    )
    t.add_row(
        "reference",
        f"{a.reference_attempts} attempts, {usd(a.reference_cost_usd)}",
        f"{a.reference_held_out if kb == 'held-out' else a.reference_accepted}",
        "",
        _usd(a.reference_cost_per_accepted_usd),
    )
    return t


def _fixed_table(r: FitResult) -> Table:
    """The fit beside "stop after w cycles without fewer failing visible tests"."""
    from rich.table import Table

    o, kb = r.optimise, r.keep_by
    t = Table(
        title="beside the fixed rules: stop after w cycles without fewer failing visible tests "
        "(* optimised)",
        title_justify="left",
    )
    t.add_column("policy", no_wrap=True)
    t.add_column("runs judged", no_wrap=True)
    t.add_column(_kept_label(r), justify="right", no_wrap=True)
    measures = ["attempts", "spend"] + (["time"] if o == "time" else [])
    for m in measures:
        t.add_column(f"{m} saved" + (" *" if m == o else ""), justify="right", no_wrap=True)

    def row(name: str, judged: str, f: Figures, style: str | None = None) -> None:
        t.add_row(
            name,
            judged,
            _kept_cell(f, kb),
            *(_pct(f.saved_share(m)) for m in measures),
            style=style,
        )

    row("fit", "validation (pooled)", r.validation_pooled, "bold")
    fx = r.fixed
    if fx is not None:
        picks = ",".join(str(w) for w in fx.per_fold)
        row(f"best fixed (w per fold: {picks})", "validation (pooled)", fx.validation_pooled)
        t.add_section()
        row("fit", "all runs", r.all_data)
        for w, f in fx.figures:
            row(f"w={w}" + (" (best)" if w == fx.window else ""), "all runs", f)
    return t
