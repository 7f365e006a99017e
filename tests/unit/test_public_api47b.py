"""The Python API's small gaps an outside probe found (api47b): every type a public method
returns is importable from ``loopwright``; a ``RunResult``'s repr is short; a string given as a
question's choices and a non-exception given to ``classify`` are refused; the openai SDK is
imported when an adapter is made, not inside its first (timed) call."""

from __future__ import annotations

import inspect
import subprocess
import sys
import typing
from pathlib import Path

import pytest

import loopwright as lw
from loopwright.adapters import ChatActor, MalformedReplyError

SRC = str(Path(lw.__file__).resolve().parents[1])


def _returned(cls: type) -> set[type]:
    """The classes named in the return annotations of ``cls``'s public methods and properties
    (``tuple[RunRecord, bool]`` gives ``RunRecord`` and ``bool``)."""
    found: set[type] = set()
    for name, member in inspect.getmembers(cls):
        fn = member.fget if isinstance(member, property) else member
        if name.startswith("_") or not callable(fn):
            continue
        stack = [typing.get_type_hints(fn).get("return")]
        while stack:
            t = stack.pop()
            if isinstance(t, type) and not typing.get_args(t):
                found.add(t)
            stack.extend(typing.get_args(t))
    return found


@pytest.mark.parametrize("cls", [lw.Runtime, lw.Worker, lw.FeedbackMemory])
def test_every_type_a_public_method_returns_is_importable_from_loopwright(cls: type) -> None:
    # Runtime.fork, approve, create... returned RunRecord and Approval, importable only from
    # loopwright.store
    own = {t for t in _returned(cls) if t.__module__.startswith("loopwright")}
    assert own  # (the annotations were read)
    for t in own:
        assert getattr(lw, t.__name__) is t, t
        assert t.__name__ in lw.__all__


def test_run_record_and_approval_are_exported() -> None:
    from loopwright.store import Approval, RunRecord

    assert lw.RunRecord is RunRecord and lw.Approval is Approval
    assert {"Approval", "RunRecord"} <= set(dir(lw))


def test_a_run_results_repr_is_short_and_the_whole_stays_in_its_attributes() -> None:
    trace = "Traceback (most recent call last):\n" + "x" * 50_000
    state = lw.TaskState(task={"goal": "g" * 10_000})
    r = lw.RunResult(
        run_id="r-1",
        task_key="inv-7",
        status="escalated",
        stop_reason="needs_human",
        cycles=3,
        best_score=0.5,
        spent=lw.Usage(cost_usd=0.25, tokens=10, seconds=1.5),
        packet={"error": trace},
        state=state,
        held_out_passed=False,
    )
    shown = repr(r)
    assert len(shown) < 400, shown
    for said in ("r-1", "inv-7", "escalated", "needs_human", "cycles=3", "0.25", "False"):
        assert said in shown
    assert "Traceback" not in shown and "ggg" not in shown
    assert r.packet == {"error": trace} and r.state is state


def test_a_string_for_choices_is_refused_not_split_or_taken_as_one() -> None:
    for given in ("ab", "PO-1"):
        with pytest.raises(lw.ConfigError, match="list of one") as err:
            lw.Question("which?", choices=given)  # type: ignore[arg-type]
        assert err.value.field == "question.choices"
    assert lw.Question("which?", choices=["ab"]).choices == ("ab",)


def test_a_models_question_with_a_string_for_choices_is_a_malformed_reply() -> None:
    # (the adapter split it: "ab" was asked as the choices "a" and "b")
    with pytest.raises(MalformedReplyError, match="choices"):
        ChatActor.proposal({"edits": [], "question": {"text": "which?", "choices": "ab"}})
    p = ChatActor.proposal({"edits": [], "question": {"text": "which?", "choices": ["ab"]}})
    assert p.question is not None and p.question.choices == ("ab",)


@pytest.mark.parametrize("given", ["x", 429, None, ValueError])
def test_classify_refuses_what_is_not_an_exception(given: object) -> None:
    # "x" was classed permanent, whatever it said
    with pytest.raises(TypeError, match="exc must be an exception"):
        lw.classify(given)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="exc must be an exception"):
        lw.RetryPolicy().classify(given)  # type: ignore[arg-type]
    assert lw.classify(TimeoutError()) == "transient"


_AT_CONSTRUCTION = """
import sys
from loopwright.adapters import ChatActor, ChatReviewer, ImageModel
sdk = ("openai", "loopwright.adapters._deadline")
assert not any(m in sys.modules for m in sdk), "imported before any adapter is made"
{adapter}("m", base_url="http://127.0.0.1:9/v1", api_key="k"{extra})
assert all(m in sys.modules for m in sdk), "not imported when the adapter is made"
print("ok")
"""


@pytest.mark.parametrize(
    ("adapter", "extra"),
    [("ChatActor", ""), ("ChatReviewer", ", rubric='r'"), ("ImageModel", "")],
)
def test_the_openai_sdk_is_imported_when_an_adapter_is_made_not_in_its_first_call(
    adapter: str, extra: str
) -> None:
    # Imported at the first call, the SDK's second or so was charged to the run's seconds and
    # its max_seconds budget. A fresh interpreter: what is in sys.modules is this code's doing.
    done = subprocess.run(
        [sys.executable, "-c", _AT_CONSTRUCTION.format(adapter=adapter, extra=extra)],
        env={"PYTHONPATH": SRC, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


def test_dir_of_the_package_is_its_public_api() -> None:
    """(polish52) ``dir(loopwright)`` listed the names its own code imports (``Any``,
    ``TYPE_CHECKING``, ``annotations``) and its private tables beside the API; a REPL's
    completion offered them. It is ``__all__`` and the module's dunders, also once names were
    used (cached in the module) and submodules imported."""
    import loopwright.store  # noqa: F401  (a submodule: an attribute of the package once loaded)

    assert lw.Runtime is not None and lw.Verdict is not None  # (cached on first use)
    shown = dir(lw)
    assert shown == sorted(shown)
    assert {n for n in shown if not n.startswith("__")} == set(lw.__all__) - {"__version__"}
    assert {"Any", "TYPE_CHECKING", "annotations", "_LAZY", "_LAZY_FROM"}.isdisjoint(shown)
    assert {"__version__", "__name__", "__doc__"} <= set(shown)
