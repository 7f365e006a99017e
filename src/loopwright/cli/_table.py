"""Plain-text tables that fit the terminal, for the listings that must start fast.

``loopwright runs`` answers without importing Rich (whose import and layout of a long table
cost more than the rest of the command). A fitted table never wraps a cell: flexible columns
shrink first, their cells cut in the middle with "…", then the columns kept least are hidden
(and named under the table). Piped output is 80 columns wide unless ``COLUMNS`` says otherwise,
as with Rich; colour only on a terminal, and never with ``NO_COLOR`` set.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TextIO

from .._money_text import usd_digits
from .._owners import owner_is_dead
from .._verdict import HeldOutWords, held_out_words

if TYPE_CHECKING:
    from ..store import RunRecord

__all__ = ["STATUS_STYLE", "Col", "fit", "print_blocks", "print_runs", "render", "terminal_width"]

GAP = "  "
_ANSI = {
    "green": "32",
    "yellow": "33",
    "magenta": "35",
    "red": "31",
    "bold red": "1;31",
    "dim": "2",
    "cyan": "36",
    "bold": "1",
}


@dataclass(frozen=True, slots=True)
class Col:
    """A column: its header; ``keep``: the lower, the longer it stays at narrow widths (0: never
    hidden); ``flex``: it shrinks, down to ``min_width``, before any column is hidden."""

    header: str
    keep: int
    flex: bool = False
    min_width: int = 0
    right: bool = False
    sentence: bool = False  # cut at its end (a sentence reads from its start)


Cell = tuple[str, str]  # plain text, and a style name from _ANSI (or "")


# What a terminal would act on rather than show: C0 controls but newline and tab (ESC starts
# the sequences that clear a screen, set a title or move the cursor), DEL, C1 controls (0x9b
# is CSI on its own) and the bidirectional controls that reorder what follows. Stored text
# (a model's proposal, a finding, a note, a name typed into an older release) is printed
# with these written out: printed raw, a run's text could rewrite the terminal of the person
# reading it (hide a line, fake an approval prompt).
# C0 but newline and tab, DEL, C1, the bidirectional marks, embeddings, overrides and isolates,
# and the line and paragraph separators (a renderer may start a new line at them)
_CONTROL = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]"
)


def _shown(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str) -> str:
    """``text`` with what a terminal would act on written out (``\\x1b``, ``\\u202e``)."""
    return _CONTROL.sub(_shown, text) if _CONTROL.search(text) else text


def terminal_width() -> int:
    """The terminal's width; 80 (or ``COLUMNS``) when the output is piped."""
    return shutil.get_terminal_size((80, 24)).columns


def cut(text: str, width: int) -> str:
    """``text`` in ``width`` characters, cut in the middle: task keys and names tend to differ
    at their ends (``…/document-00999.json``)."""
    if len(text) <= width:
        return text
    if width < 8:
        return text[: max(width - 1, 0)] + "…"
    tail = (width - 1) // 2
    return text[: width - 1 - tail] + "…" + text[-tail:]


def fit(
    cols: Sequence[Col], rows: Sequence[Sequence[Cell]], width: int
) -> tuple[dict[int, int], list[str]]:
    """The width of each column shown, by index, and the headers of the hidden ones."""
    natural = [max([len(c.header)] + [len(row[i][0]) for row in rows]) for i, c in enumerate(cols)]

    def least(i: int) -> int:
        return min(natural[i], cols[i].min_width) if cols[i].flex else natural[i]

    shown = list(range(len(cols)))
    for i in sorted(shown, key=lambda i: -cols[i].keep):
        if sum(map(least, shown)) + len(GAP) * (len(shown) - 1) <= width:
            break
        if cols[i].keep > 0:
            shown.remove(i)
    widths = {i: natural[i] for i in shown}
    over = sum(widths.values()) + len(GAP) * (len(shown) - 1) - width
    for i in shown:
        if over > 0 and cols[i].flex:
            take = min(over, widths[i] - least(i))
            widths[i] -= take
            over -= take
    return widths, [c.header for i, c in enumerate(cols) if i not in widths]


def render(
    title: str,
    cols: Sequence[Col],
    rows: Sequence[Sequence[Cell]],
    *,
    width: int | None = None,
    out: TextIO | None = None,
) -> dict[int, int]:
    """Write the table: a title line, the header, a rule, one line per row, and a line naming
    the columns hidden at this width. Returns the width of each column shown, by index."""
    out = out or sys.stdout
    width = terminal_width() if width is None else width
    title = printable(title)
    rows = [[(printable(text), style) for text, style in row] for row in rows]
    colour = out.isatty() and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"
    widths, hidden = fit(cols, rows, width)

    def line(cells: Sequence[Cell]) -> str:
        parts = []
        for i, w in widths.items():
            text, style = cells[i]
            if len(text) > w:
                text = text[: max(w - 1, 0)] + "…" if cols[i].sentence else cut(text, w)
            text = text.rjust(w) if cols[i].right else text.ljust(w)
            if colour and style in _ANSI:
                text = f"\x1b[{_ANSI[style]}m{text}\x1b[0m"
            parts.append(text)
        return GAP.join(parts).rstrip()

    lines = [title[:width] if len(title) > width else title]
    lines.append(line([(c.header, "bold") for c in cols]))
    lines.append("─" * min(sum(widths.values()) + len(GAP) * (len(widths) - 1), width))
    lines.extend(line(row) for row in rows)
    if hidden:
        import textwrap

        note = f"hidden at this width: {', '.join(hidden)} (see --json)"
        lines.extend(textwrap.wrap(note, width=max(width, 20), break_on_hyphens=False))
    out.write("\n".join(lines) + "\n")
    return widths


def print_blocks(
    title: str, blocks: Sequence[tuple[str, Sequence[tuple[str, str]]]], *, width: int | None = None
) -> None:
    """Records with prose fields, one block each: a head line (cut to the width), then each
    field as ``label: text``, wrapped under its start."""
    import textwrap

    width = terminal_width() if width is None else width
    lines = [title]
    for head, fields in blocks:
        lines.append(cut(head, width))
        pad = max((len(label) for label, _ in fields), default=0) + 4
        for label, text in fields:
            lines.extend(
                textwrap.wrap(
                    text,
                    width=max(width, pad + 20),
                    initial_indent=f"  {label + ':':<{pad - 2}}",
                    subsequent_indent=" " * pad,
                    break_on_hyphens=False,
                )
                or [f"  {label}:"]
            )
    sys.stdout.write(printable("\n".join(lines)) + "\n")


# --- loopwright runs ---------------------------------------------------------------------------
_RUN_COLS = (
    Col("run", 0),
    Col("task", 0, flex=True, min_width=20),
    Col("loop", 7, flex=True, min_width=8),
    Col("status", 1),
    Col("stop reason", 9),  # the sentence beside it says it too
    Col("why it stopped", 2, flex=True, min_width=16, sentence=True),
    Col("cycles", 6, right=True),
    Col("best", 8, right=True),
    Col("cost $", 3, right=True),
    Col("held-out", 4),
    Col("created", 5),
)
STATUS_STYLE = {
    "accepted": "green",
    "stopped": "yellow",
    "awaiting_approval": "magenta",
    "escalated": "red",
    "failed": "bold red",
    "cancelled": "dim",
    "running": "cyan",
    "pending": "cyan",
}


def _ago(ts: float, now: float) -> str:
    d = max(now - ts, 0.0)
    if d >= 30 * 86400:
        return time.strftime("%Y-%m-%d", time.localtime(ts))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if d >= size:
            return f"{int(d // size)}{unit} ago"
    return f"{int(d)}s ago"


def parked(r: RunRecord) -> str | None:
    """What a run parked in ``awaiting_approval`` waits for, as the dashboard's list says it
    (the CLI's said "-"): a person's decision, or, decided (the row's count of its pending
    requests is 0), a resume; ``None`` for a run not parked."""
    if r.status != "awaiting_approval":
        return None
    from ._options import store_flag

    if r.open_requests is not None and r.open_requests <= 0:
        return f"decided, waits to be resumed: loopwright resume {r.run_id[:12]}{store_flag()}"
    return f"waits for a person: loopwright approvals{store_flag()}"


def interrupted(r: RunRecord, now: float) -> str | None:
    """A run left ``running`` by a process that stopped: one whose lease ran out, whose
    process on this host is gone (``kill -9``), or that no process holds (Ctrl-C: the
    interrupted process handed its lease back; a worker that had no loop for it did too).
    (The status stays ``running`` until a worker or ``resume`` takes the run over; ``now`` is
    the store's clock, as the lease is set: on PostgreSQL the server's.)"""
    if r.status != "running":
        return None
    from ._options import store_flag

    # typable as printed: the run, and the store it was found in when --store named it
    how = (
        f"loopwright resume {r.run_id[:12]}{store_flag()}"
        if r.spec_ref
        else "resume it from Python"
    )
    if r.lease_expires_at is None:
        return f"interrupted? no process is running it: {how}"
    if r.lease_expires_at >= now:
        # A process of this host that is gone holds nothing: resume takes the run over at
        # once (docs/storage.md: "loses its lease at once"), so say so now
        if r.lease_owner and owner_is_dead(r.lease_owner):
            return f"interrupted? its process on this host is gone: {how}"
        return None
    return f"interrupted? its lease ran out {_ago(r.lease_expires_at, now)}: {how}"


def not_started(r: RunRecord) -> str | None:
    """A fork nobody has started (``maker_starts``): no worker takes it, so its maker is told
    how to start it (after any edit), or None."""
    from .._stored_run_words import waits_only_to_start
    from ._resume_cmd import continue_hint

    if not waits_only_to_start(r):
        return None  # (ended, or parked on a request a person decides first)

    return "fork, not started: " + continue_hint(r, "start it")


def print_runs(
    runs: Sequence[RunRecord], total: int, *, width: int | None = None, now: float | None = None
) -> None:
    """The runs, one per line; ``total``: how many matched (more when only the newest show);
    ``now``: the store's clock, which judges a lease (default: this host's). When a run was
    created is its writer's clock, as ``created_at`` is, told on this host's (review48a)."""
    from .._stored_run_words import OVER_BUDGET_LEGEND, over_budget_words, run_stop_cause

    here = time.time()
    now = here if now is None else now
    why = [
        run_stop_cause(r) or interrupted(r, now) or not_started(r) or parked(r) or "-" for r in runs
    ]
    # a spend past its budget (a bill charged after its last check: fenced56b) is starred
    over = [over_budget_words(r) is not None for r in runs]
    rows = [
        (
            (r.run_id[:12], ""),
            (r.task_key, ""),
            (r.loop_name, ""),
            (r.status, STATUS_STYLE.get(r.status, "")),
            (r.stop_reason or "-", ""),
            (said, ""),
            (str(r.cycle), ""),
            ("-" if r.best_score is None else f"{r.best_score:.2f}", ""),
            (usd_digits(r.cost_usd) + "*", "red") if past else (usd_digits(r.cost_usd), ""),
            _held_cell(r),
            (_ago(r.created_at, here), ""),
        )
        for r, said, past in zip(runs, why, over, strict=True)
    ]
    title = f"{total} run(s)" + (f", the newest {len(runs)} shown" if total > len(runs) else "")
    width = terminal_width() if width is None else width
    shown = render(title, _RUN_COLS, rows, width=width).get(_WHY, 0)
    # An interrupted run's way on, when its cell was cut (at 80 columns: "interrupted? it…"):
    # on lines of their own under the table, whole (polish52).
    stalled = [(r, said) for r, said in zip(runs, why, strict=True) if r.status == "running"]
    stalled = [(r, said) for r, said in stalled if said.startswith("interrupted?")]
    if any(len(printable(said)) > shown for _r, said in stalled):
        _resume_lines([r for r, _said in stalled], width)
    # and a fork's way to start, as whole (its cell cut: "fork, not star…")
    forks = [said for r, said in zip(runs, why, strict=True) if r.maker_starts]
    forks = [said for said in forks if said.startswith("fork, not started")]
    if any(len(printable(said)) > shown for said in forks):
        _wrapped(forks[:5], width)
        if len(forks) > 5:
            _wrapped([f"and {len(forks) - 5} more fork(s) not started"], width)
    # what a starred cell means, a line each under the table (``HeldOutWords.legend``)
    legends = dict.fromkeys(w.legend for r in runs if (w := _held_words(r)).legend)
    if any(over):
        legends[OVER_BUDGET_LEGEND] = None
    if legends:
        _wrapped(list(legends), width)
    if total > len(runs):
        sys.stdout.write(f"… {total - len(runs)} more (use --limit N or --all)\n")


def _held_words(r: RunRecord) -> HeldOutWords:
    return held_out_words(r.held_out_passed, r.held_out_self_reported)


_TONES = {"fail": "red", "warn": "yellow"}


def _held_cell(r: RunRecord) -> tuple[str, str]:
    """The held-out column: ``pass``, ``FAIL``, ``-``, ``pass*`` for a pass resting on
    self-reported tests, ``fail*`` for a failure resting only on tests ``judged_only``
    refused (``_verdict.held_out_words``: the words every list uses)."""
    w = _held_words(r)
    return w.cell, _TONES.get(w.tone, "")


_WHY = next(i for i, c in enumerate(_RUN_COLS) if c.header == "why it stopped")


def _resume_lines(stalled: Sequence[RunRecord], width: int) -> None:
    """How to continue the interrupted runs ``stalled``, wrapped to ``width``: ``loopwright
    resume`` for a run started from a spec, ``Runtime.resume`` for one started from Python
    (``interrupted``'s words, which the table's cell cut)."""
    from ._options import store_flag

    lines = []
    for spec, how in (
        (True, "continue {it} with: loopwright resume {run}" + store_flag()),
        (False, "started from Python: continue {it} there with Runtime.resume({run}, loop)"),
    ):
        some = [r.run_id[:12] for r in stalled if bool(r.spec_ref) == spec]
        if not some:
            continue
        named = ", ".join(some[:3]) + (f" and {len(some) - 3} more" if len(some) > 3 else "")
        one = len(some) == 1
        run = repr(some[0]) if one and not spec else some[0] if one else "RUN"
        lines.append(
            f"interrupted, no process runs {'it' if one else 'them'}: {named}; "
            + how.format(it="it" if one else "each", run=run)
        )
    _wrapped(lines, width)


def _wrapped(lines: Sequence[str], width: int) -> None:
    """``lines`` under the table, each wrapped to ``width``."""
    import textwrap

    for line in lines:
        wrapped = textwrap.wrap(line, width=max(width, 20), break_on_hyphens=False)
        sys.stdout.write(printable("\n".join(wrapped)) + "\n")
