"""polish54: README's first example said it prints `accepted success 2 …`, and the `…` was
``Usage(cost_usd=0.02, tokens=600, seconds=0.00657…)``, a repr with float noise. ``Usage``
prints as a person reads it, and the README says what its example prints: the example is run
(in a scratch folder, a fresh default store) and its line compared, the seconds aside."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import loopwright as lw

ROOT = Path(__file__).resolve().parents[2]


def test_usage_prints_as_a_person_reads_it() -> None:
    u = lw.Usage(cost_usd=0.1 + 0.2, tokens=12345, seconds=0.006571234)
    assert str(u) == "$0.30, 12,345 tokens, 0.01 s"
    assert str(lw.Usage()) == "$0, 0 tokens, 0.00 s"


def test_the_readme_says_what_its_first_example_prints(tmp_path: Path) -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    code = re.search(r"^```python\n(.*?)^```", text, re.S | re.M)
    said = re.search(r"It prints `([^`]+)`", text)
    assert code and said, "README: the first example and what it prints"
    env = {k: v for k, v in os.environ.items() if k != "LOOPWRIGHT_STORE"}
    env["PYTHONPATH"] = str(ROOT / "src")
    r = subprocess.run(
        [sys.executable, "-c", code[1]],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    seconds = re.compile(r"\b\d+\.\d\d s\b")
    printed = r.stdout.strip()
    assert seconds.search(said[1]) and seconds.search(printed), (said[1], printed)
    assert seconds.sub("N s", printed) == seconds.sub("N s", said[1])
