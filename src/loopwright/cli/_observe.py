"""``loopwright trace`` and ``loopwright export``: a run's trace, and traces turned into learning
material. Thin over ``loopwright.trace``; the formats are documented in ``docs/trace.md``.

Importing this module registers the commands on the application.
"""

from __future__ import annotations

import contextlib
import re
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Annotated

import typer

from .._errors import ConfigError, check_choice
from ._app import RunArg, StoreOpt, app, new_typer, run_ref
from ._options import as_options, out_folder
from ._stores import open_existing, unknown_filters

__all__ = ["export_app", "trace"]

export_app = new_typer(
    help="Traces turned into learning material: eval cases, preference pairs (JSON lines).",
    short_help="Traces as eval cases and preference pairs (JSON lines).",
)
app.add_typer(export_app, name="export")

_FORMATS = ("jsonl", "otlp-json")
OutOpt = Annotated[
    Path | None, typer.Option("--out", help="Write to this file instead of standard output.")
]
ProjectOpt = Annotated[str | None, typer.Option("--project", help="Only runs of this project.")]
LoopOpt = Annotated[str | None, typer.Option("--loop", help="Only runs of this loop.")]
RunsOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--run",
        metavar="RUN",
        help="Only this run (repeatable; it must have ended).",
        callback=run_ref,
    ),
]


@contextlib.contextmanager
def output(out: Path | None, option: str = "--out") -> Iterator[IO[str]]:
    """Standard output, or ``out`` opened for writing (a failure to open it is bad input,
    of ``option``)."""
    if out is None:
        yield sys.stdout
        return
    out_folder(out, option)  # (a missing folder is a typo's; ./.loopwright is made)
    try:
        fh = out.open("w", encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot write {out}: {exc.strerror or exc}", field=option) from None
    with fh:
        yield fh


def _note(text: str) -> None:
    sys.stderr.write(text + "\n")


def _headers(items: Iterable[str]) -> dict[str, str]:
    from ..trace._otlp import check_headers

    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            # the item shown up to a colon or a space: a value typed after one ("X-Key: …")
            # is often a key, and this line lands in terminals and CI logs
            head = re.split(r"[:\s]", item.strip(), maxsplit=1)[0]
            shown = repr(head) + ("…" if head != item.strip() else "")
            raise ConfigError(f"{shown} is not NAME=VALUE", field="--header")
        out[name.strip()] = value.strip()
    check_headers(out, "--header")
    return out


@app.command(short_help="A run's trace: JSON lines, or OpenTelemetry spans.")
def trace(
    run_id: RunArg,
    fmt: Annotated[
        str | None,
        typer.Option(
            "--format",
            help="jsonl (the default: a header line, then one event per line) or otlp-json "
            "(one OTLP/JSON ExportTraceServiceRequest).",
        ),
    ] = None,
    out: OutOpt = None,
    send: Annotated[
        str | None,
        typer.Option(
            "--send",
            help="Also POST the trace to this OTLP/HTTP collector (http://host:4318 gets "
            "/v1/traces appended). Alone, it prints nothing.",
        ),
    ] = None,
    header: Annotated[
        list[str] | None,
        typer.Option(
            "--header", metavar="NAME=VALUE", help="NAME=VALUE header for --send (repeatable)."
        ),
    ] = None,
    encoding: Annotated[
        str, typer.Option("--encoding", help="Body of --send: json, or protobuf (otel extra).")
    ] = "json",
    store: StoreOpt = None,
) -> None:
    """A run's trace: its events as JSON lines, or OpenTelemetry spans as OTLP/JSON.

    Spans: run → cycle → actor / verifier / effect / approval. --send posts them to an
    OTLP/HTTP collector.
    """
    from ..trace import export_otlp, iter_trace_records, traces_url, write_jsonl, write_otlp

    if fmt is not None:
        check_choice(fmt, _FORMATS, "--format")
    check_choice(encoding, ("json", "protobuf"), "--encoding")
    headers = _headers(header or ())
    if headers and send is None:
        raise ConfigError("only applies with --send", field="--header")
    if send is not None:
        traces_url(send, field="--send")  # a bad URL is refused before anything is written
    with open_existing(store) as st:
        rec = st.get_run(run_id)
        if send is None or out is not None or fmt is not None:
            with output(out) as fh:
                if (fmt or "jsonl") == "jsonl":
                    n = write_jsonl(iter_trace_records(st, rec.run_id), fh)  # paged
                    what = f"{n} line(s)"
                else:
                    what = f"{write_otlp(st, rec.run_id, fh)} span(s)"
            if out is not None:
                _note(f"wrote {what} of run {rec.run_id} to {out}")
        if send is not None:
            res = export_otlp(
                st,
                rec.run_id,
                send,
                headers=headers,
                encoding="protobuf" if encoding == "protobuf" else "json",
            )
            _note(
                f"sent {res.spans} span(s) of run {rec.run_id} to {res.url}: HTTP {res.status}"
                + (f", {res.rejected_spans} rejected: {res.message}" if res.rejected_spans else "")
            )


@export_app.command("eval-cases")
def eval_cases_cmd(
    project: ProjectOpt = None,
    loop: LoopOpt = None,
    run: RunsOpt = None,
    out: OutOpt = None,
    store: StoreOpt = None,
) -> None:
    """Each ended run as a replayable eval case (JSON lines).

    A case holds the task (held-out key marked), the initial artifacts, every cycle's proposal
    with its visible and held-out verdicts, the stop reason, the human decisions and the final
    accepted artifacts.
    """
    from ..trace import ended_run_ids, write_eval_case

    with open_existing(store) as st:
        # One case at a time, each written as its cycles are read (a case holds its run's
        # every cycle; a store's every case held at once grew with the store). The runs are
        # listed before --out is opened, so a run that has not ended is refused without
        # leaving a file behind.
        with as_options(run_ids="--run"):
            ids = ended_run_ids(st, project=project, loop_name=loop, run_ids=run)
        with output(out) as fh:
            for run_id in ids:
                write_eval_case(st, run_id, fh)
        unknown = [] if ids else unknown_filters(st, project=project, loop=loop)
    for line in unknown:  # a filter no run has (a typo) is said, as `runs` says it
        _note(line)
    n = len(ids)
    _note(f"wrote {n} eval case(s)" + (f" to {out}" if out is not None else ""))


@export_app.command("preference-pairs", short_help="Chosen versus rejected proposals (JSON lines).")
def preference_pairs_cmd(
    project: ProjectOpt = None,
    loop: LoopOpt = None,
    run: RunsOpt = None,
    match: Annotated[
        str,
        typer.Option(
            "--match",
            help="state: both proposals made from the same context; hindsight: a rejected "
            "proposal and a later, better one of the same run; both (default).",
        ),
    ] = "both",
    out: OutOpt = None,
    store: StoreOpt = None,
) -> None:
    """Chosen versus rejected proposals for the same context (JSON lines).

    Chosen: accepted, or improved the score; rejected: not accepted (and not improving when
    the chosen one only improved). docs/trace.md says exactly how pairs are formed.
    """
    from ..trace import preference_pairs, write_jsonl

    check_choice(match, ("state", "hindsight", "both"), "--match")
    with open_existing(store) as st, as_options(run_ids="--run"):
        pairs = preference_pairs(
            st,
            project=project,
            loop_name=loop,
            run_ids=run,
            match="state" if match == "state" else "hindsight" if match == "hindsight" else "both",
        )
        unknown = [] if pairs else unknown_filters(st, project=project, loop=loop)
    for line in unknown:  # a filter no run has (a typo) is said, as `runs` says it
        _note(line)
    with output(out) as fh:
        n = write_jsonl(pairs, fh)
    kinds = {k: sum(1 for p in pairs if p["match"] == k) for k in ("state", "hindsight")}
    _note(
        f"wrote {n} preference pair(s) ({kinds['state']} state, {kinds['hindsight']} hindsight)"
        + (f" to {out}" if out is not None else "")
    )
