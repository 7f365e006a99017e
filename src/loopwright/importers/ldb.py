"""Import LDB debugging traces (``FloridSleeves/LLMDebugger``, ``results/ldb/…jsonl``) as tasks.

One LDB line is one recorded debugging run on one benchmark problem. ``import_ldb`` turns each
into one task for the code-repair workload (``examples/code_repair``)::

    {
      "task_key": "ldb/<label>/HumanEval/90",
      "goal": "make next_smallest pass its tests",
      "task_id": "HumanEval/90", "entry_point": "next_smallest", "prompt": "<signature+doc>",
      "artifacts": {"program": {"code": "<implementations[0]: the seed as LDB tested it>"}},
      "visible_tests": ["assert ...", ...],          # generated_test: what LDB actually ran
      "recorded": {
        "attempts": [{"code": "<implementations[k]>", "usage": {...}, "feedback": [...]}, ...],
        "seed_feedback": [...],                      # test_feedback[0]
        "is_passing": true, "debug_iter": 3, "token_nums": 12397,
        "rounds": 10, "max_cycles": 11,              # the recorded round budget (see below)
        "cost_proxy": {"tokens_per_attempt": ..., "usd_per_token": ..., "method": "..."},
        "source": {"file": "...", "line": 12, "label": "..."}
      },
      "held_out": {
        "tests": ["<test>\\n\\ncheck(next_smallest)\\n"],
        "recorded": {"is_solved": true}
      }
    }

A task with no visible tests (MBPP has 18 per file: LDB's filter drops every given test)
gets ``"vacuous": true``; the import summary (``LdbImport``) counts them and warns, since a
check with nothing to check passes vacuously (see ``CommandVerifier``).

**Round budget.** LDB stops at the first visible pass or after ``max_iters`` rounds, and
``max_iters`` is not in the file (runs used 10 or 9). A run that never passed ran out of
rounds, so its ``debug_iter`` *is* the budget; a run that passed only shows a lower bound.
``recorded.rounds`` is therefore ``debug_iter`` for a run that never passed, and for one that
passed: ``rounds=`` (``--rounds N``) when given, else the budget read off the file's runs that
never passed (the largest, with a warning if they disagree), else unknown (``null``).
``recorded.max_cycles`` = 1 (the seed) + ``rounds`` is the per-task cycle budget a contract
reads with ``[contract.budget] max_cycles_key = "recorded.max_cycles"``, so a replayed run
that never passes stops ``budget_cycles`` where its recording stopped, whatever its budget.

**Hidden tests.** ``held_out.tests`` is ``test`` followed by ``check(<entry_point>)``, once: the
MBPP files' ``test`` strings already end with that call (LDB ran it twice, doubling the time
against the limit), so it is appended only when missing.

Everything about the hidden tests lives under ``held_out`` (the held-out verifier reads it
there). ``recorded.attempts`` are ``implementations[1:]``: attempt ``k`` is the program after
the ``k``-th debugging round.

**Consistency.** A line whose fields contradict the format's own rules is refused with its
line number (``_check_consistent``): ``is_passing`` is ``test_feedback[-1] == []``, no
implementation before the last passed (LDB stops at the first visible pass), and
``token_nums`` is 0 exactly when no debugging round ran.

**Cost proxy.** LDB records one number, ``token_nums``: the GPT-2-tokenizer count of the chat
messages summed over all debugging rounds (0 when the seed passed). It records neither per-round
counts nor billed tokens, so each attempt is charged ``token_nums / debug_iter`` tokens (the
remainder goes to the first attempts, so the total is exact), priced at ``usd_per_token``
(default ``1.5e-6``: the input-token list price of gpt-3.5-turbo-0613, $1.50 per million, since
almost all of a debugging round's tokens are prompt). An even split is the one choice that needs
no guess about how the conversation grew; in reality later rounds cost more (the conversation
is resent each round), so per-attempt costs are flattened while run totals are right. The seed
itself costs nothing here: it came from a separate generator run LDB does not account for.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from .._errors import ConfigError
from .._json import JsonLineError, json_lines
from .._keys import check_key, check_length, check_name
from .._redact import redact
from .._same_file import same_regular_file

__all__ = [
    "USD_PER_TOKEN",
    "LdbFormatError",
    "LdbImport",
    "convert_record",
    "import_ldb",
    "import_ldb_report",
    "read_ldb",
    "read_ldb_report",
]

USD_PER_TOKEN = 1.5e-6
"""Default price of one ``token_nums`` token (gpt-3.5-turbo-0613 input list price)."""

_MAX_TOKENS = 2**1000  # far past any recording; a cost of more overflows a float

_REQUIRED: dict[str, type | tuple[type, ...]] = {
    "task_id": str,
    "prompt": str,
    "entry_point": str,
    "test": str,
    "implementations": list,
    "test_feedback": list,
    "is_passing": bool,
    "is_solved": bool,
    "debug_iter": int,
    "token_nums": int,
}


class LdbFormatError(ConfigError):
    """A malformed LDB line; ``line`` is its 1-based number."""

    def __init__(self, message: str, *, path: str, line: int) -> None:
        self.path = path
        self.line = line
        super().__init__(f"{path}, line {line}: {message}", field=None)


def default_label(path: Path) -> str:
    """The run label used in task keys: ``<model dir>`` for ``…/<model>/results.jsonl``,
    else ``<dir>-<stem>`` (``reflexion-gpt-4o-2024-05-13``)."""
    if path.name == "results.jsonl":
        return path.parent.name or "ldb"
    return f"{path.parent.name}-{path.stem}" if path.parent.name else path.stem


def _split_tokens(total: int, n: int) -> list[int]:
    if n <= 0:
        return []
    base, extra = divmod(max(0, total), n)
    return [base + (1 if i < extra else 0) for i in range(n)]


def _hidden_script(test: str, entry: str) -> str:
    """``test`` and one ``check(entry)`` call (MBPP's ``test`` already ends with it)."""
    lines = [ln.strip() for ln in test.strip().splitlines()]
    if lines and re.fullmatch(rf"check\(\s*{re.escape(entry)}\s*\)", lines[-1]):
        return test if test.endswith("\n") else test + "\n"
    return f"{test}\n\ncheck({entry})\n"


def _check_rounds(rounds: int | None) -> None:
    if rounds is not None and (
        isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 0
    ):
        raise ConfigError(f"must be a whole number >= 0, got {rounds!r}", field="rounds")


def _check_consistent(
    rec: Mapping[str, Any], feedback: list[Any], bad: Callable[[str], LdbFormatError]
) -> None:
    """Refuse a line whose fields contradict each other (the format's own rules, README of
    the data): a replay of it would count a pass or a spend the recording never had."""
    if rec["is_passing"] != (feedback[-1] == []):
        raise bad(
            f"'is_passing' is {rec['is_passing']} but the last implementation "
            + ("failed visible tests" if feedback[-1] else "passed every visible test")
            + " (test_feedback[-1])"
        )
    early = next((k for k, f in enumerate(feedback[:-1]) if f == []), None)
    if early is not None:  # LDB stops at the first visible pass
        raise bad(
            f"implementation {early} passed every visible test (test_feedback[{early}] is []), "
            f"yet the run went on to {len(feedback) - 1}"
        )
    if (rec["debug_iter"] == 0) != (rec["token_nums"] == 0):
        raise bad(
            f"'token_nums' is {rec['token_nums']} for {rec['debug_iter']} debugging rounds "
            "(it is 0 exactly when the seed passed and no round ran)"
        )


def convert_record(
    rec: Mapping[str, Any],
    *,
    label: str = "ldb",
    usd_per_token: float = USD_PER_TOKEN,
    where: tuple[str, int] = ("<record>", 0),
    rounds: int | None = None,
) -> dict[str, Any]:
    """Convert one parsed LDB record into a task (see the module docstring); ``rounds`` is
    the recording's round budget where known (used for a run that passed; a run that never
    passed records its own)."""
    path, line = where
    _check_rounds(rounds)

    def bad(msg: str) -> LdbFormatError:
        return LdbFormatError(msg, path=path, line=line)

    if not isinstance(rec, Mapping):
        raise bad(f"expected a JSON object, got {type(rec).__name__}")
    for key, typ in _REQUIRED.items():
        if key not in rec:
            raise bad(f"missing field {key!r}")
        value = rec[key]
        if typ is int and isinstance(value, bool):
            raise bad(f"field {key!r} must be an integer, got {value!r}")
        if not isinstance(value, typ):
            raise bad(
                f"field {key!r} must be {getattr(typ, '__name__', typ)}, got {type(value).__name__}"
            )
    impls = rec["implementations"]
    if not impls or not all(isinstance(i, str) for i in impls):
        raise bad("'implementations' must be a non-empty list of strings")
    feedback = rec["test_feedback"]
    if len(feedback) != len(impls) or not all(isinstance(f, list) for f in feedback):
        raise bad(
            f"'test_feedback' must be a list of lists as long as 'implementations' "
            f"({len(impls)}), got {len(feedback)}"
        )
    if rec["token_nums"] < 0:  # was counted as 0: the run's spend silently dropped
        raise bad(f"'token_nums' must be 0 or more, got {rec['token_nums']}")
    if rec["token_nums"] > _MAX_TOKENS:  # no float holds its cost: an OverflowError below
        raise bad(f"'token_nums' is too large ({len(str(rec['token_nums']))} digits)")
    tests = rec.get("generated_test")
    if tests is None:  # older files: rebuild LDB's filter (programming/ldb.py)
        given = rec.get("given_tests") or []
        if not isinstance(given, list):  # a lone string's characters were its tests
            raise bad("'given_tests' must be a list of strings")
        tests = [t for t in given if rec["entry_point"] in t and "assert False" not in t]
    if not isinstance(tests, list) or not all(isinstance(t, str) for t in tests):
        raise bad("'generated_test' must be a list of strings")
    debug_iter = rec["debug_iter"]
    attempts_n = len(impls) - 1
    if debug_iter != attempts_n:
        raise bad(
            f"'debug_iter' is {debug_iter} but there are {attempts_n} debugging attempts "
            f"(len(implementations) - 1)"
        )
    _check_consistent(rec, feedback, bad)
    if usd_per_token < 0:
        raise ConfigError("must not be negative", field="usd_per_token")
    tokens = _split_tokens(rec["token_nums"], attempts_n)
    if not all(math.isfinite(t * usd_per_token) for t in tokens):
        # NaN passed the check above; a huge price overflows: either wrote NaN or Infinity
        # costs, which are not JSON, into the tasks
        raise ConfigError(
            f"must be a finite number small enough that a cost stays finite, got {usd_per_token!r}",
            field="usd_per_token",
        )
    entry = rec["entry_point"]
    # A run that never passed used up its rounds: debug_iter is its budget.
    budget = debug_iter if not rec["is_passing"] else rounds
    if budget is not None and budget < debug_iter:
        budget = debug_iter  # a passing run shows at least this many rounds were allowed
    attempts = [
        {
            "code": impls[k],
            "usage": {
                "cost_usd": tokens[k - 1] * usd_per_token,
                "tokens": tokens[k - 1],
                "seconds": 0.0,
            },
            "feedback": list(feedback[k]),
            "note": f"recorded attempt {k} of {attempts_n}",
        }
        for k in range(1, len(impls))
    ]
    key = f"ldb/{label}/{rec['task_id']}"
    try:
        check_key(key)  # as `loopwright run` will: said here, with the line, not there
    except ConfigError as exc:
        raise bad(exc.message) from None
    return {
        "task_key": key,
        "goal": f"make {entry} pass its tests",
        "task_id": rec["task_id"],
        "entry_point": entry,
        "prompt": rec["prompt"],
        "artifacts": {"program": {"code": impls[0]}},
        "visible_tests": list(tests),
        **({"vacuous": True} if not tests else {}),
        "recorded": {
            "attempts": attempts,
            "seed_feedback": list(feedback[0]),
            "is_passing": rec["is_passing"],
            "debug_iter": debug_iter,
            "token_nums": rec["token_nums"],
            "rounds": budget,
            "max_cycles": None if budget is None else budget + 1,
            "cost_proxy": {
                "method": "token_nums split evenly over debug_iter attempts",
                "tokens_per_attempt": tokens,
                "usd_per_token": usd_per_token,
            },
            "source": {"file": path, "line": line, "label": label},
        },
        "held_out": {
            "tests": [_hidden_script(rec["test"], entry)],
            "recorded": {"is_solved": rec["is_solved"]},
        },
    }


@dataclass(slots=True)
class LdbImport:
    """What an import found: the tasks, and what the user should know about them.

    Attributes:
        tasks: the converted tasks, in file order.
        vacuous: task keys with no visible tests (their visible check has nothing to check).
        rounds: the round budget used for runs that passed (``--rounds`` or read off the file),
            ``None`` when unknown.
        rounds_seen: ``{debug_iter: count}`` over the runs that never passed.
        warnings: one line each, for the import summary.
    """

    tasks: list[dict[str, Any]] = field(default_factory=list)
    vacuous: list[str] = field(default_factory=list)
    rounds: int | None = None
    rounds_seen: dict[int, int] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


def _parse_lines(p: Path) -> list[tuple[int, Any]]:
    with p.open("rb") as fh:
        try:
            return list(
                json_lines(fh, lambda exc: f"not valid JSON: {exc.msg} (column {exc.colno})")
            )
        except JsonLineError as bad:
            raise LdbFormatError(bad.message, path=str(p), line=bad.line) from None


def _file_rounds(records: list[tuple[int, Any]]) -> Counter[int]:
    """``debug_iter`` of the runs that never passed (each one's whole budget)."""
    return Counter(
        r["debug_iter"]
        for _, r in records
        if isinstance(r, Mapping)
        and r.get("is_passing") is False
        and isinstance(r.get("debug_iter"), int)
        and not isinstance(r.get("debug_iter"), bool)
    )


def read_ldb_report(
    path_in: str | Path,
    *,
    label: str | None = None,
    usd_per_token: float = USD_PER_TOKEN,
    rounds: int | None = None,
) -> LdbImport:
    """Read an LDB file into tasks with the import summary (``LdbImport``); malformed lines
    raise ``LdbFormatError`` naming the line."""
    _check_rounds(rounds)
    if label is not None:
        # in every task key: one `loopwright run` refuses (a line break, an escape) made an
        # import of 164 tasks, exit 0, that no run could be made of (outside probe, stop 51)
        check_name(label, "label", "label")
        check_length(label, "label", "label")
    p = Path(path_in)
    lab = label or default_label(p)
    records = _parse_lines(p)
    seen = _file_rounds(records)
    report = LdbImport(rounds_seen=dict(sorted(seen.items())))
    if rounds is None and seen:
        rounds = max(seen)
        if len(seen) > 1:
            report.warnings.append(
                f"runs that never passed used different round budgets {dict(sorted(seen.items()))}; "
                f"each keeps its own, runs that passed get {rounds} (set --rounds to choose)"
            )
    elif rounds is not None and any(k != rounds for k in seen):
        other = sum(c for k, c in seen.items() if k != rounds)
        report.warnings.append(
            f"{other} run(s) that never passed recorded a round count other than --rounds "
            f"{rounds} ({dict(sorted(seen.items()))}); each keeps its own, as recorded"
        )
    report.rounds = rounds
    lines: dict[str, int] = {}  # task key -> its line: a run listed twice would count twice
    for n, rec in records:
        task = convert_record(
            rec, label=lab, usd_per_token=usd_per_token, where=(str(p), n), rounds=rounds
        )
        if task["task_key"] in lines:
            raise LdbFormatError(
                f"task {rec['task_id']!r} is on line {lines[task['task_key']]} too "
                "(it would be counted twice)",
                path=str(p),
                line=n,
            )
        lines[task["task_key"]] = n
        report.tasks.append(task)
        if task.get("vacuous"):
            report.vacuous.append(task["task_key"])
    if report.vacuous:
        report.warnings.append(
            f"{len(report.vacuous)} task(s) have no visible tests (e.g. "
            f"{', '.join(report.vacuous[:3])}): their visible check has nothing to check, and "
            "a contract refuses success on it unless contract.success.allow_vacuous = true"
        )
    if rounds is None:
        report.warnings.append(
            "the round budget is unknown (every run passed): runs keep no cycle budget of "
            "their own; give --rounds N to record it"
        )
    return report


def read_ldb(
    path_in: str | Path,
    *,
    label: str | None = None,
    usd_per_token: float = USD_PER_TOKEN,
    rounds: int | None = None,
) -> Iterator[dict[str, Any]]:
    """Yield one task per LDB line (blank lines are skipped); malformed lines raise
    ``LdbFormatError`` naming the line. The whole file is read first: a passing run's round
    budget is read off the file's other runs."""
    yield from read_ldb_report(
        path_in, label=label, usd_per_token=usd_per_token, rounds=rounds
    ).tasks


def check_not_source(path_in: str | Path, path_out: str | Path, field: str = "path_out") -> None:
    """``ConfigError`` when ``path_out`` is ``path_in`` (the same regular file by any name: a
    link, a relative path): the tasks would be written over the recording they were read from.
    One that cannot be read is left to reading or writing, which say so; a terminal or a pipe
    is read and written, never replaced (``same_regular_file``)."""
    if same_regular_file(path_out, path_in):
        raise ConfigError(
            f"{path_out} is the file being imported: writing the tasks there would replace "
            "the recording; name another file",
            field=field,
        )


def import_ldb_report(
    path_in: str | Path,
    path_out: str | Path | IO[str],
    *,
    label: str | None = None,
    usd_per_token: float = USD_PER_TOKEN,
    rounds: int | None = None,
) -> LdbImport:
    """Convert the LDB JSONL file ``path_in`` into a tasks JSONL file (each task masked as
    ``redact`` masks a run's task); returns the summary (its tasks as read).

    ``path_out`` may be a path or an open text stream. The whole input is validated before
    anything is written to a path, so a malformed line leaves no half-written output.
    """
    if isinstance(path_out, str | Path):
        check_not_source(path_in, path_out)
    report = read_ldb_report(path_in, label=label, usd_per_token=usd_per_token, rounds=rounds)
    # Masked as a run masks its task (invariant 9): a key in a recorded prompt or test would
    # otherwise sit in the tasks file until a run was made of it, or for good.
    text = "".join(json.dumps(redact(t), ensure_ascii=False) + "\n" for t in report.tasks)
    if isinstance(path_out, str | Path):
        Path(path_out).parent.mkdir(parents=True, exist_ok=True)  # --out .loopwright/tasks.jsonl
        Path(path_out).write_text(text, encoding="utf-8")
    else:
        path_out.write(text)
    return report


def import_ldb(
    path_in: str | Path,
    path_out: str | Path | IO[str],
    *,
    label: str | None = None,
    usd_per_token: float = USD_PER_TOKEN,
    rounds: int | None = None,
) -> int:
    """``import_ldb_report`` returning the task count."""
    return len(
        import_ldb_report(
            path_in, path_out, label=label, usd_per_token=usd_per_token, rounds=rounds
        ).tasks
    )
