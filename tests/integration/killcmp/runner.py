"""Run or resume the kill-comparison loop (``kc.py``): ``runner.py STORE_URL TASK_KEY``.

Environment: ``KC_DIR`` (the workload's files), ``KC_K`` (``snapshot_every``, default 50),
``KC_STEP`` (``run`` or ``resume``), ``KC_SPEC`` (load the loop from this spec, ``kc.toml``,
not ``kc.build_loop``), ``KC_CRASH=PHASE:N`` (SIGKILL this process the N-th time
it reaches phase ``PHASE``: ``Runtime._on_phase``, the hook every kill harness uses)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import loopwright as lw

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "crashpoints"))  # killpoint
sys.path.insert(0, str(Path(__file__).resolve().parent))

import kc
from killpoint import kill_point, phase_hook


def main(argv: list[str]) -> int:
    url, key = argv
    on_phase = phase_hook(Path(os.environ["KC_DIR"]) / "phases.log", kill_point("KC_CRASH"))
    spec = os.environ.get("KC_SPEC")
    loop = lw.load_spec(spec) if spec else kc.build_loop()
    with lw.Runtime(url, snapshot_every=int(os.environ.get("KC_K", "50"))) as rt:
        rt._on_phase = on_phase
        if os.environ.get("KC_STEP", "run") == "run":
            result = rt.run_sync(loop, kc.TASK, task_key=key)
        else:
            result = rt.resume_sync(rt.store.get_run(key).run_id, loop)
    print(json.dumps({"status": result.status, "cycles": result.cycles}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
