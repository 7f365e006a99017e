"""CPU a SIGKILL trial's child costs before it does anything: N children of a script that
imports what the kill runners import (``loopwright.Runtime``, ``Loop``) and exits, started as
subprocesses and forked by ``tests/forkserver.py``; CPU seconds (user + sys of the children,
the server included, reaped) per child.

    PYTHONPATH=src python bench/child_start.py 10 40
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from forkserver import ForkServer

SCRIPT = "import loopwright as lw\nlw.Runtime, lw.Loop\nprint('ok')\n"


def _children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def main(sizes: list[int]) -> None:
    script = Path(tempfile.mkdtemp()) / "child.py"
    script.write_text(SCRIPT)
    env = dict(os.environ)
    print(f"{'children':>8} {'subprocess s/child':>19} {'forked s/child':>15} {'ratio':>6}")
    for n in sizes:
        before = _children_cpu()
        for _ in range(n):
            p = subprocess.run(
                [sys.executable, str(script)], check=False, capture_output=True, text=True
            )
            assert p.returncode == 0 and p.stdout == "ok\n", p.stderr
        spawned = (_children_cpu() - before) / n
        before = _children_cpu()
        server = ForkServer()  # its start and imports are counted in
        for _ in range(n):
            f = server.popen([sys.executable, script], env)
            out, err = f.communicate()
            assert f.returncode == 0 and out == "ok\n", err
        server.close()
        forked = (_children_cpu() - before) / n
        print(f"{n:>8} {spawned:>19.4f} {forked:>15.4f} {forked / spawned:>6.2f}")


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [10, 40])
