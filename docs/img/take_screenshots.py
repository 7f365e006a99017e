"""Take the dashboard screenshots in docs/img/ from demo runs (``make screenshots``).

Runs ``loopwright demo`` into a fresh store, adds a run parked on a picture change (a comic
panel recoloured, SVG and PNG, with a payment to approve), serves them with ``loopwright ui``,
reruns a stopped demo run with a changed contract through the API, and photographs each page
with Playwright and Debian's Chromium (/usr/bin/chromium):

    runs.png         the runs list            run-detail.png   a run's page
    inbox.png        approvals, with the picture card          compare.png  a run and its rerun
    metrics.png      the metrics page              confirm.png  a rollback's confirmation
    authority.png    earned authority, and audit.png the audit log, of a store with users
                     (examples/invoice_exceptions/earned_authority.py), signed in as its admin

Usage: python docs/img/take_screenshots.py [--out docs/img]
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import socket
import struct
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import loopwright as lw
from loopwright._contract import TERMINAL_STATUSES
from loopwright.store import open_store

CHROMIUM = "/usr/bin/chromium"
TOKEN = "screenshot-token-0123456789"
HERE = Path(__file__).resolve().parent


def _panel(coat: str) -> str:
    """A small comic panel: a figure in a coat of colour ``coat`` under a moon."""
    return (
        '<svg xmlns="http://www.w3.org/2000/svg" width="240" height="160" viewBox="0 0 240 160">'
        '<rect width="240" height="160" fill="#1e2a44"/>'
        '<circle cx="190" cy="40" r="18" fill="#f5e6a8"/>'
        '<rect x="0" y="130" width="240" height="30" fill="#2f3b2f"/>'
        '<circle cx="110" cy="62" r="14" fill="#e8c39e"/>'
        f'<path id="coat" d="M92 78 L128 78 L138 132 L82 132 Z" fill="{coat}"/>'
        '<text x="12" y="22" fill="#fff" font-family="sans-serif" font-size="13">Mara leaves</text>'
        "</svg>"
    )


def _png(rgb: tuple[int, int, int], size: int = 48) -> str:
    """A one-colour PNG as a data URL (a page thumbnail), without an imaging library."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = struct.pack(">I", zlib.crc32(kind + data))
        return struct.pack(">I", len(data)) + kind + data + crc

    raw = (b"\x00" + bytes(rgb) * size) * size
    png = (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", size, size, 8, 2, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(raw))
        + chunk(b"IEND", b"")
    )
    return "data:image/png;base64," + base64.b64encode(png).decode()


def picture_run(store: str) -> str:
    """A run parked on a request to recolour a panel and pay the artist."""

    @lw.effect("spend", requires_success=False)
    def pay_artist(invoice: str, amount: float, lines: list[dict[str, Any]]) -> dict[str, Any]:
        return {"paid": invoice}

    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal(
            edits=(
                lw.Edit("panel", "svg", _panel("#c0392b")),
                lw.Edit("panel", "thumb", _png((192, 57, 43))),
            ),
            note="recoloured Mara's coat to the red of page 1",
            effects=(
                pay_artist.call(
                    invoice="ART-112", amount=240.0, lines=[{"item": "panel 7", "hours": 3}]
                ),
            ),
        )

    def likeness(state: Any, proposal: Any) -> lw.Verdict:
        return lw.Verdict(
            passed=True,
            score=0.8,
            findings=(
                lw.Finding("Mara's coat changed colour since page 1", "panel", "svg", "likeness"),
                lw.Finding("caption is 2 px from the border", "panel", "caption", "layout"),
                lw.Finding("moon is brighter than on page 1", "panel", "svg-moon", "style"),
            ),
        )

    loop = lw.Loop(
        name="comic-panels",
        actor=actor,
        verifiers=[lw.Check(fn=likeness)],
        contract=lw.Contract(
            budget=lw.Budget(max_cycles=3),
            risk=(lw.RiskRule(name="likeness", findings=("likeness",), expires_after_s=6 * 3600),),
        ),
        effects=[pay_artist],
        approvals=lw.ApprovalPolicy(
            (lw.PolicyRule(kind="spend", action="require", above=100, name="artist-fee"),)
        ),
    )
    task = {
        "task_key": "comic-p2-panel7",
        "artifacts": {
            "panel": {"svg": _panel("#2e86c1"), "thumb": _png((46, 134, 193)), "caption": "ok"}
        },
    }
    with lw.Runtime(store) as rt:
        return rt.run_sync(loop, task).run_id


def stopped_run(store: str) -> str:
    """A demo run that stopped without success after several cycles (to rerun)."""
    st = open_store(store)
    runs = [r for r in st.list_runs() if r.status in ("stopped", "escalated") and r.cycle > 1]
    st.close()
    if not runs:
        raise SystemExit("the demo made no run that stopped after several cycles")
    return runs[0].run_id


def rerun(base: str, run_id: str) -> str:
    """Rerun ``run_id`` with twice its cycle budget through the API; wait until it ends."""
    st_run = _get(f"{base}/api/runs/{run_id}")["run"]
    cycles = 2 * int(st_run["contract"]["budget"].get("max_cycles") or 4)
    body = json.dumps({"contract": {"budget": {"max_cycles": cycles}}}).encode()
    req = urllib.request.Request(
        f"{base}/api/runs/{run_id}/rerun",
        data=body,
        headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=30) as r:
        new = str(json.load(r)["run"]["run_id"])
    for _ in range(1200):  # the server runs it in the background
        if _get(f"{base}/api/runs/{new}")["run"]["status"] in TERMINAL_STATUSES:
            return new
        time.sleep(0.1)
    raise SystemExit(f"the rerun {new} did not end")


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=30) as r:
        return json.load(r)


def _serve_ui(
    exe: Path, store: str, tmp: str, env: Mapping[str, str]
) -> tuple[subprocess.Popen[bytes], str]:
    """``loopwright ui`` on ``store`` at a free port, once it answers: (server, base URL)."""
    port = _free_port()
    server = subprocess.Popen(
        [str(exe), "ui", "--port", str(port), "--store", store],
        cwd=tmp,
        env=dict(env),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            urllib.request.urlopen(base + "/login", timeout=1).close()
            return server, base
        except (urllib.error.URLError, ConnectionError):
            time.sleep(0.1)
    server.terminate()
    raise SystemExit(f"the dashboard at {base} did not answer")


def _signed_in(pw: Any, base: str, path: str) -> tuple[Any, Any]:
    """Chromium with one page signed in with TOKEN, at ``path``."""
    browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--headless", "--no-sandbox"])
    pg = browser.new_page(viewport={"width": 1360, "height": 900})
    pg.goto(f"{base}/login?next={path}")
    pg.fill("input[name=token]", TOKEN)
    pg.click("form.login button")
    pg.wait_for_url(base + path)
    return browser, pg


def people_shots(exe: Path, out: Path, tmp: str) -> None:
    """authority.png and audit.png: the earned-authority walkthrough's store, with users."""
    from playwright.sync_api import sync_playwright

    from loopwright._authority import hash_token

    where = Path(tmp) / "people"
    example = HERE.parents[1] / "examples" / "invoice_exceptions" / "earned_authority.py"
    env = {**os.environ, "INVOICE_LEDGER": str(Path(tmp) / "ledger.jsonl")}
    subprocess.run(
        [sys.executable, str(example), "--store", str(where)],
        check=True,
        cwd=tmp,
        env=env,
        capture_output=True,
    )
    store = str(where / "store.db")
    st = open_store(store)
    st.set_token("root", hash_token(TOKEN), now=time.time())  # the admin signs in with it
    st.close()
    server, base = _serve_ui(exe, store, tmp, os.environ)
    try:
        with sync_playwright() as pw:
            browser, pg = _signed_in(pw, base, "/authority")
            for name, path in (("authority.png", "/authority"), ("audit.png", "/audit")):
                resp = pg.goto(base + path)
                if resp is None or resp.status != 200:
                    raise SystemExit(f"{path}: {resp.status if resp else 'no response'}")
                pg.screenshot(path=str(out / name), full_page=False)
                print(f"wrote {out / name}")
            browser.close()
    finally:
        server.terminate()
        server.wait(10)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=HERE)
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    exe = Path(sys.executable).with_name("loopwright")
    with tempfile.TemporaryDirectory() as tmp:
        store = str(Path(tmp) / "demo.db")
        subprocess.run(
            [str(exe), "demo", "--store", store], check=True, cwd=tmp, capture_output=True
        )
        pictures = picture_run(store)
        origin = stopped_run(store)
        env = {**os.environ, "LOOPWRIGHT_UI_TOKEN": TOKEN, "LOOPWRIGHT_UI_IDENTITY": "ana"}
        server, base = _serve_ui(exe, store, tmp, env)
        try:
            again = rerun(base, origin)
            with sync_playwright() as pw:
                browser, pg = _signed_in(pw, base, "/")
                args.out.mkdir(parents=True, exist_ok=True)
                shots = {  # (path, whole page or the first screen)
                    "runs.png": ("/", False),
                    "run-detail.png": (f"/runs/{origin}", False),
                    "inbox.png": ("/approvals", True),
                    "compare.png": (f"/compare?a={origin}&b={again}", True),
                    "metrics.png": ("/metrics", False),
                    "confirm.png": (f"/runs/{origin}/confirm?action=rollback", True),
                }
                for name, (path, full) in shots.items():
                    resp = pg.goto(base + path)
                    if resp is None or resp.status != 200:
                        raise SystemExit(f"{path}: {resp.status if resp else 'no response'}")
                    if name == "inbox.png":  # the picture card (the newest request) opened
                        card = pg.locator(f'section.card:has(a[href="/runs/{pictures}"])')
                        card.locator("details.other-findings summary").click()
                    pg.wait_for_function("() => [...document.images].every(i => i.complete)")
                    # the inbox: its first cards (the picture card and a payment), not all
                    clip: Any = {"x": 0, "y": 0, "width": 1360, "height": 1500}
                    pg.screenshot(
                        path=str(args.out / name),
                        full_page=full,
                        clip=clip if name == "inbox.png" else None,
                    )
                    print(f"wrote {args.out / name}")
                browser.close()
        finally:
            server.terminate()
            server.wait(10)
        people_shots(exe, args.out, tmp)


if __name__ == "__main__":
    main()
