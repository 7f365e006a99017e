"""`loopwright check`, `demo` and `import`: a spec checked before it runs, the offline demo,
and recorded runs of other systems turned into tasks."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from .._errors import ConfigError, check_choice
from . import runs_may_exist
from ._options import JsonOpt, StoreOpt, TokenOpt, as_options, out_folder, print_json
from ._root_app import app


@app.command()
def check(
    spec: Annotated[Path, typer.Argument(metavar="SPEC", help="The loop spec (TOML).")],
    strict: Annotated[bool, typer.Option(help="Exit 2 on warnings too.")] = False,
    as_json: JsonOpt = False,
    task: Annotated[
        Path | None, typer.Option("--task", help="Check this task file (one JSON object).")
    ] = None,
    tasks: Annotated[
        Path | None,
        typer.Option("--tasks", help="Check this task file (JSON lines) instead of the spec's."),
    ] = None,
) -> None:
    """Validate a spec without running it; say what it leaves open.

    Answers: what done means, how progress is checked independently, what ends a stalled or
    unsafe run, what an accepted outcome may cost, who owns the unresolved exception. The task
    file (--task, --tasks, or the spec's `tasks`) is read as `loopwright run` would read it: a
    line that is not a JSON object, a bad task key, two tasks with one key or a task the run
    would refuse (checked as Runtime.create checks it: the spec's init run on it, a bad per-task
    cycle budget, budget.max_cycles_key) exits 2, naming file:line.
    """
    from .._loop import check_declared_names
    from .._spec import load_spec
    from ._check import review
    from ._tasks import check_tasks, load_tasks, task_keys

    loop = load_spec(spec)
    check_declared_names(loop)  # (as a new run of it is: load_spec lets a stored run's names be)
    items = load_tasks(task, tasks, loop.options.get("tasks"))
    keys = task_keys(loop.name, items)  # as `run` derives and checks them
    check_tasks(loop, items, keys)
    answers = review(loop)
    if items.path is not None:
        answers.append(
            {
                "question": "Which tasks would it run?",
                "status": "ok",
                "answer": f"{len(items)} task(s) in {items.path}, each with its own valid key",
            }
        )
    warnings = [a for a in answers if a["status"] == "warn"]
    if as_json:
        print_json({"spec": str(spec), "valid": True, "answers": answers})
    else:
        from rich.markup import escape
        from rich.table import Table

        from ._say import console

        t = Table(title=f"{escape(loop.name)}: spec is valid", title_justify="left")
        t.add_column("question")
        t.add_column("")
        t.add_column("answer", overflow="fold")
        for a in answers:
            mark = "[green]ok[/]" if a["status"] == "ok" else "[yellow]open[/]"
            t.add_row(a["question"], mark, escape(a["answer"]))
        console().print(t)
    raise typer.Exit(2 if strict and warnings else 0)


@app.command(short_help="Run the built-in offline demo: no network, no API key.")
def demo(
    store: StoreOpt = None,
    concurrency: Annotated[int, typer.Option(help="Runs at once.")] = 8,
    token: TokenOpt = None,
) -> None:
    """Run the built-in offline workload (invoice exceptions): no network, no API key.

    Ends with the stop reasons, the spend and the next commands to try.
    """
    from ._demo import run_demo

    if concurrency < 1:
        raise ConfigError("must be at least 1", field="--concurrency")
    runs_may_exist(False)
    run_demo(store, concurrency, token)


@app.command("import", short_help="Turn recorded runs of other systems into tasks.")
def import_(
    kind: Annotated[str, typer.Argument(metavar="KIND", help="What to import: ldb.")],
    source: Annotated[Path, typer.Argument(metavar="SOURCE", help="The file to import.")],
    out: Annotated[Path, typer.Option("--out", help="Where to write tasks (JSON lines).")],
    label: Annotated[
        str | None, typer.Option(help="Label in the task keys (default: from the file's path).")
    ] = None,
    usd_per_token: Annotated[float | None, typer.Option(help="Cost proxy per token.")] = None,
    rounds: Annotated[
        int | None,
        typer.Option(
            help="The recording's round budget (LDB's max_iters), for runs that passed "
            "(default: read off the runs that never passed)."
        ),
    ] = None,
) -> None:
    """Turn recorded runs of other systems into tasks (``ldb``: LDB debugging traces)."""
    check_choice(kind, ("ldb",), "KIND")
    out_folder(out, "--out")  # (a missing folder is a typo's; ./.loopwright is made)
    try:
        from ..importers.ldb import check_not_source, import_ldb_report
    except ImportError as exc:  # pragma: no cover - present in every install
        raise ConfigError(f"the LDB importer is unavailable: {exc}") from None
    if source.is_dir():
        raise ConfigError(
            f"{source} is a directory, not a report file: name the file", field="SOURCE"
        )
    if not source.is_file():
        raise ConfigError(f"no file at {source}", field="SOURCE")
    check_not_source(source, out, "--out")
    if usd_per_token is not None and usd_per_token < 0:
        raise ConfigError("must not be negative", field="--usd-per-token")
    if rounds is not None and rounds < 0:
        raise ConfigError("must not be negative", field="--rounds")
    kwargs: dict[str, Any] = {"label": label, "rounds": rounds}
    if usd_per_token is not None:
        kwargs["usd_per_token"] = usd_per_token
    import io

    text = io.StringIO()  # written to --out once there are tasks: none leaves no file
    with as_options(label="--label"):
        report = import_ldb_report(source, text, **kwargs)
    if not report.tasks:
        raise ConfigError(f"no tasks in {source}", field="SOURCE")
    try:
        out.write_text(text.getvalue(), encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot write {out}: {exc.strerror or exc}", field="--out") from None
    from ._say import say

    budget = "unknown" if report.rounds is None else f"{report.rounds} rounds"
    # One line each, whatever the width (``say``): folded at the console's 80 columns in a
    # pipe, a script reading "wrote N task(s)" found half of it.
    say(
        f"wrote {len(report.tasks)} task(s) to {out} (round budget: {budget}; "
        f"no visible tests: {len(report.vacuous)})"
    )
    for line in report.warnings:
        say(f"warning: {line}", stderr=True)
