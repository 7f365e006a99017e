"""What a long run's views cost, in CPU seconds, for two source trees side by side, and whether
they print the same bytes.

One run per size (``outside_probe_core.py``'s rich loop: 11 parts, a plan, a finding a cycle),
then each view as a fresh process, once with ``--base`` and once with ``--new`` on the PYTHONPATH,
ABBA (base-new, new-base, ...): ``loopwright show --json``, ``show`` (text, 200 columns),
``trace``, ``trace --format otlp-json``, the dashboard's ``GET /api/runs/{id}`` and its run
page ``GET /runs/{id}`` (through ``fastapi.testclient``, in process: no server). Per view: the child's CPU seconds (user + system,
imports included), the median over rounds, and whether the two trees' outputs are byte-identical
(every round's; a difference is printed and exits 1).

    .venv/bin/python bench/view_costs.py --base /tmp/base/src --new src --sizes 300,3000
"""

from __future__ import annotations

import argparse
import hashlib
import os
import resource
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
API = """
import sys
from fastapi.testclient import TestClient
from loopwright.web import create_app
app = create_app(sys.argv[1], token="view-costs-" + "t" * 32)
r = TestClient(app, base_url="http://127.0.0.1").get("/api/runs/" + sys.argv[2])
assert r.status_code == 200, r.text
sys.stdout.buffer.write(r.content)
"""
PAGE = API.replace('.get("/api/runs/"', '.get("/runs/"')  # the run's HTML page
VIEWS = {
    "show --json": ["-m", "loopwright", "show", "{rid}", "--json"],
    "show (text)": ["-m", "loopwright", "show", "{rid}"],
    "trace": ["-m", "loopwright", "trace", "{rid}"],
    "trace otlp-json": ["-m", "loopwright", "trace", "{rid}", "--format", "otlp-json"],
    "/api/runs/{id}": ["-c", API, "{db}", "{rid}"],
    "/runs/{id}": ["-c", PAGE, "{db}", "{rid}"],
}


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _view(src: str, args: list[str], db: str, rid: str) -> tuple[float, str]:
    env = dict(os.environ, PYTHONPATH=os.path.abspath(src), LOOPWRIGHT_STORE=db, COLUMNS="200")
    argv = [sys.executable, *(a.format(db=db, rid=rid) for a in args)]
    c = _cpu()
    p = subprocess.run(argv, env=env, capture_output=True, check=False)
    spent = _cpu() - c
    if p.returncode:
        sys.exit(f"{' '.join(argv[:6])}: exit {p.returncode}: {p.stderr[-800:].decode()}")
    return spent, hashlib.sha256(p.stdout).hexdigest()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", required=True, help="the src directory before")
    ap.add_argument("--new", required=True, help="the src directory after")
    ap.add_argument("--sizes", default="300,3000")
    ap.add_argument("--rounds", type=int, default=4, help="ABBA rounds (even)")
    ap.add_argument("--views", default=",".join(VIEWS), help="which views, comma-separated")
    ap.add_argument("--dir", default=None)
    a = ap.parse_args()
    d = a.dir or tempfile.mkdtemp(prefix="view_costs_")
    same = True
    print("| N | view | base CPU s | new CPU s | new/base | byte-identical |")
    print("|---|---|---:|---:|---:|---|")
    for n in (int(x) for x in a.sizes.split(",")):
        db = os.path.join(d, f"views_{n}.db")
        if not os.path.exists(db):
            env = dict(os.environ, PYTHONPATH=os.path.abspath(a.new))
            probe = os.path.join(HERE, "outside_probe_core.py")
            argv = [sys.executable, probe, "--child", "lw", "rich", db, "views", str(n), "5", "50"]
            subprocess.run(argv, env=env, check=True, capture_output=True)
        rid = subprocess.run(
            [sys.executable, "-c", "import sys;from loopwright.store import open_store as o\n"
             "with o(sys.argv[1]) as s: print(s.list_runs(limit=1)[0].run_id)", db],
            env=dict(os.environ, PYTHONPATH=os.path.abspath(a.new)),
            capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
        for name in a.views.split(","):
            cpu: dict[str, list[float]] = {"base": [], "new": []}
            digests: set[str] = set()
            for r in range(a.rounds):
                for side in ("base", "new") if r % 2 == 0 else ("new", "base"):
                    spent, digest = _view(getattr(a, side), VIEWS[name], db, rid)
                    cpu[side].append(spent)
                    digests.add(digest)
            b, w = statistics.median(cpu["base"]), statistics.median(cpu["new"])
            ok = len(digests) == 1
            same = same and ok
            print(f"| {n:,} | `{name}` | {b:.2f} | {w:.2f} | {w / b:.2f} | {ok} |", flush=True)
    sys.exit(0 if same else 1)


if __name__ == "__main__":
    main()
