"""`loopwright fit-stop`: fit a stop contract to recorded runs, thin over ``fit_stop``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from .._errors import ConfigError
from ._app import JsonOpt, StoreOpt, _print_json, app

if TYPE_CHECKING:
    from rich.table import Table

    from ..replay._fit import FitResult

__all__ = ["fit_stop_cmd"]


@app.command("fit-stop", short_help="Fit a stop contract to recorded runs.")
def fit_stop_cmd(
    source: Annotated[
        str,
        typer.Argument(
            metavar="SOURCE",
            help="A run-trace JSONL file, an LDB results file, or 'store' (runs in the store).",
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
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Fit a stop contract: lowest cost per accepted outcome keeping --keep of them.

    Cross-validated by task; method and report: docs/fit-stop.md.
    """
    from ..replay import load_contract, load_source
    from ..replay._fit import fit_stop, plot_frontier, split_folds
    from ._render import console

    if not 0 < keep <= 1:
        raise ConfigError(f"must be within (0, 1], got {keep!r}", field="--keep")
    base_contract = None
    if base is not None:
        try:
            base_contract = load_contract(base)
        except ConfigError as exc:
            raise ConfigError(_message(exc), field="--base") from None
    if source in ("store", "runs"):
        from ._stores import open_existing

        with open_existing(store) as st:
            traces = load_source(source, st)
    else:
        traces = load_source(source)
    if not traces:
        raise ConfigError(f"no runs in {source}", field="SOURCE")
    split_folds(traces, folds, seed)  # bad --folds fails here, before the progress bar

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
            traces, keep=keep, folds=folds, seed=seed, base=base_contract, progress=progress
        )

    toml_text = result.to_toml()
    _write(out, toml_text, "--out")
    if report is not None:
        data = {**result.report(), "source": source, "contract_toml": toml_text}
        _write(report, json.dumps(data, indent=2) + "\n", "--report")
    if plot is not None:
        try:
            plot.parent.mkdir(parents=True, exist_ok=True)
            plot_frontier(result, plot)
        except OSError as exc:
            raise ConfigError(
                f"cannot write {plot}: {exc.strerror or exc}", field="--plot"
            ) from None
    if as_json:
        _print_json({**result.report(), "source": source, "contract_toml": toml_text})
        return
    con = console()
    con.print(_table(result))
    con.print(
        "[dim]pooled: every run judged once, by the contract picked without its fold; "
        "all runs: the contract written, picked on all of them[/]"
    )
    for f in result.folds:
        con.print(f"fold {f.fold + 1} picked on train: {f.params.describe()}")
    con.print(
        f"chosen: [bold]{result.params.describe()}[/]"
        + ("" if result.feasible else " [yellow](no candidate kept enough)[/]")
        + f"  ({len(result.candidates)} candidates, {result.seconds:.1f} s)"
    )
    for path, what in ((out, "contract"), (report, "report"), (plot, "plot")):
        if path is not None:
            con.print(f"wrote {what} to {path}")
    if out is None:
        con.print()
        typer.echo(toml_text, nl=False)


def _message(exc: ConfigError) -> str:
    text = str(exc)
    prefix = f"{exc.field}: "
    return text[len(prefix) :] if exc.field and text.startswith(prefix) else text


def _write(path: Path | None, text: str, option: str) -> None:
    if path is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)  # e.g. --out .loopwright/fitted.toml
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot write {path}: {exc.strerror or exc}", field=option) from None


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def _usd(x: float | None) -> str:
    return "n/a" if x is None else f"${x:,.4f}"


def _table(r: FitResult) -> Table:
    from rich.table import Table

    ref = "as recorded" if r.reference == "recorded" else "under --base"
    t = Table(
        title=f"fit-stop: {r.runs} run(s) of {r.tasks} task(s); keep ≥ {r.keep:g} of the accepted "
        f"outcomes {ref}; {len(r.folds)} folds by task (seed {r.seed}); train / validation",
        title_justify="left",
    )
    t.add_column("fold", no_wrap=True)
    t.add_column("kept", justify="right", no_wrap=True)
    t.add_column("spend saved", justify="right", no_wrap=True)
    t.add_column("$ per accepted", justify="right", no_wrap=True)

    def pair(a: str, b: str) -> str:
        return f"{a} / {b}"

    for f in r.folds:
        tr, va = f.train, f.validation
        t.add_row(
            str(f.fold + 1),
            pair(_pct(tr.kept_share), _pct(va.kept_share)),
            pair(_pct(tr.spend_saved_share), _pct(va.spend_saved_share)),
            pair(_usd(tr.cost_per_accepted_usd), _usd(va.cost_per_accepted_usd)),
        )
    mt, mv = r.mean("train"), r.mean("validation")
    t.add_section()
    t.add_row(
        "mean",
        pair(_pct(mt["kept_share"]), _pct(mv["kept_share"])),
        pair(_pct(mt["spend_saved_share"]), _pct(mv["spend_saved_share"])),
        pair(_usd(mt["cost_per_accepted_usd"]), _usd(mv["cost_per_accepted_usd"])),
        style="bold",
    )
    p = r.validation_pooled
    t.add_row(
        "pooled",
        f"{_pct(p.kept_share)} ({p.accepted_kept}/{p.reference_accepted})",
        _pct(p.spend_saved_share),
        _usd(p.cost_per_accepted_usd),
    )
    a = r.all_data
    t.add_section()
    t.add_row(
        "all runs",
        f"{_pct(a.kept_share)} ({a.accepted_kept}/{a.reference_accepted})",
        _pct(a.spend_saved_share),
        _usd(a.cost_per_accepted_usd),
        style="bold green",
    )
    t.add_row(
        "reference",
        f"{a.reference_accepted} accepted",
        f"${a.reference_cost_usd:,.4f} spent",
        _usd(a.reference_cost_per_accepted_usd),
    )
    return t
