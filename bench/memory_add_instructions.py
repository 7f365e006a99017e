"""Instructions a feedback-memory write: ``FeedbackMemory.add`` (a person's correction) or
``reflect`` (a reflector's note, ``keep=3``), N times on a fresh SQLite store. Count two N
under callgrind and subtract (bench/README.md, "Instructions, not seconds")::

    for n in 100 1100; do PYTHONHASHSEED=0 valgrind --tool=callgrind \\
      --callgrind-out-file=/dev/null .venv/bin/python bench/memory_add_instructions.py $n add \\
      2>&1 | grep refs; done    # (Ir(1100) - Ir(100)) / 1000; ``reflect`` for the other
"""

from __future__ import annotations

import gc
import sys
import tempfile

import loopwright as lw
from loopwright._memory import FeedbackMemory

NOTE = (
    "The verifier said the summary misses the second table; next time read the whole "
    "input file before writing, and keep the section names the task gave. "
) * 3


def main(n: int, what: str) -> None:
    rt = lw.Runtime(f"sqlite:///{tempfile.mkdtemp()}/x.db?durability=process")
    mem = FeedbackMemory(rt.store)
    gc.freeze()
    for i in range(n):
        source = {"run_id": "r" * 32, "cycle": i}
        if what == "add":
            mem.add(
                scope="task",
                scope_key="k",
                signal="correction",
                text=f"{i} {NOTE}",
                source=source,
                by="ann",
            )
        else:
            mem.reflect(task_key="k", text=f"{i} {NOTE}", source=source, keep=3)
    rt.close()


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2])
