"""What a refused command names is what the person typed (helper fix/cli44): the CLI's option
or argument (``--to-cycle``, ``--key``, ``PART``), never the Python API's parameter
(``to_cycle:``, ``task_key:``, ``part:``) the command is thin over. Real subprocesses, as in
``test_bad_inputs``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

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


def test_a_task_key_that_starts_another_runs_id_is_refused(project: Path) -> None:
    """RUN is a run id, a prefix of one, or a task key: "2c8f01ab" that is one run's task key and
    the start of another run's id named the keyed run, silently. Refused, both named."""
    import loopwright as lwp

    store = project / "s.db"
    loop = lwp.Loop(
        name="refs",
        actor=lambda ctx: lwp.Proposal.edit("doc", {"a": 1}),
        verifiers=[lwp.Check(fn=lambda state, proposal: lwp.Verdict(passed=True))],
        contract=lwp.Contract(budget=lwp.Budget(max_cycles=1)),
    )
    with lwp.Runtime(str(store)) as rt:
        first = rt.run_sync(loop, {"artifacts": {"doc": {"a": 0}}}, task_key="first").run_id
        key = first[:8]
        keyed = rt.run_sync(loop, {"artifacts": {"doc": {"a": 0}}}, task_key=key).run_id
    for cmd in ("show", "trace"):
        line = refused(lw(cmd, key, cwd=project, store=store), "ambiguous", "whole run id")
        assert first in line and keyed in line, line
    for whole, task_key in ((first, "first"), (keyed, key)):
        r = lw("show", whole, "--json", cwd=project, store=store)
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["run"]["task_key"] == task_key


REPEATABLE = [
    ("users", "add"),
    ("trace",),
    ("export", "eval-cases"),
    ("export", "preference-pairs"),
    ("memory", "add"),
]


def test_help_names_values_not_python_types(capsys: pytest.CaptureFixture[str]) -> None:
    """A repeatable option's value was shown as Python's type (`--role <list[str]>`,
    `--header <list[str]>`, `--run <list[str]>`); `memory add` took `{text}`, lower case
    beside every other command's `RUN`, `SPEC`, `NAME`."""
    from loopwright.cli import main

    for args in REPEATABLE:
        assert main([*args, "--help"]) == 0
        out = capsys.readouterr().out
        options = [line for line in out.splitlines() if line.lstrip().startswith("--")]
        assert options, out
        for line in options:
            assert "list[" not in line, line
        assert "{text}" not in out, out


def test_a_blank_by_is_refused_not_the_os_user(
    accepted: tuple[Path, str],  # noqa: F811
    project: Path,
) -> None:
    """`--by ""` (a script's `--by "$APPROVER"` with the variable unset) was taken as no --by:
    the rollback, decision or cancel was recorded under the OS user's name."""
    store, run_id = accepted
    before = _runs(project, store)
    for args in (
        ("rollback", run_id, "--to-cycle", "0"),
        ("fork", run_id, "--at-cycle", "0"),
        ("cancel", run_id),
        ("approve", run_id),
        ("edit", run_id, "doc/a", "--value", "7"),
        ("memory", "add", "a note", "--scope", "project", "--key", "tests"),
    ):
        for blank in ("", "  "):
            line = refused(lw(*args, "--by", blank, cwd=project, store=store), "--by", "blank")
            assert line.startswith("loopwright: error: --by: "), line
    assert _runs(project, store) == before
    r = lw("audit", "--jsonl", cwd=project, store=store)
    assert r.returncode == 0 and r.stdout == "", r.stdout  # nothing was attempted


CHOICES = [
    (("runs", "--status", "bogus"), "--status", "awaiting_approval"),
    (("metrics", "--status", "bogus"), "--status", "awaiting_approval"),
    (("memory", "list", "--status", "bogus"), "--status", "candidate"),
    (("memory", "add", "x", "--scope", "bogus", "--key", "k"), "--scope", "project"),
    (("memory", "add", "x", "--scope", "task", "--signal", "bogus"), "--signal", "correction"),
    (("trace", "r1", "--format", "bogus"), "--format", "jsonl, otlp-json"),
    (("trace", "r1", "--encoding", "bogus"), "--encoding", "json, protobuf"),
    (("export", "preference-pairs", "--match", "bogus"), "--match", "state, hindsight, both"),
    (("import", "bogus", "x.json", "--out", "t.jsonl"), "KIND", "ldb"),
    (("fit-stop", "store", "--optimise", "bogus"), "--optimise", "spend, attempts, time"),
]


@pytest.mark.parametrize(("args", "option", "listed"), CHOICES)
def test_a_value_outside_a_set_is_refused_in_one_wording(
    args: tuple[str, ...],
    option: str,
    listed: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`runs --status` said "use one of:", `metrics --status` "one of", `trace --format`
    "use jsonl or otlp-json", `import` "supported: ldb", `memory` "must be one of ... (got
    ...)": one wording now, the option, the choices and what was given."""
    from loopwright.cli import main
    from loopwright.store import open_store

    store = tmp_path / "s.db"
    open_store(str(store)).close()
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("LOOPWRIGHT_TOKEN", raising=False)
    store_opt = () if args[0] == "import" else ("--store", str(store))  # import has none
    assert main([*args, *store_opt]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"loopwright: error: {option}: must be one of "), line
    assert line.endswith(" (got 'bogus')") and listed in line, line
