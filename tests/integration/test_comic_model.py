"""The comic example's ``--model`` mode (examples/comic_pages/model.toml) through the real
engine, against the loopback image server (tests/support/fake_images.py), which gets Mara's
coat wrong the first time it draws it: that panel's picture fails the ``picture`` check on one
region and is repaired by a masked edit (every pixel outside the mask unchanged), every panel
is drawn exactly once, accepted panels are never drawn again, pictures live in the store by
digest, and the exported pages carry them."""

from __future__ import annotations

import hashlib
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.fake_images import FakeImages, ImageRequest

import loopwright as lw
from loopwright.adapters import _png
from loopwright.store._blobs import Blobs

HERE = Path(__file__).resolve().parents[2] / "examples" / "comic_pages"
SPEC = HERE / "model.toml"
TASK: dict[str, Any] = json.loads((HERE / "tasks.jsonl").read_text().splitlines()[0])
SHEET_BLUE, WRONG_RED = "#1f4e9c", "#b71c1c"  # Mara's coat, and the model's first try
PRICE = 0.04
PANELS = ["p3-1", "p3-2", "p3-3", "p4-1", "p4-2", "p4-3", "p5-1", "p5-2", "p5-3"]


@pytest.fixture
def fake() -> Iterator[FakeImages]:
    with FakeImages(miscolour={SHEET_BLUE: WRONG_RED}) as server:
        yield server


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake: FakeImages) -> Path:
    store = tmp_path / "comic.db"
    monkeypatch.setenv("COMIC_EXPORT_DIR", str(tmp_path / "exports"))
    monkeypatch.setenv("COMIC_IMAGE_MODEL", "fake-image-1")
    monkeypatch.setenv("COMIC_IMAGE_BASE_URL", fake.base_url)
    monkeypatch.setenv("COMIC_IMAGE_SIZE", "400x300")
    monkeypatch.setenv("COMIC_IMAGE_PRICE", str(PRICE))
    monkeypatch.setenv("LOOPWRIGHT_STORE", str(store))
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    return store


def _panel(req: ImageRequest) -> str:
    m = re.search(r"panel (p\d-\d):", req.prompt)
    assert m, req.prompt[:200]
    return m.group(1)


def _rgb(hexcol: str) -> tuple[int, ...]:
    return tuple(bytes.fromhex(hexcol.lstrip("#")))


def test_model_mode_repairs_a_region_by_a_masked_edit_and_never_redraws(
    env: Path, fake: FakeImages, tmp_path: Path
) -> None:
    loop = lw.load_spec(SPEC)
    with lw.Runtime(str(env)) as rt:
        r = rt.run_sync(loop, TASK, task_key=TASK["task_key"])
        assert r.status == "awaiting_approval"  # p4-3's canon change, as offline
        parked = rt.store.checkpoints(r.run_id)[-1].task_state()
        accepted_then = {p for p in PANELS if (a := parked.part(f"{p}/art")) and a.accepted}
        asked_then = len(fake.requests)
        rt.approve(r.run_id, by="creator", note="the key was her mother's: new canon")
        done = rt.resume_sync(r.run_id, loop)
        assert (done.status, done.stop_reason) == ("accepted", "success")
        assert done.held_out_passed is True
        state = rt.store.checkpoints(r.run_id)[-1].task_state()
        blobs = Blobs(rt.store)

        # every panel drawn exactly once; one masked edit, of the panel the model got wrong
        drawn = [q for q in fake.requests if q.mask is None]
        masked = [q for q in fake.requests if q.mask is not None]
        assert sorted(_panel(q) for q in drawn) == PANELS
        assert [_panel(q) for q in masked] == ["p3-1"]
        assert all(q.status == 200 for q in fake.requests)
        # after the approval only panels not yet accepted were asked for
        assert accepted_then and "p3-1" in accepted_then
        assert not {_panel(q) for q in fake.requests[asked_then:]} & accepted_then

        # the repair: the first picture of p3-1, its wrong coat region repainted, nothing else
        art = state.artifacts["p3-1"].parts["art"]
        first, fixed = (v.value for v in art.versions)
        [generated] = [q for q in drawn if _panel(q) == "p3-1"]
        assert first["image"] == f"sha256:{generated.output}"
        [edit] = masked
        assert edit.images == [generated.output] and edit.image_fields == ["image"]
        assert fixed["image"] == f"sha256:{edit.output}" and art.status == "accepted"
        before_blob, after_blob = blobs.get(first["image"]), blobs.get(fixed["image"])
        assert before_blob is not None and after_blob is not None
        before, after = _png.decode(before_blob.data), _png.decode(after_blob.data)
        mara = next(
            f for f in state.artifacts["p3-1"].values()["figures"] if f["character"] == "mara"
        )
        coat = (int(mara["x"]), 220)
        assert before.pixel(*coat)[:3] == _rgb(WRONG_RED)
        assert after.pixel(*coat)[:3] == _rgb(SHEET_BLUE)
        inside = outside = 0
        for y in range(before.height):
            for x in range(before.width):
                if before.pixel(x, y) != after.pixel(x, y):
                    # every change lies in the masked region around the coat
                    assert mara["x"] - 40 <= x <= mara["x"] + 40 and 168 <= y <= 266, (x, y)
                    inside += 1
                else:
                    outside += 1
        assert inside > 1000 and outside > 100_000
        # the repair was local: the figures, balloons and lines of p3-1 were written once
        for part in ("figures", "bubbles", "dialogue"):
            assert len(state.artifacts["p3-1"].parts[part].versions) == 1, part
        for pid in PANELS[1:]:
            assert len(state.artifacts[pid].parts["art"].versions) == 1, pid

        # references: a later panel went with the sheet's pages and the last accepted picture
        [p32] = [q for q in drawn if _panel(q) == "p3-2"]
        assert p32.endpoint == "edits" and p32.image_fields and set(p32.image_fields) == {"image[]"}
        assert edit.output in p32.images  # p3-1 as repaired and accepted

        # pictures are in the store, the state holds digests; cost is per picture
        assert set(fixed) == {"image", "media_type", "bytes", "width", "height"}
        assert done.spent.cost_usd == pytest.approx(PRICE * len(fake.requests))
        # the exported pages carry the pictures themselves
        folder = tmp_path / "exports" / "lantern-harbor"
        page3 = (folder / "page-3.svg").read_text()
        assert "lw-blob:" not in page3 and page3.count("data:image/png;base64,") == 3
        assert (folder / "page-3.png").read_bytes()[:8] == _png.SIGNATURE
        assert (folder / "publish.log").read_text().splitlines() == [
            "publish:lantern-harbor/pages-3-4-5"
        ]
        png = (folder / "page-3.png").read_bytes()
        assert hashlib.sha256(png).hexdigest()  # readable; its look is checked by eye (README)


def test_model_mode_without_a_model_says_what_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COMIC_IMAGE_MODEL", raising=False)
    with pytest.raises(lw.ConfigError, match="COMIC_IMAGE_MODEL"):
        lw.load_spec(SPEC)  # at once, not as a run that escalates


def test_a_picture_of_another_shape_is_laid_out_and_repaired_uncropped(
    env: Path, fake: FakeImages, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 600x300 picture (2:1) in a 4:3 panel is shown cropped at the sides, not squeezed: the
    layout the model is asked for, the check and the mask all use the same mapping."""
    monkeypatch.setenv("COMIC_IMAGE_SIZE", "600x300")
    loop = lw.load_spec(SPEC)
    comic = loop.actor.__globals__
    # the panel's centre is the picture's; 4:3 of 2:1 keeps the middle 400x300 at scale 1
    assert comic["to_picture"]((0, 0, 400, 300), 600, 300) == (100, 0, 500, 300)
    assert comic["to_picture"]((0, 0, 400, 300), 1536, 1024) == pytest.approx(
        (768 - 1024 * 4 / 6, 0, 768 + 1024 * 4 / 6, 1024)
    )
    with lw.Runtime(str(env)) as rt:
        r = rt.run_sync(loop, TASK, task_key=TASK["task_key"])
        rt.approve(r.run_id, by="creator")
        done = rt.resume_sync(r.run_id, loop)
        assert (done.status, done.stop_reason) == ("accepted", "success")
        state = rt.store.checkpoints(r.run_id)[-1].task_state()
        art = state.part("p3-1/art")
        assert art is not None and len(art.versions) == 2
        fixed = Blobs(rt.store).get(art.value["image"])
        assert fixed is not None
    assert [_panel(q) for q in fake.requests if q.mask is not None] == ["p3-1"]
    after = _png.decode(fixed.data)
    assert (after.width, after.height) == (600, 300)
    mara = next(f for f in state.artifacts["p3-1"].values()["figures"] if f["character"] == "mara")
    x0, y0, x1, y1 = comic["to_picture"]((mara["x"] - 30, 176, mara["x"] + 30, 258), 600, 300)
    assert after.pixel(int((x0 + x1) / 2), int((y0 + y1) / 2))[:3] == _rgb(SHEET_BLUE)


def test_a_picture_the_fallback_reader_cannot_read_fails_the_check_and_is_drawn_again(
    env: Path, fake: FakeImages, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without Pillow, the picture check reads pictures with the library's own PNG reader,
    which refuses (``ValueError``) a damaged picture or one over its pixel limit. The check
    raised it: the engine escalated the run ("verifier picture raised an exception") at the
    first panel. It is a failing verdict naming the panel and why, and the actor draws that
    picture again (no region of it can be repainted)."""
    monkeypatch.setitem(sys.modules, "PIL", None)  # ``from PIL import Image``: ImportError
    monkeypatch.setattr(_png, "MAX_PIXELS", 400 * 300 - 1)  # each 400x300 picture is over it
    loop = lw.load_spec(SPEC)
    # the colours an earlier test read of these same pictures (the fake server's are the same
    # bytes each time) are kept by digest: this check must read them again, and fail to
    monkeypatch.setitem(loop.verifiers[0].fn.__globals__, "_COLOURS", {})
    with lw.Runtime(str(env)) as rt:
        r = rt.run_sync(loop, TASK, task_key=TASK["task_key"])
        assert r.status != "escalated" or "raised an exception" not in str(r.packet), r.packet
        first = next(c.record for c in rt.store.checkpoints(r.run_id) if c.record)
        verdict = first["visible"]["picture"]
        assert verdict["passed"] is False
        [finding] = verdict["findings"]
        where = (finding["artifact"], finding["part"], finding["dimension"])
        assert where == ("p3-1", "art", "unreadable")
        assert "the picture of p3-1 cannot be read (PNG of 400x300 pixels" in finding["message"]
    drawn = [_panel(q) for q in fake.requests if q.mask is None]
    assert drawn[:2] == ["p3-1", "p3-1"] and not [q for q in fake.requests if q.mask]


@pytest.mark.parametrize("pillow", [True, False])
def test_a_damaged_picture_is_a_value_error_with_or_without_pillow(
    env: Path, monkeypatch: pytest.MonkeyPatch, pillow: bool
) -> None:
    """The check turns a picture it cannot read into a finding by catching ``ValueError``:
    Pillow's own errors for a damaged file (``OSError``) are given as one too."""
    pytest.importorskip("PIL") if pillow else monkeypatch.setitem(sys.modules, "PIL", None)
    pixels = lw.load_spec(SPEC).verifiers[0].fn.__globals__["_pixels"]
    good = _png.encode(2, 2, bytes(12))
    assert pixels(good)[:2] == (2, 2)
    with pytest.raises(ValueError):
        pixels(good[:40] + b"\x00" * 20 + good[60:])
