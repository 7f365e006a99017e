"""`loopwright run examples/comic_pages/loop.toml` parks on the canon change (exit 4); approving
with --resume finishes the three pages (exit 0) and exports them once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .conftest import cli

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "examples" / "comic_pages" / "loop.toml"


def test_comic_run_parks_then_approve_resume_finishes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "exports"
    monkeypatch.setenv("COMIC_EXPORT_DIR", str(out))
    store = tmp_path / "lw.db"
    r = cli("run", str(SPEC), cwd=tmp_path, store=store)
    assert r.returncode == 4, r.stdout + r.stderr
    pending = cli("approvals", "--json", cwd=tmp_path, store=store)
    assert pending.returncode == 0, pending.stderr
    assert "canon_change" in pending.stdout and "page 1, panel 2" in pending.stdout
    key = "lantern-harbor/pages-3-5"
    a = cli("approve", key, "--by", "creator", "--resume", cwd=tmp_path, store=store)
    assert a.returncode == 0, a.stdout + a.stderr
    shown = cli("show", key, "--json", cwd=tmp_path, store=store)
    run = json.loads(shown.stdout)["run"]
    assert run["status"] == "accepted"
    folder = out / "lantern-harbor"
    for n in (3, 4, 5):
        assert (folder / f"page-{n}.svg").is_file()
    assert (folder / "lantern-harbor.html").is_file()
    for n in (3, 4, 5):
        assert (folder / f"page-{n}.png").read_bytes()[:4] == b"\x89PNG"
    assert (folder / "lantern-harbor.pdf").read_bytes()[:5] == b"%PDF-"
    again = cli("resume", key, cwd=tmp_path, store=store)
    assert again.returncode in (0, 2), again.stderr
    assert len((folder / "publish.log").read_text().splitlines()) == 1


def test_comic_model_mode_from_the_command_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`comic.py --model NAME --base-url URL` against the loopback image server: parks on the
    canon change, then the same command line with `approve … --resume` finishes and exports."""
    import os
    import subprocess
    import sys

    from support.fake_images import FakeImages

    monkeypatch.setenv("COMIC_EXPORT_DIR", str(tmp_path / "exports"))
    monkeypatch.delenv("COMIC_IMAGE_MODEL", raising=False)
    store = tmp_path / "model.db"
    script = SPEC.with_name("comic.py")
    # model.toml without a model: one line saying what is missing, nothing run
    bare = cli("run", str(SPEC.with_name("model.toml")), cwd=tmp_path, store=store)
    assert bare.returncode == 2 and "COMIC_IMAGE_MODEL" in bare.stderr, bare.stderr
    assert len(bare.stderr.strip().splitlines()) == 1 and "Traceback" not in bare.stderr
    with FakeImages(miscolour={"#1f4e9c": "#b71c1c"}) as fake:
        model = [
            *("--model", "fake-image-1", "--base-url", fake.base_url),
            *("--size", "400x300", "--price", "0.04", "--store", str(store)),
        ]

        def comic(*args: str) -> subprocess.CompletedProcess[str]:
            env = {k: v for k, v in os.environ.items() if not k.startswith("COMIC_IMAGE_")}
            return subprocess.run(
                [sys.executable, str(script), *model, *args],
                cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False,
            )  # fmt: skip

        first = comic()
        assert first.returncode == 4, first.stdout + first.stderr
        done = comic("approve", "lantern-harbor/pages-3-5", "--by", "creator", "--resume")
        assert done.returncode == 0, done.stdout + done.stderr
        assert "accepted (success)" in done.stdout
        assert len([q for q in fake.requests if q.mask is not None]) == 1  # the repair
        assert len([q for q in fake.requests if q.mask is None]) == 9  # one per panel
    shown = cli("show", "lantern-harbor/pages-3-5", "--json", cwd=tmp_path, store=store)
    run = json.loads(shown.stdout)["run"]
    assert run["status"] == "accepted" and run["cost_usd"] == pytest.approx(0.40)
    folder = tmp_path / "exports" / "lantern-harbor"
    for n in (3, 4, 5):
        assert (folder / f"page-{n}.png").read_bytes()[:4] == b"\x89PNG"
        assert "data:image/png;base64," in (folder / f"page-{n}.svg").read_text()
