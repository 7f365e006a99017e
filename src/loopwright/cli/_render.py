"""Rich rendering for the CLI: one run's timeline (the outcome summary is ``_summary``'s;
`loopwright runs` uses the plain, faster tables of ``_table``)."""

from __future__ import annotations

import itertools
import json
import sys
import time
from collections import deque
from typing import TYPE_CHECKING, Any

from rich.markup import escape
from rich.table import Table
from rich.text import Text

from .._decide import at_default_ceiling, record_no_attempt
from .._edit_check import behind_text
from .._lineage import Lineage, lineage_text
from .._mid_cycle_records import asked_before_parked
from .._money_text import usd, usd_digits
from .._verdict import held_out_words, undecided_note
from ._table import STATUS_STYLE, interrupted, not_started, printable

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

    from rich.console import Group

    from .._state import TaskState
    from ..store import Approval, JournalEntry, RunRecord

__all__ = [
    "TIMELINE_CHUNK",
    "cycles_in",
    "json_text",
    "run_detail",
    "run_detail_parts",
    "status_text",
]


def json_text(value: Any) -> str:
    """A value as one line of JSON (``true``, ``null``, double quotes), as ``--json`` writes it,
    not as Python's repr (``True``, ``None``, ``'x'``); what JSON cannot hold, as text."""
    import json

    return json.dumps(value, ensure_ascii=False, default=str)


#: Characters of one stored text ``show`` prints (a value in a request's diff, a reason, a
#: finding); ``--json`` holds it whole. Rich wraps a long word in time that grows with the
#: square of its length: a request's 3 MB value took two minutes to show (outside50b).
SHOWN_MAX = 2000


def _cut(text: str) -> str:
    """``text``, or its first ``SHOWN_MAX`` characters and how many more there are."""
    if len(text) <= SHOWN_MAX:
        return text
    more = len(text) - SHOWN_MAX
    return f"{text[:SHOWN_MAX]}… ({more:,} more characters: show --json has it whole)"


def _cut_lines(text: str) -> str:
    """Each line of ``text`` cut as ``_cut`` cuts it (a diff: one line per side of a part)."""
    if len(text) <= SHOWN_MAX:
        return text
    return "\n".join(_cut(line) for line in text.split("\n"))


def status_text(status: str) -> str:
    return f"[{STATUS_STYLE.get(status, 'white')}]{status}[/]"


def _score(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


def _plan(state: TaskState) -> Table | None:
    if not state.plan:
        return None
    nxt = state.next_step()
    t = Table(title="Plan", title_justify="left")
    for col in ("step", "title", "depends on", "status"):
        t.add_column(col)
    for s in state.plan:
        mark = (
            "done"
            if s.status == "done"
            else ("[bold]next[/]" if nxt and s.id == nxt.id else s.status.replace("_", " "))
        )
        t.add_row(escape(s.id), escape(s.title), ", ".join(s.depends_on) or "-", mark)
    return t


def _detail_table(title: str) -> Table:
    """A table of ``show``: no outer frame, so 80 columns leave room for the text."""
    from rich import box

    return Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, show_edge=False)


_BY_PEOPLE = ("edit", "rollback")


def _person_row(
    cycle: int, rec: dict[str, Any]
) -> tuple[str, list[str], list[str], list[str], str, str, str]:
    """A person's edit or rollback between cycles, in the timeline where it happened (a
    redone cycle after a rollback, or a cycle after an edit, reads as what it is)."""
    who = escape(str(rec.get("by") or "?"))
    if rec.get("decision") == "edit":
        what = [f"edit: {escape(str(rec.get('part')))} v{rec.get('version')}"]
        if "held_out" in rec:
            # made beside a parked cycle (its record keeps that cycle's held-out verdicts):
            # that cycle's, not the one before it (it read "1 parked ..." then "0 edited")
            said = f"[cyan]edited by {who} while it was parked[/]"
            return (str(cycle + 1), what, [], [], "-", said, "-")
        if rec.get("after_run_ended"):  # after the cycle it names ended the run
            said = f"[cyan]edited by {who} after the run ended[/]"
            return (str(rec.get("cycle")), what, [], [], "-", said, "-")
        return (str(cycle), what, [], [], "-", f"[cyan]edited by {who}[/]", "-")
    what = [f"back to cycle {rec.get('to_cycle')}"]
    return (str(cycle), what, [], [], "-", f"[cyan]rolled back by {who}[/]", "-")


_Row = tuple[str, list[str], list[str], list[str], str, str, str]

#: Timeline rows rendered as one table: a longer run's timeline is printed as tables of this
#: many rows, each rendered and written before the next is read (rich renders a table whole:
#: a 20,000-cycle run's one table took 160 MB).
TIMELINE_CHUNK = 200


#: The most effects of one proposal the timeline names (the rest counted).
_EFFECTS_NAMED = 5


def _asked(prop: dict[str, Any]) -> list[str]:
    """What a proposal asks besides its edits, for its timeline cell: its question's text and
    the effects it asks for by name (a question's row read "question:" and an effect-only
    proposal's "effects:", with nothing after them; newuser52)."""
    out: list[str] = []
    question = prop.get("question")
    if isinstance(question, dict) and question.get("text"):
        out.append(escape(_cut(json.dumps(str(question["text"]), ensure_ascii=False))))
    names = [str(e.get("name")) for e in prop.get("effects") or () if isinstance(e, dict)]
    shown = ", ".join(names[:_EFFECTS_NAMED])
    if len(names) > _EFFECTS_NAMED:
        shown += f" (+{len(names) - _EFFECTS_NAMED} more)"
    if names:  # (an effect-only proposal's kind, "effects:", says it already)
        word = "" if prop.get("kind") == "effects" else f"effect{'s' if len(names) > 1 else ''} "
        out.append(escape(word + shown))
    return out


def _parked_in(item: tuple[int, dict[str, Any] | None]) -> object:
    """The cycle of a parked cycle's marker record, else None."""
    rec = item[1]
    return rec.get("cycle") if rec and rec.get("decision") == "parked" else None


def _asked_in(item: tuple[int, dict[str, Any] | None]) -> object:
    """The cycle of a concluded cycle's record that asked a question, else None."""
    rec = item[1]
    return (
        rec.get("cycle") if rec and "proposal" in rec and rec.get("decision") == "asked" else None
    )


def _timeline_rows(records: Iterable[tuple[int, dict[str, Any] | None]]) -> Iterator[_Row]:
    """Each timeline row, as ``records`` is read (a question's row ahead of its cycle's
    parked marker: ``asked_before_parked``)."""
    for cycle_of, rec in asked_before_parked(records, _parked_in, _asked_in):
        if not rec or "proposal" not in rec:
            if rec and rec.get("ended_inside"):  # the cycle the run ended inside: no record
                cost = (rec.get("usage") or {}).get("cost_usd", 0)
                what = ["ended inside this cycle:", escape(_cut(str(rec.get("cause") or "-")))]
                yield (
                    str(rec["cycle"]),
                    what,
                    [],
                    [],
                    "-",
                    escape(str(rec["decision"])),
                    usd_digits(cost),
                )
            elif rec and rec.get("decision") == "parked":
                said = f": {escape(str(rec['outcome']))}" if rec.get("outcome") else ""
                yield (
                    str(rec["cycle"]),
                    [],
                    [],
                    [],
                    "-",
                    f"[magenta]{rec.get('parked_for') or 'parked for approval'}{said}[/]",
                    "-",
                )
            elif rec and rec.get("decision") in _BY_PEOPLE:
                yield _person_row(cycle_of, rec)
            continue
        prop = rec["proposal"]
        parts = [f"{e['artifact']}/{e['part']}" for e in prop.get("edits", ())]
        if prop.get("replace"):
            parts = [f"REPLACE {a}" for a in prop["replace"]]
        rest = [*(escape(p) for p in parts), *_asked(prop)]
        # "noop:" with nothing after it read as a value cut off
        what = [f"{escape(str(prop.get('kind')))}{':' if rest else ''}", *rest]
        if record_no_attempt(rec):  # no actor call: the verifiers judged a person's edit
            what = ["[cyan]check only:[/] judged the person's edit"]
        elif rec.get("check_only"):  # the actor's attempt, denied: then the edit judged
            what = ["[cyan]request denied:[/] judged the person's edit"]
        if rec.get("effects_not_rerun"):  # (effects ran with the values an edit replaced)
            what.append(f"[yellow]{escape(behind_text(rec['effects_not_rerun']))}[/]")
        if rec.get("duplicate"):  # (a refusal counts as no progress, as a repeat does)
            refused = rec.get("decision") == "refused"
            what.append("[yellow](touches accepted work)[/]" if refused else "[yellow](repeat)[/]")

        def verdicts(d: dict[str, Any], held: bool = False) -> list[str]:
            out = []
            for k, v in d.items():
                line = (
                    f"{'[green]✓[/]' if v['passed'] else '[red]✗[/]'} {escape(k)} {v['score']:.2f}"
                )
                # a held-out pass that rests on tests the candidate decided is not a judged one,
                # nor a failure resting only on tests judged_only refused
                note = undecided_note(v) if held else ""
                out.append(line + (f" [yellow]({escape(note)})[/]" if note else ""))
            return out

        yield (
            str(rec["cycle"]),
            what,
            verdicts(rec.get("visible", {})),
            verdicts(rec.get("held_out", {}), held=True),
            _score(rec.get("score")),
            escape(str(rec.get("decision", "-"))),
            usd_digits(rec.get("usage", {}).get("cost_usd", 0)),
        )


def _last_cycles(rows: Iterable[_Row], last: int) -> tuple[list[_Row], int]:
    """The rows of the last ``last`` cycles of ``rows`` and how many cycles there are: rows in
    a row naming one cycle (a cycle, a person's edit after it) are one cycle. Holds ``last``
    cycles' rows at a time, not the run's."""
    # (a deque holds at most ``sys.maxsize``: ``--last`` of more is every cycle, as it is)
    groups: deque[list[_Row]] = deque(maxlen=min(last, sys.maxsize))
    total, prev = 0, None
    for row in rows:
        if row[0] != prev:
            groups.append([])  # (drops the oldest cycle's rows once ``last`` are held)
            total, prev = total + 1, row[0]
        groups[-1].append(row)
    return [row for group in groups for row in group], total


def cycles_in(records: Iterable[tuple[int, dict[str, Any] | None]]) -> int:
    """How many cycles the timeline of ``records`` lists (rows in a row naming one cycle are
    one)."""
    return _last_cycles(_timeline_rows(records), 1)[1]


def _cut_note(shown: list[_Row], last: int) -> Text:
    """What a timeline cut to its last ``last`` cycles (``shown``) left out, and how to see
    it."""
    what = (
        f"the last cycle only, cycle {shown[0][0]}"
        if last == 1
        else f"the last {last:,} cycles, from cycle {shown[0][0]}"
    )
    return Text(
        f"The timeline below lists {what} (the "
        "earlier ones are not shown: --last N for more, --all for every one, --json for the "
        "whole record)",
        style="italic",
    )


def _timeline(
    records: Iterable[tuple[int, dict[str, Any] | None]], width: int, last: int | None = None
) -> Iterator[Any]:
    """Each cycle's proposal, verdicts, score, decision and cost: a table on a wide terminal,
    else one block per cycle (four prose columns in 80 would each be a sliver). ``records``:
    each checkpoint's ``(cycle, record)``, oldest first (a store's ``iter_records``: the
    records alone, not every state with every version of every part). Yields one renderable
    per ``TIMELINE_CHUNK`` rows (the first titled "Timeline", the next ones "Timeline,
    continued"), read from ``records`` as it is asked for: a reader printing each one holds a
    chunk, however long the run. ``last``: only the last this many cycles, after a line that
    says how many were left out (every record is still read: which cycle a mid-cycle record
    belongs to, and whether it concluded, is told by the records before it)."""
    rows: Iterator[_Row] = _timeline_rows(records)
    if last is not None:
        shown, total = _last_cycles(rows, last)
        if total > last:
            yield _cut_note(shown, last)
        rows = iter(shown)
    first = True
    while True:
        chunk = list(itertools.islice(rows, TIMELINE_CHUNK))
        if not chunk and not first:
            return
        yield _timeline_chunk(chunk, width, first)
        first = False
        if len(chunk) < TIMELINE_CHUNK:
            return


def _timeline_chunk(rows: list[_Row], width: int, first: bool) -> Any:
    from rich.console import Group
    from rich.text import Text

    if width >= _WIDE:
        t = _detail_table("Timeline" if first else "Timeline, continued")
        t.add_column("cycle", justify="right", no_wrap=True)
        for col in ("proposal", "visible verdicts", "held-out verdicts"):
            t.add_column(col, overflow="fold")
        for col in ("score", "decision", "cost $"):
            t.add_column(col, no_wrap=True)
        # Each cell's text made once (rich makes a text cell's markup twice: to measure it and
        # to render it), and a cell alike in another row shares it: the same ``Text`` rich's
        # ``render_str`` makes of it, which neither measuring nor rendering changes.
        made: dict[str, Text] = {}

        def cell(markup: str) -> Text:
            text = made.get(markup)
            if text is None:
                text = made[markup] = Text.from_markup(printable(markup))
            return text

        for cycle, what, vis, held, score, decision, cost in rows:
            t.add_row(
                cell(cycle),
                cell("\n".join(what) or "-"),
                cell("\n".join(vis) or "-"),
                cell("\n".join(held) or "-"),
                cell(score),
                cell(decision),
                cell(cost),
            )
        return t
    blocks: list[Any] = [Text("Timeline", style="italic")] if first else []
    for cycle, what, vis, held, score, decision, cost in rows:
        spent = "" if cost == "-" else f"  score {score}  ${cost}"
        blocks.append(f"[bold]cycle {cycle}[/]  {decision}{spent}")
        grid = Table.grid(padding=(0, 1))
        grid.add_column(no_wrap=True)
        grid.add_column(overflow="fold")
        proposal = f"{what[0]} {', '.join(what[1:])}" if what else ""
        for label, text in (("proposal", proposal), ("visible", ", ".join(vis))):
            if text:
                grid.add_row(f"  {label}", text)
        if held:
            grid.add_row("  held-out", ", ".join(held))
        blocks.append(grid)
    return Group(*blocks)


_WIDE = 110  # narrower, the timeline is printed as blocks


def _artifacts(state: TaskState) -> Table:
    t = _detail_table("Artifacts")
    t.add_column("part", min_width=12)
    t.add_column("versions", justify="right", no_wrap=True)
    t.add_column("status", no_wrap=True)
    t.add_column("current value", min_width=12)
    for ref, p in state.iter_parts():
        value = json_text(p.value)
        if len(value) > 80:
            value = value[:77] + "..."
        t.add_row(escape(ref), str(p.count), p.status, escape(value))
    return t


def _effects(journal: list[JournalEntry]) -> Table | None:
    rows = [e for e in journal if e.kind == "effect"]
    if not rows:
        return None
    t = _detail_table("Effects (journal)")
    for col in ("cycle", "effect", "key", "status", "attempts", "result / cause"):
        t.add_column(col, overflow="fold")
    for e in rows:
        d = e.data
        shown = d.get("cause") or d.get("result")
        text = "" if shown is None else (shown if isinstance(shown, str) else json_text(shown))
        if len(text) > 90:
            text = text[:87] + "..."
        style = {"done": "green", "compensated": "yellow"}.get(e.status, "red")
        t.add_row(
            str(e.cycle),
            escape(str(d.get("name", ""))),
            escape(e.key.removeprefix("effect:")),
            f"[{style}]{e.status}[/]",
            str(e.attempts),
            escape(text),
        )
    return t


def run_detail(
    rec: RunRecord,
    state: TaskState,
    records: Iterable[tuple[int, dict[str, Any] | None]],
    approvals: list[Approval],
    journal: list[JournalEntry] | None = None,
    width: int = 80,
) -> Group:
    """``loopwright show``: the run, its plan, timeline (from ``records``, each checkpoint's
    ``(cycle, record)``), its parts' current values (``state``: the latest), effects,
    approvals and packet — ``run_detail_parts`` as one renderable."""
    from rich.console import Group

    return Group(*run_detail_parts(rec, state, records, approvals, journal, width))


def run_detail_parts(
    rec: RunRecord,
    state: TaskState,
    records: Iterable[tuple[int, dict[str, Any] | None]],
    approvals: list[Approval],
    journal: list[JournalEntry] | None = None,
    width: int = 80,
    now: float | None = None,
    lineage: Lineage | None = None,
    last: int | None = None,
) -> Iterator[Any]:
    """``run_detail``'s renderables one by one, ``records`` read as the timeline's are asked
    for: printing each as it comes holds one chunk of a long run's timeline, not all of it.
    ``now``: the store's clock, which judges a lease (default: this host's). ``lineage``: a
    fork's origins (``fork_lineage``), named after the one it was forked from. ``last``: the
    timeline's last this many cycles only (default: every one)."""
    from rich.panel import Panel

    from .._contract import contract_from_snapshot
    from .._packet import explain
    from .._stored_run_words import over_budget_words, run_next_action, run_stop_cause

    contract = contract_from_snapshot(rec.contract)
    head = Table.grid(padding=(0, 2))
    head.add_column(style="bold")
    head.add_column()
    head.add_row("run", rec.run_id)
    head.add_row("task", escape(rec.task_key))
    head.add_row("loop", f"{escape(rec.loop_name)} (project {escape(rec.project or '-')})")
    if rec.forked_from:
        came = f"run {rec.forked_from} at cycle {rec.forked_at}"
        if rec.forked_at:
            # its cycles and spend count them; the timeline lists the fork's own cycles only
            its = "cycle 1 is" if rec.forked_at == 1 else f"cycles 1-{rec.forked_at} are"
            came += f" ({its} listed there)"
        if lineage is not None:
            came += lineage_text(lineage)  # a fork of a fork: its origins, nearest first
        head.add_row("forked from", came)
    head.add_row("status", status_text(rec.status))
    stalled = interrupted(rec, time.time() if now is None else now)  # as `runs` says it
    if stalled:
        head.add_row("", f"[yellow]{escape(stalled)}[/]")
    waiting = not_started(rec)  # a fork no worker takes, as `runs` says it
    if waiting:
        head.add_row("", f"[yellow]{escape(waiting)}[/]")
    if rec.stop_reason:
        # a per-task cap (budget.max_cycles_key) is the cycle count the run stopped at
        own = rec.stop_reason == "budget_cycles" and contract.budget.max_cycles_key is not None
        cap = rec.cycle if own else None
        spent = {"cost_usd": rec.cost_usd, "tokens": rec.tokens, "seconds": rec.seconds}
        at_default = at_default_ceiling(contract, rec.task)
        head.add_row(
            "stopped because",
            explain(rec.stop_reason, contract, max_cycles=cap, spent=spent, at_default=at_default),
        )
        head.add_row("why it stopped", escape(run_stop_cause(rec)))
    head.add_row("cycles", str(rec.cycle))
    head.add_row("best score", _score(rec.best_score))
    head.add_row("spend", f"{usd(rec.cost_usd)}, {rec.tokens} tokens, {rec.seconds:.2f} s")
    over = over_budget_words(rec)  # (a bill charged past its last check: never "kept")
    if over:
        head.add_row("", f"[red]{escape(over)}[/]")
    if rec.held_out_passed is not None:
        w = held_out_words(rec.held_out_passed, rec.held_out_self_reported)
        # a marked verdict (not an independent one) says why in yellow after it: the stored
        # verdicts' notes, else the run's mark (``HeldOutWords.note``); never a false success
        held = (
            "[red]FAIL[/] (false success)"
            if w.kind == "fail" and rec.status == "accepted"
            else "pass"
            if rec.held_out_passed
            else "fail"
        )
        # (an ended run's packet holds the verdicts; an accepted run's are its last cycle's,
        # marked in the timeline)
        notes = [
            f"{escape(str(k))}: {escape(n)}"
            for k, v in ((rec.packet or {}).get("held_out") or {}).items()
            if isinstance(v, dict) and (n := undecided_note(v))
        ] or ([escape(w.note)] if w.note else [])
        head.add_row("held-out", held + (f" [yellow]({'; '.join(notes)})[/]" if notes else ""))
    nxt = run_next_action(rec, state.next_action)  # (an ended run's: its packet's, settled)
    if nxt:
        head.add_row("next action", escape(_cut(nxt)))
    yield Panel(head, title="Run", title_align="left")
    plan = _plan(state)
    if plan is not None:
        yield plan
    yield from _timeline(records, width, last)
    yield _artifacts(state)
    effects = _effects(journal or [])
    if effects is not None:
        yield effects
    for a in approvals:
        body = (
            f"[bold]{escape(_cut(a.what))}[/]\nwhy: {escape(_cut(a.why))}\nstatus: {a.status}"
            + (f" by {escape(a.decided_by)}" if a.decided_by else "")
            + (f": {escape(_cut(json_text(a.answer)))}" if a.answer is not None else "")
            + (f" — {escape(_cut(a.note))}" if a.note else "")
            + (f"\n{escape(_cut_lines(a.diff))}" if a.diff else "")
        )
        yield (
            Panel(
                body,
                title=f"approval {a.approval_id} ({escape(a.rule or a.kind)})",
                title_align="left",
                border_style="magenta",
            )
        )
    if rec.packet:
        p = rec.packet
        lines = [
            f"[bold]{escape(_cut(str(p.get('summary', ''))))}[/]",
            f"recommended: {escape(_cut(str(p.get('recommended_action', ''))))}",
        ]
        if p.get("owner"):
            lines.append(f"owner: {escape(_cut(str(p['owner'])))}")
        for f in p.get("unresolved_findings", [])[:10]:
            where = f"{f.get('artifact')}/{f.get('part')}" if f.get("part") else f.get("artifact")
            # a finding on no artifact says which check found it ("None" was printed)
            where = where or f.get("verifier") or "-"
            lines.append(f"• {escape(_cut(str(where)))}: {escape(_cut(str(f['message'])))}")
        if p.get("error"):
            lines.append(
                f"error: {escape(_cut(str(p['error'].get('type'))))}: "
                f"{escape(_cut(str(p['error'].get('message'))))}"
            )
        best = p.get("best_candidate", {})
        lines.append(f"best candidate: cycle {best.get('cycle')} score {_score(best.get('score'))}")
        yield (
            Panel(
                "\n".join(lines), title="Escalation packet", title_align="left", border_style="red"
            )
        )
