"""Run (or resume) one crash/resume task in a subprocess: ``runner.py DB SPEC TASK.json KEY``.

Prints ``ready`` once imports and the spec are loaded (the parent starts its kill timer then),
and the run's result as JSON when the run returns.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import loopwright as lw


def main(argv: list[str]) -> int:
    db, spec, task_path, key = argv
    loop = lw.load_spec(spec)
    task = json.loads(Path(task_path).read_text())
    print("ready", flush=True)
    with lw.Runtime(db) as rt:
        result = rt.run_sync(loop, task, task_key=key)
    print(json.dumps(result.to_dict(), default=str), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
