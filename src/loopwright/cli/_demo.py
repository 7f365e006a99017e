"""`loopwright demo`: the invoice-exception workload, offline, with a summary and next steps."""

from __future__ import annotations

import shlex
import time
from pathlib import Path

from .._errors import ConfigError
from .._spec import load_spec
from ..store import open_store, resolve_store_url
from ._tasks import load_tasks, task_key

__all__ = ["demo_spec", "run_demo"]


def demo_spec() -> Path:
    """The demo's spec: shipped inside the wheel, or in the source checkout."""
    here = Path(__file__).resolve().parent.parent
    for base in (here / "_examples", here.parent.parent / "examples"):
        spec = base / "invoice_exceptions" / "loop.toml"
        if spec.is_file():
            return spec
    raise ConfigError("the demo workload (examples/invoice_exceptions) is not installed")


def command_word() -> str:
    """How to type ``loopwright`` here: the word itself when PATH finds this program, else
    the path it was started by. `make demo` runs ``.venv/bin/loopwright`` without activating
    the venv, and its next steps, typed as printed, answered "loopwright: command not found"
    (newuser52). ``python -m loopwright`` and an embedding program get the word."""
    import os
    import shutil
    import sys

    exe = sys.argv[0] if sys.argv else ""
    if os.path.basename(exe) != "loopwright" or not os.path.isfile(exe):
        return "loopwright"
    found = shutil.which("loopwright")
    try:
        if found is not None and os.path.samefile(found, exe):
            return "loopwright"
    except OSError:
        pass
    near = os.path.relpath(exe)
    if near.startswith(".."):
        return shlex.quote(os.path.abspath(exe))
    # (in its own folder: ``./loopwright``, the bare word is looked up on PATH)
    return shlex.quote(near if os.sep in near else os.path.join(os.curdir, near))


def run_demo(store: str | None, concurrency: int, token: str | None = None) -> None:
    """Run the demo's tasks; in a store with users they are started by ``token``'s user (else
    ``$LOOPWRIGHT_TOKEN``'s), who must be allowed to operate (``starter``)."""
    from rich.markup import escape

    from .._hints import FROM_ENV, SET_IT
    from ._app import execute
    from ._options import me_flag, store_flag
    from ._say import console, say
    from ._stores import creatable_store

    store = creatable_store(store)  # (a folder that does not exist is a typo's, as for `run`)

    spec = demo_spec()
    loop = load_spec(spec)
    tasks = load_tasks(None, None, loop.options.get("tasks"))
    batch = time.strftime("%m%d-%H%M%S")
    keys = [f"demo-{batch}/{t.get('id') or task_key(loop.name, t, i)}" for i, t in enumerate(tasks)]
    from ._people_cmd import starter

    with open_store(resolve_store_url(store)) as st:
        # Who starts the runs, first: in a store with users, a missing or wrong token is
        # refused before the banner announces a workload that is not going to run.
        who = starter(st, token, target=f"loop {loop.name}", tasks=len(tasks))
    out = console()
    say(
        f"[bold]loopwright demo[/]: {len(tasks)} invoice exceptions, offline actor, "
        f"contract from {escape(spec.name)} (success ≥ 0.98 with evidence; no progress after 2 "
        "cycles; ≤ 6 cycles, $3, 90 s; pause on payment change, conflicting evidence or "
        "policy ambiguity)\n",
        out=out,
        markup=True,
    )
    results = execute(
        loop,
        tasks,
        keys,
        store,
        concurrency,
        quiet=False,
        title="invoice exceptions",
        token=token,
        who=who,
    )
    parked = [r for r in results if r.status == "awaiting_approval"]
    with open_store(resolve_store_url(store)) as st:
        me = me_flag(st)
    stopped = [r for r in results if r.status not in ("accepted", "awaiting_approval")]
    # The commands as they work from here: with --store when the demo was given one (the
    # shared rule: ``store`` is the resolved URL by now, and named the default store or
    # $LOOPWRIGHT_STORE's too; a URL with a password is named by the variable, hints55).
    where = store_flag()
    steps: list[tuple[str, str]] = [
        ("loopwright runs", "every run, its stop reason and spend"),
        ("loopwright metrics", "cost per accepted outcome and the other metrics"),
    ]
    if stopped:
        steps.append((f"loopwright show {stopped[0].run_id[:12]}", "why it stopped"))
    if parked:
        rid = parked[0].run_id[:12]
        steps += [
            ("loopwright approvals", "what is waiting for a person"),
            # in a store with users a decision is a token's (a typed name is refused there);
            # without, ``--by you`` recorded the decision as made by "you"
            (f"loopwright approve {rid}{me}", ""),
            (f"loopwright resume {rid}", ""),
            (f"loopwright trace {rid} --format otlp-json", "its OpenTelemetry spans"),
        ]
    word = command_word()
    steps = [(word + cmd.removeprefix("loopwright"), what) for cmd, what in steps]
    out.print("\n[bold]Try next[/]")
    width = max(len(cmd + where) for cmd, _ in steps) + 2
    for cmd, what in steps:
        say(f"  {cmd + where:<{width}}{what}".rstrip(), out=out)
    if where == FROM_ENV:  # (typed without it set, `--store ""` is refused in one line)
        say(f"  (the store's URL holds a password, never printed: {SET_IT})", out=out)
