"""``ConfigError``'s two halves, ``field`` and ``message``: what the callers that say the same
refusal under another name or place (a CLI option, a rule's index, a task's line) read, where
they split its text before. The texts they print are pinned here as they were."""

from __future__ import annotations

import contextlib
import io
import pickle
from collections.abc import Callable
from pathlib import Path

import pytest

import loopwright as lw
from loopwright._errors import ConfigError, SpecError
from loopwright._policy import ApprovalPolicy
from loopwright._spec import _model_limits
from loopwright.cli import main
from loopwright.cli._app import as_options
from loopwright.cli._tasks import TaskList, check_tasks
from loopwright.importers.ldb import LdbFormatError


def _named_after() -> ConfigError:
    """An error whose text names its field itself (as ``adapters._endpoint.no_api_key``)."""
    err = ConfigError("needs an API key (api_key): set it")
    err.field = "api_key"
    return err


def test_field_and_message_are_the_halves_of_the_text() -> None:
    e = ConfigError("must be at least 1", field="--keep")
    assert (str(e), e.field, e.message) == (
        "--keep: must be at least 1",
        "--keep",
        "must be at least 1",
    )
    plain = SpecError("no such file")
    assert (str(plain), plain.field, plain.message) == ("no such file", None, "no such file")
    named = _named_after()  # the field set after: the text as written, all of it the message
    assert (str(named), named.field, named.message) == (str(named), "api_key", str(named))


@pytest.mark.parametrize(
    "err",
    [
        ConfigError("must be at least 1", field="--keep"),
        SpecError("must not be negative, got -1", field="contract.budget.max_cycles"),
        ConfigError("no field"),
        _named_after(),
        LdbFormatError("not JSON", path="runs.jsonl", line=3),  # a subclass of other arguments
    ],
    ids=lambda e: type(e).__name__,
)
def test_a_pickled_error_reads_as_it_did(err: ConfigError) -> None:
    """An error crossing processes (a worker's) keeps its text, field and message: made again
    from its message alone, it lost its ``field: `` (and a subclass taking other arguments
    could not be made again at all)."""
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is type(err)
    assert (str(back), back.field, back.message) == (str(err), err.field, err.message)
    assert vars(back) == vars(err)


class _Limited:
    """A model adapter whose endpoint refuses the limits given."""

    def __call__(self, *args: object) -> None:
        return None

    def use_limits(self, **limits: object) -> None:
        raise ConfigError("must be a whole number >= 1, got 0", field="max_concurrency")


def _renamed(field: str, option: str, err: ConfigError) -> Callable[[], None]:
    def call() -> None:
        with as_options(**{field: option}):
            raise err

    return call


def _task_on_line_3() -> None:
    loop = lw.Loop(
        name="x",
        actor=lambda ctx: lw.Proposal(),
        verifiers=[lambda s, p: lw.Verdict(passed=True, score=1.0)],
        contract=lw.Contract(budget=lw.Budget(max_cycles=2)),
    )
    tasks = TaskList("--tasks", Path("t.jsonl"))
    tasks.extend([{}, {"artifacts": "x"}])
    tasks.lines.extend([1, 3])
    check_tasks(loop, tasks, ["k1", "k2"])


@pytest.mark.parametrize(
    ("call", "text", "field"),
    [
        (
            lambda: ApprovalPolicy.from_rules([{"kind": "spend", "action": "bogus"}]),
            "approvals[0].action: must be one of ['allow', 'require', 'deny'], got 'bogus'",
            "approvals[0].action",
        ),
        (
            lambda: _model_limits({"limits": {"max_concurrency": 0}}, [_Limited()]),
            "model.limits.max_concurrency: must be a whole number >= 1, got 0",
            "model.limits.max_concurrency",
        ),
        (
            _renamed("to_cycle", "--to-cycle", ConfigError("must be at least 1", field="to_cycle")),
            "--to-cycle: must be at least 1",
            "--to-cycle",
        ),
        (
            _renamed("api_key", "--api-key", _named_after()),
            "--api-key: needs an API key (api_key): set it",
            "--api-key",
        ),
        (
            _task_on_line_3,
            "task.artifacts: t.jsonl:3: must be a table of {artifact: {part: value}}",
            "task.artifacts",
        ),
    ],
    ids=["rule index", "model.limits", "as_options", "as_options, field named after", "task line"],
)
def test_the_callers_say_it_under_their_name_as_before(
    call: Callable[[], object], text: str, field: str
) -> None:
    with pytest.raises(ConfigError) as got:
        call()
    assert (str(got.value), got.value.field) == (text, field)


def test_a_bad_base_contract_is_named_by_its_option(tmp_path: Path) -> None:
    """``fit-stop --base``: the contract file's refusal, said of ``--base``."""
    (tmp_path / "bad.toml").write_text("[contract.budget]\nmax_cycles = 0\n", encoding="utf-8")
    said = []
    for base in ("missing.toml", "bad.toml"):
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            code = main(["fit-stop", str(tmp_path / "none.jsonl"), "--base", str(tmp_path / base)])
        said.append((code, err.getvalue().replace(str(tmp_path), "D")))
    assert said == [
        (2, "loopwright: error: --base: no contract file at D/missing.toml\n"),
        # (the file and the field named since docs45: "--base: must be at least 1" named neither)
        (
            2,
            "loopwright: error: --base: D/bad.toml: contract.budget.max_cycles: must be at least 1\n",
        ),
    ]
