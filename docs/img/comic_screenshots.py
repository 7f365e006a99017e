"""The comic example's exported pages, as shown in examples/comic_pages/README.md.

    .venv/bin/python docs/img/comic_screenshots.py --out docs/img

Runs the example twice on fresh stores — offline (``loop.toml``), and ``--model`` mode
(``model.toml``) against the loopback image server of ``tests/support/fake_images.py``, which
gets Mara's coat wrong the first time — approves the canon change, and writes:

* ``comic-pages.png``: pages 3-5 as exported offline, side by side;
* ``comic-model-page-3.png``: page 3 as exported in ``--model`` mode;
* ``comic-model-repair.png``: panel p3-1's picture as first drawn and after the masked edit;
* ``comic-panel.png``, ``comic-page.png``: the offline run in the dashboard (Chromium at
  ``/usr/bin/chromium``) — p3-3's two versions (wrong palette, then repaired) and page 4;
* ``comic-model-dashboard.png``: p3-1's pictures in the dashboard (``--model`` mode).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import tempfile
from pathlib import Path

from PIL import Image

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

import loopwright as lw  # noqa: E402
from loopwright.store import open_store  # noqa: E402
from loopwright.store._blobs import Blobs  # noqa: E402

HERE = ROOT / "examples" / "comic_pages"
TASK = json.loads((HERE / "tasks.jsonl").read_text().splitlines()[0])


def _run(spec: Path, store: str) -> list[str]:
    """Run the example to the end; the digests of p3-1's pictures (``--model`` mode)."""
    loop = lw.load_spec(spec)
    with lw.Runtime(store) as rt:
        r = rt.run_sync(loop, TASK, task_key=TASK["task_key"])
        rt.approve(r.run_id, by="creator")
        done = rt.resume_sync(r.run_id, loop)
        assert done.status == "accepted", done
        art = rt.store.checkpoints(r.run_id)[-1].task_state().part("p3-1/art")
        return [str(v.value["image"]) for v in art.versions] if art else []


def _dashboard(store: str, out: Path, shots: list[tuple[str, str]]) -> None:
    """Screenshots of parts (``(ref, file name)``) of the store's run page in the dashboard."""
    import socket
    import threading
    import time

    import uvicorn
    from playwright.sync_api import sync_playwright

    from loopwright.web import create_app

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    app = create_app(store, token="screenshots-token-0123456789")
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline, "the dashboard did not start"
        time.sleep(0.05)
    try:
        with lw.Runtime(store) as rt:
            run_id = rt.store.list_runs()[0].run_id
        with sync_playwright() as pw:
            browser = pw.chromium.launch(
                executable_path="/usr/bin/chromium", args=["--headless", "--no-sandbox"]
            )
            page = browser.new_page(viewport={"width": 1232, "height": 900})
            page.goto(f"http://127.0.0.1:{port}/runs/{run_id}")
            for ref, name in shots:
                part = page.locator(
                    "details.part", has=page.locator(f"summary code:text-is('{ref}')")
                )
                part.evaluate("d => d.open = true")
                part.locator("img").last.wait_for()
                page.wait_for_load_state("networkidle")
                part.screenshot(path=str(out / name))
            browser.close()
    finally:
        server.should_exit = True
        thread.join(30)


def _side_by_side(images: list[Image.Image], gap: int = 16) -> Image.Image:
    w = sum(i.width for i in images) + gap * (len(images) + 1)
    h = max(i.height for i in images) + 2 * gap
    out = Image.new("RGB", (w, h), "#ffffff")
    x = gap
    for im in images:
        out.paste(im, (x, gap))
        x += im.width + gap
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "img")
    out = ap.parse_args().out
    work = Path(tempfile.mkdtemp())
    os.environ["COMIC_EXPORT_DIR"] = str(work / "offline")
    _run(HERE / "loop.toml", str(work / "offline.db"))
    folder = work / "offline" / "lantern-harbor"
    pages = [Image.open(folder / f"page-{n}.png").convert("RGB") for n in (3, 4, 5)]
    pages = [p.resize((p.width // 2, p.height // 2), Image.LANCZOS) for p in pages]
    _side_by_side(pages).save(out / "comic-pages.png", optimize=True)
    _dashboard(
        str(work / "offline.db"),
        out,
        [("p3-3/svg", "comic-panel.png"), ("page-4/picture", "comic-page.png")],
    )

    from support.fake_images import FakeImages

    store = str(work / "model.db")
    with FakeImages(miscolour={"#1f4e9c": "#b71c1c"}) as fake:
        os.environ.update(
            COMIC_EXPORT_DIR=str(work / "model"),
            COMIC_IMAGE_MODEL="fake-image-1",
            COMIC_IMAGE_BASE_URL=fake.base_url,
            COMIC_IMAGE_SIZE="400x300",
            COMIC_IMAGE_PRICE="0.04",
            LOOPWRIGHT_STORE=store,
        )
        digests = _run(HERE / "model.toml", store)
    page = Image.open(work / "model" / "lantern-harbor" / "page-3.png").convert("RGB")
    page.resize((page.width // 2, page.height // 2), Image.LANCZOS).save(
        out / "comic-model-page-3.png", optimize=True
    )
    _dashboard(store, out, [("p3-1/art", "comic-model-dashboard.png")])
    blobs = Blobs(open_store(store))
    pictures = []
    for digest in digests:
        blob = blobs.get(digest)
        assert blob is not None
        pictures.append(Image.open(io.BytesIO(blob.data)).convert("RGB"))
    _side_by_side(pictures).save(out / "comic-model-repair.png", optimize=True)
    names = ["comic-pages.png", "comic-panel.png", "comic-page.png", "comic-model-page-3.png"]
    names += ["comic-model-repair.png", "comic-model-dashboard.png"]
    print("wrote", *(out / n for n in names))


if __name__ == "__main__":
    main()
