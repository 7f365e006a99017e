"""What a refused command names is what the person typed (helper fix/cli44): the CLI's option
or argument (``--to-cycle``, ``--key``, ``PART``), never the Python API's parameter
(``to_cycle:``, ``task_key:``, ``part:``) the command is thin over. Real subprocesses, as in
``test_bad_inputs``."""

from __future__ import annotations

import json
from pathlib import Path

from .test_bad_inputs import lw, refused
from .test_cli_mistakes import accepted  # noqa: F401  (a fixture)

PYTHON_NAMES = ("to_cycle", "at_cycle", "task_key", "part:", "approval_id", "request:")


def _named_as_typed(line: str, option: str) -> None:
    assert line.startswith(f"loopwright: error: {option}: "), line
    for name in PYTHON_NAMES:
        assert name not in line, (name, line)


def _runs(project: Path, store: Path) -> list[tuple[str, str, int]]:
    runs = json.loads(lw("runs", "--json", cwd=project, store=store).stdout)
    return [(r["run_id"], r["status"], r["cycle"]) for r in runs]


def test_a_cycle_the_run_has_not_names_the_option(
    accepted: tuple[Path, str],  # noqa: F811
    project: Path,
) -> None:
    store, run_id = accepted
    before = _runs(project, store)
    r = lw("rollback", run_id, "--to-cycle", "99", "--by", "ana", cwd=project, store=store)
    _named_as_typed(refused(r, "no completed checkpoint for cycle 99"), "--to-cycle")
    r = lw("fork", run_id, "--at-cycle", "99", "--by", "ana", cwd=project, store=store)
    _named_as_typed(refused(r, "no completed checkpoint for cycle 99"), "--at-cycle")
    assert _runs(project, store) == before  # (the refusals are audited, as refusals)


def test_a_taken_key_and_an_unknown_part_name_the_option(
    accepted: tuple[Path, str],  # noqa: F811
    project: Path,
) -> None:
    store, run_id = accepted
    [run] = json.loads(lw("runs", "--json", cwd=project, store=store).stdout)
    before = _runs(project, store)
    r = lw("fork", run_id, "--at-cycle", "0", "--key", run["task_key"], cwd=project, store=store)
    _named_as_typed(refused(r, "is taken by run"), "--key")
    r = lw("edit", run_id, "doc/nope", "--value", "1", "--by", "ana", cwd=project, store=store)
    _named_as_typed(refused(r, "no part 'doc/nope'"), "PART")
    assert _runs(project, store) == before  # (the refusals are audited, as refusals)
