"""The registry of secret values (``register_secret``) is the process's own: what a process
masks must depend on the loop it built, not on what it happened to do before. A process that
resumes a run (a worker, a resume after a kill) builds the loop again, and so registers what
the process that began the run had registered, before the first proposal is taken in; else
the same proposal is masked in one process and not in the other, and its digest (the
duplicate check across processes: ``TaskState.rejected``) and its stored value differ.

An adapter's URL credentials (``user:password@``, ``?api-key=``) were registered only when its
first client was built, at its first call: a process that had called the model masked them,
one that resumed the run had not called it yet when its first proposal was taken in."""

from __future__ import annotations

import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from doc_loop import TASK
from support.crash import Crash, phase_hook

import loopwright as lw
from loopwright import _redact
from loopwright._redact import redact_text
from loopwright.adapters import ChatReviewer, ImageModel
from loopwright.web._notify import Notifier, NotifyConfig

KEY = "Hw4Tn8Qc2Zr6Lp0Vx3Mb7Kd5Js9Fg1Ay"  # the API key
PW = "Pr0xyPassw0rdQ7v2"  # the password of the endpoint's URL (a proxy's)
QK = "Qk5Ua3Xn8Rb1Wm6Te4Yc"  # a key given in the URL's query (Azure's ?api-key=)
URL = f"http://bob:{PW}@127.0.0.1:9/v1?api-version=1&api-key={QK}"


def make_loop(called: bool = False) -> lw.Loop:
    """The loop each process builds: a reviewer model (built; ``called``: its client made, as
    at its first call) and an actor whose edit quotes the proxy's password (a model echoing
    what it was sent), rejected every cycle."""
    reviewer = ChatReviewer(model="m", base_url=URL, api_key=KEY, rubric="r")
    if called:
        reviewer._openai()  # what its first call does first (no request is sent)
    return lw.Loop(
        name="echo",
        actor=lambda ctx: lw.Proposal.edit("doc", {"a": f"proxy {PW}"}),
        verifiers=[lw.Check(fn=lambda s, p: lw.Verdict(passed=False, score=0.5), name="no")],
        contract=lw.Contract(budget=lw.Budget(max_cycles=2)),
    )


@pytest.fixture
def fresh_registry() -> None:
    """Nothing registered: the process as it starts (``reset`` empties the pieces' index
    with the values)."""
    _redact.reset()


def test_an_adapter_registers_its_urls_credentials_when_built(fresh_registry: None) -> None:
    said = f"echo {PW} and {QK}"
    for build in (
        lambda: ChatReviewer(model="m", base_url=URL, api_key=KEY, rubric="r"),
        lambda: ImageModel(model="m", base_url=URL, api_key=KEY),
    ):
        model = build()
        assert redact_text(said) == "echo *** and ***"
        # a worker process unpickles it: registered there as it is built
        _redact.reset()
        assert redact_text(said) == said
        pickle.loads(pickle.dumps(model))
        assert redact_text(said) == "echo *** and ***"
        _redact.reset()


def test_a_notifier_registers_its_urls_credentials_and_signing_secret(
    fresh_registry: None, tmp_path: Path
) -> None:
    secret = "Sg9Hm2Kd7Lq4Xw1Z"
    with lw.Runtime(tmp_path / "s.db") as rt:
        Notifier(rt.store, NotifyConfig.of([f"https://hook:{PW}@chat.example/x"], secret=secret))
    assert redact_text(f"{PW} {secret}") == "*** ***"


def test_a_run_resumed_in_another_process_masks_and_digests_as_the_first(
    tmp_path: Path,
) -> None:
    # Process 1 called the model before its first proposal, then died after cycle 1's
    # checkpoint (the run's second: the first is written when it is created); process 2
    # builds the same loop and resumes at cycle 2, before calling the model.
    db = tmp_path / "s.db"
    with lw.Runtime(db) as rt:
        rt._on_phase = phase_hook(("after_checkpoint", 2))
        with pytest.raises(Crash):
            rt.run_sync(make_loop(called=True), TASK, task_key="k")
    script = textwrap.dedent(
        f"""
        import sys
        sys.path[:0] = {[str(Path(__file__).parent), str(Path(__file__).parents[1])]!r}
        import loopwright as lw
        from test_registry_per_process import TASK, make_loop
        with lw.Runtime({str(db)!r}) as rt:
            assert rt.run_sync(make_loop(), TASK, task_key="k").cycles == 2
        """
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120)
    with lw.Runtime(db) as rt:
        rec = rt.store.get_run("k")
        got = [
            (ck.record["digest"], ck.record["duplicate"])
            for ck in rt.store.checkpoints(rec.run_id)
            if ck.record and "proposal" in ck.record
        ]
    # the same proposal, masked alike: one digest, the second a repeat of the first
    assert [dup for _, dup in got] == [False, True]
    assert got[0][0] == got[1][0]
    raw = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith("s.db"))
    assert PW.encode() not in raw
