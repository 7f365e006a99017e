"""The comic example's exported pages, as shown in examples/comic_pages/README.md.

    .venv/bin/python docs/img/comic_screenshots.py --out docs/img

Runs the example twice on fresh stores — offline (``loop.toml``), and ``--model`` mode
(``model.toml``) against the loopback image server of ``tests/support/fake_images.py``, which
gets Mara's coat wrong the first time — approves the canon change, and writes:

* ``comic-pages.png``: pages 3-5 as exported offline, side by side;
* ``comic-model-page-3.png``: page 3 as exported in ``--model`` mode;
* ``comic-model-repair.png``: panel p3-1's picture as first drawn and after the masked edit.
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
    blobs = Blobs(open_store(store))
    pictures = []
    for digest in digests:
        blob = blobs.get(digest)
        assert blob is not None
        pictures.append(Image.open(io.BytesIO(blob.data)).convert("RGB"))
    _side_by_side(pictures).save(out / "comic-model-repair.png", optimize=True)
    print(
        "wrote",
        *(out / n for n in ("comic-pages.png", "comic-model-page-3.png", "comic-model-repair.png")),
    )


if __name__ == "__main__":
    main()
