"""The image adapter (``loopwright.adapters.openai_images``) over real HTTP with the ``openai``
SDK, against the loopback image server of ``tests/support/fake_images.py``: generation,
references, masked repair (pixels outside the mask unchanged), pictures as content-addressed
blobs in the store (SQLite and PostgreSQL), cost per picture, the engine's retries, the shared
concurrency limit, and the dashboard's picture route."""

from __future__ import annotations

import base64
import hashlib
import logging
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.deadline_clock import HANG_S
from support.fake_images import FakeImages, draw
from support.images_server import images_server

import loopwright as lw
from loopwright.adapters import (
    AsyncImageActor,
    ImageActor,
    ImageJob,
    ImageModel,
    ImagePrice,
    MalformedReplyError,
    _image_client,
    _png,
    is_image_value,
    openai_images,
    region_mask,
)
from loopwright.store import open_store
from loopwright.store._blobs import Blobs

W, H = 120, 90
LAYOUT = "a quay at night\nbox 0.10,0.40,0.30,0.95 #1f4e9c\nbox 0.60,0.40,0.80,0.95 #7a2e2e"
FAST = lw.RetryPolicy(attempts=3, backoff_s=0.01, max_backoff_s=0.05, jitter=False)


pytestmark = pytest.mark.usefixtures("no_openai_env")


@pytest.fixture
def fake() -> Iterator[FakeImages]:
    with FakeImages() as server:
        yield server


def _model(fake: FakeImages, tmp_path: Path, **kw: Any) -> ImageModel:
    kw.setdefault("size", f"{W}x{H}")
    kw.setdefault("timeout_s", 10)
    kw.setdefault("store", str(tmp_path / "pictures.db"))
    return ImageModel("fake-image-1", base_url=fake.base_url, **kw)


def test_generate_stores_the_picture_once_by_its_digest(fake: FakeImages, tmp_path: Path) -> None:
    model = _model(fake, tmp_path, price=0.04)
    first = model.generate(LAYOUT)
    again = model.generate(LAYOUT)
    [req, _] = fake.of("generations")
    assert (req.model, req.size, req.fields["response_format"]) == (
        "fake-image-1",
        "120x90",
        "b64_json",
    )
    value = first.value
    assert is_image_value(value)
    assert value == {
        "image": "sha256:" + hashlib.sha256(first.data).hexdigest(),
        "media_type": "image/png",
        "bytes": len(first.data),
        "width": W,
        "height": H,
    }
    assert again.value == value  # the same prompt draws the same bytes: one blob
    store = open_store(str(tmp_path / "pictures.db"))
    with store._conn() as conn:  # type: ignore[attr-defined]
        assert conn.execute("SELECT count(*) FROM blobs").fetchone()[0] == 1
    blob = Blobs(store).get(value["image"])
    assert blob is not None and blob.data == first.data and blob.media_type == "image/png"
    # the picture is what the server drew: the coat box where the layout put it
    pic = _png.decode(first.data)
    assert pic.pixel(int(0.2 * W), int(0.7 * H))[:3] == tuple(bytes.fromhex("1f4e9c"))
    assert (first.endpoint, first.masked, first.references) == ("generations", False, 0)
    assert first.usage.cost_usd == pytest.approx(0.04) and first.usage.tokens > 0


def test_references_go_as_image_parts_of_an_unmasked_edit(fake: FakeImages, tmp_path: Path) -> None:
    model = _model(fake, tmp_path)
    sheet = model.generate("the character sheet\nbox 0.1,0.1,0.9,0.9 #5b3f8c")
    page = model.generate("an accepted page\nbox 0,0,1,0.5 #cfd8dc")
    panel = model.generate(LAYOUT, references=[sheet.value, page.value["image"]])
    req = fake.requests[-1]
    assert req.endpoint == "edits" and req.mask is None
    assert req.images == [sheet.digest.removeprefix("sha256:"), page.digest.removeprefix("sha256:")]
    assert req.image_fields == ["image[]", "image[]"]
    assert (panel.endpoint, panel.masked, panel.references) == ("edits", False, 2)


def test_masked_edit_changes_only_the_masked_region(fake: FakeImages, tmp_path: Path) -> None:
    fake.miscolour = {"#1f4e9c": "#b71c1c"}  # the first picture gets the coat wrong
    model = _model(fake, tmp_path)
    drawn = model.generate(LAYOUT)
    before = _png.decode(drawn.data)
    coat = (int(0.2 * W), int(0.7 * H))
    assert before.pixel(*coat)[:3] == tuple(bytes.fromhex("b71c1c"))
    box = (0.08 * W, 0.38 * H, 0.32 * W, 0.97 * H)
    mask = region_mask(W, H, [box])
    fixed = model.edit(drawn.value, mask, LAYOUT)
    req = fake.requests[-1]
    assert (req.endpoint, req.image_fields) == ("edits", ["image"])
    assert req.images == [drawn.digest.removeprefix("sha256:")]
    assert req.mask == hashlib.sha256(mask).hexdigest()
    after = _png.decode(fixed.data)
    assert after.pixel(*coat)[:3] == tuple(bytes.fromhex("1f4e9c"))  # repaired
    holes = _png.decode(mask)
    changed = outside_changed = 0
    for y in range(H):
        for x in range(W):
            same = after.pixel(x, y) == before.pixel(x, y)
            if holes.pixel(x, y)[3] == 0:
                changed += not same
            else:
                outside_changed += not same
    assert outside_changed == 0  # every pixel outside the mask is the original's
    assert changed > 0.5 * (box[2] - box[0]) * (box[3] - box[1])
    assert fixed.masked and fixed.value != drawn.value
    # a mask of another size is refused before anything is sent
    sent = len(fake.requests)
    with pytest.raises(lw.ConfigError, match="same size"):
        model.edit(drawn.value, region_mask(W + 1, H, [box]), LAYOUT)
    assert len(fake.requests) == sent


def test_region_mask_is_transparent_exactly_inside_the_boxes() -> None:
    mask = _png.decode(region_mask(10, 8, [(2, 1, 5, 3), (8.5, 6, 12, 9)]))
    clear = {(x, y) for y in range(8) for x in range(10) if mask.pixel(x, y)[3] == 0}
    assert clear == {(x, y) for x in range(2, 5) for y in range(1, 3)} | {
        (x, y) for x in (8, 9) for y in (6, 7)
    }


def test_failures_are_classified_for_the_engines_retry(fake: FakeImages, tmp_path: Path) -> None:
    model = _model(fake, tmp_path, max_retry_after_s=5)
    fake.fail(429, retry_after=30)
    with pytest.raises(Exception) as caught:
        model.generate(LAYOUT)
    assert lw.classify(caught.value) == "transient"
    assert lw.RetryPolicy(jitter=False).delay_s(1, caught.value) == pytest.approx(5)  # capped
    assert "fake-image-1" in str(caught.value)  # named after the model it was about
    for status, kind in ((503, "transient"), (401, "needs_human"), (400, "permanent")):
        fake.fail(status)
        with pytest.raises(Exception) as caught:
            model.generate(LAYOUT)
        assert lw.classify(caught.value) == kind, status
    fake.fail(200)  # a 2xx without a picture
    with pytest.raises(MalformedReplyError):
        model.generate(LAYOUT)
    assert lw.classify(MalformedReplyError("x")) == "transient"
    assert model.generate(LAYOUT).value["width"] == W  # and it works again


def _generate_against(
    tmp_path: Path,
    data: Any,
    picture: bytes = b"",
    raw: bytes | None = None,
    expected: type[Exception] = MalformedReplyError,
) -> Exception:
    """``generate`` against a loopback server answering the images API with ``data`` (a
    ``{url}`` in it may be the server's own, ``/picture.png``: ``picture`` then is that whole
    raw HTTP response), or with the body ``raw``; the error (``expected``) it must raise."""

    with images_server(data, lambda path: picture, raw) as server:
        model = ImageModel(
            "fake-image-1",
            base_url=f"http://127.0.0.1:{server.server_address[1]}/v1",
            store=str(tmp_path / "pictures.db"),
            timeout_s=HANG_S,
        )
        with pytest.raises(expected) as caught:
            model.generate(LAYOUT)
    return caught.value


@pytest.mark.parametrize("data", [{"0": {"b64_json": ""}}, 7], ids=["object", "number"])
def test_a_2xx_whose_data_is_not_a_list_is_malformed_not_a_crash(tmp_path: Path, data: Any) -> None:
    """``data`` an object or a number raised KeyError or TypeError (classified permanent: the
    run escalated at once); like a 2xx without a picture, it is a malformed reply."""
    err = _generate_against(tmp_path, data)
    assert lw.classify(err) == "transient"
    assert "holds no picture" in str(err)


@pytest.mark.parametrize(
    "raw",
    [b'{"data": [{"b64_json": "\xff"}]}', b'{"data": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"],
    ids=["not utf-8", "nested past the stack"],
)
def test_a_2xx_body_the_sdk_cannot_parse_is_malformed_not_permanent(
    tmp_path: Path, raw: bytes
) -> None:
    """UnicodeDecodeError or RecursionError from the SDK's parse of a 2xx body was classified
    permanent; it is a body that is not JSON, as an empty one was already."""
    err = _generate_against(tmp_path, None, raw=raw)
    assert lw.classify(err) == "transient"
    assert "not JSON" in str(err)


@pytest.mark.parametrize(
    "picture",
    [b"HTTP/1.0 200 OK\r\nContent-Length: 1000\r\n\r\n\x89PNG\r\n", b"HELLO\r\n\r\n"],
    ids=["cut short", "not http"],
)
def test_a_picture_url_answered_badly_is_malformed_not_permanent(
    tmp_path: Path, picture: bytes
) -> None:
    """A picture's URL answered with a body cut short (a dropped download: IncompleteRead) or
    with something that is not HTTP (BadStatusLine) raised http.client's error, no OSError:
    classified permanent, the run escalated at once. It is a picture that could not be fetched,
    a malformed reply (transient), as a refused connection was already."""
    err = _generate_against(tmp_path, [{"url": "http://127.0.0.1:PORT/picture.png"}], picture)
    assert lw.classify(err) == "transient"
    assert "could not be fetched" in str(err)


def test_a_picture_fetched_past_the_limit_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A picture a reply names by ``url`` was read whole, however large: it is read up to
    ``MAX_REPLY_BYTES`` (256 MiB; 64 KiB here) and refused past it, permanent."""
    monkeypatch.setattr(_image_client, "MAX_REPLY_BYTES", 64 * 1024)
    big = b"HTTP/1.0 200 OK\r\n\r\n\x89PNG\r\n\x1a\n" + b"\0" * (256 * 1024)  # no length
    url = [{"url": "http://127.0.0.1:PORT/picture.png"}]
    err = _generate_against(tmp_path, url, big, expected=lw.PermanentError)
    assert type(err).__name__ == "ReplyTooLarge" and lw.classify(err) == "permanent"
    assert "picture at http://127.0.0.1:" in str(err) and "larger than 0.0625 MiB" in str(err)


@pytest.mark.parametrize("run", ["sync", "async"])
def test_timeout_bounds_the_whole_request_not_each_read(
    fake: FakeImages, tmp_path: Path, run: str
) -> None:
    # The picture's JSON a byte every 0.2 s (many minutes in all; no read waits 0.5 s): cut off
    # at timeout_s as a timeout, transient. The future's limit only keeps a regression from
    # hanging the suite.
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    model = _model(fake, tmp_path, timeout_s=0.5)
    fake.trickle_s = 0.2

    def call() -> Any:
        return model.generate(LAYOUT) if run == "sync" else asyncio.run(model.agenerate(LAYOUT))

    pool = ThreadPoolExecutor(1)
    try:
        with pytest.raises(Exception) as caught:
            pool.submit(call).result(timeout=30)
    finally:
        pool.shutdown(wait=False)
    assert type(caught.value).__name__ == "APITimeoutError", repr(caught.value)
    assert lw.classify(caught.value) == "transient"
    # A reply read in many pieces (a byte a millisecond: about 2.6 s here) is used whole once
    # it ends. Its length is the machine's: with three busy processes on its CPU it passed the
    # 10 s this allowed (APITimeoutError). The timeout now is one only a hang reaches (as
    # HANG_S elsewhere), below the suite's 300 s per test so that a hang fails here, named.
    fake.trickle_s = 0.001
    assert _model(fake, tmp_path, timeout_s=120).generate(LAYOUT).value["width"] == W


def _drawing_loop(model: ImageModel, retry: lw.RetryPolicy = FAST) -> lw.Loop:
    def job(ctx: lw.Context) -> ImageJob | None:
        if "panel" in ctx.artifacts and "art" in ctx.artifacts["panel"]:
            return None
        return ImageJob("panel", "art", LAYOUT, note="drew the panel")

    def stored(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        part = state.part("panel/art")
        ok = (
            part is not None and is_image_value(part.value) and part.value["image"] in model.blobs()
        )
        return lw.Verdict(passed=ok, score=1.0 if ok else 0.0)

    return lw.Loop(
        name="draw",
        actor=ImageActor(model, job),
        verifiers=[lw.Check(fn=stored)],
        contract=lw.Contract(success=lw.Success(min_score=1.0), budget=lw.Budget(max_cycles=3)),
        retry=retry,
    )


def test_an_image_actor_step_in_a_run_retries_and_is_charged_per_picture(
    fake: FakeImages, tmp_path: Path
) -> None:
    store = str(tmp_path / "run.db")
    model = _model(fake, tmp_path, price=ImagePrice(0.05), store=store)
    fake.fail(503)  # the first attempt fails; the engine tries again
    with lw.Runtime(store) as rt:
        r = rt.run_sync(_drawing_loop(model), {"goal": "draw a panel"}, task_key="draw-1")
        assert (r.status, r.stop_reason) == ("accepted", "success")
        state = rt.store.checkpoints(r.run_id)[-1].task_state()
        calls = [e.data for e in rt.store.events(r.run_id) if e.kind == "model_call"]
    assert [q.status for q in fake.requests] == [503, 200]
    _assert_image_calls(calls, fake, failed_status=503)
    assert r.spent.cost_usd == pytest.approx(0.05)  # one picture; the failed request costs nothing
    part = state.part("panel/art")
    assert part is not None and part.value["image"] == "sha256:" + str(fake.requests[-1].output)
    assert "b64" not in str(part.value) and len(str(part.value)) < 300  # a reference, not bytes


def _assert_image_calls(calls: list[dict[str, Any]], fake: FakeImages, failed_status: int) -> None:
    """Each request is a recorded model call, as a chat call is: the failed attempt with its
    status, the good one with the prompt, the picture's digest, tokens and cost (what the
    waterfall and the OpenTelemetry spans show)."""
    assert [c["outcome"] for c in calls] == ["retry", "ok"]
    failed, good = calls
    assert failed["http_status"] == failed_status and failed["error"] and failed["reply"] is None
    assert good["model"] == "fake-image-1" and good["operation"] == "generate_content"
    assert good["prompt"] == [{"role": "user", "content": LAYOUT}]
    assert f"sha256:{fake.requests[-1].output}" in good["reply"]
    assert good["reply"].startswith("generation: image/png")
    assert good["input_tokens"] == len(LAYOUT.split()) and good["output_tokens"] == 1000
    assert good["cost_usd"] == pytest.approx(0.05) and good["error"] is None


def test_unpriced_pictures_cost_nothing_and_warn_once(
    fake: FakeImages, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    model = _model(fake, tmp_path)
    with caplog.at_level(logging.WARNING, logger="loopwright.adapters"):
        a = model.generate(LAYOUT)
        model.generate(LAYOUT + " again")
    assert a.usage.cost_usd == 0.0 and a.priced.source == "unpriced"
    assert a.usage.tokens == len(LAYOUT.split()) + 1000  # the reply's usage still counts
    assert sum("ImagePrice" in r.getMessage() for r in caplog.records) == 1
    assert ImagePrice.coerce("0.02") == ImagePrice(0.02)
    assert ImagePrice.coerce({"per_image_usd": 1}) == ImagePrice(1.0)
    with pytest.raises(lw.ConfigError):
        ImagePrice.coerce(-1)


def test_concurrency_limit_holds_across_threads(tmp_path: Path) -> None:
    with FakeImages(delay_s=0.05) as fake:
        model = _model(fake, tmp_path, max_concurrency=2)
        threads = [
            threading.Thread(target=model.generate, args=(f"{LAYOUT} {i}",)) for i in range(8)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert len(fake.of("generations")) == 8
        assert fake.peak <= 2


def test_async_calls_share_the_limit_and_draw_the_same_pictures(tmp_path: Path) -> None:
    import asyncio

    with FakeImages(delay_s=0.05) as fake:
        model = _model(fake, tmp_path, max_concurrency=2)

        async def many() -> list[Any]:
            return list(await asyncio.gather(*(model.agenerate(f"{LAYOUT} {i}") for i in range(8))))

        results = asyncio.run(many())
        assert len(fake.of("generations")) == 8 and fake.peak <= 2
        first = results[0]
        box = (0.08 * W, 0.38 * H, 0.32 * W, 0.97 * H)
        mask = region_mask(W, H, [box])
        fixed = asyncio.run(model.aedit(first.value, mask, LAYOUT, references=[results[1].value]))
        again = model.edit(first.value, mask, LAYOUT, references=[results[1].value])
        assert fixed.value == again.value and fixed.masked and fixed.references == 1
        assert fake.requests[-1].image_fields == ["image[]", "image[]"]  # the picture, a reference


def test_an_async_image_actor_step_in_a_run(fake: FakeImages, tmp_path: Path) -> None:
    store = str(tmp_path / "run.db")
    model = _model(fake, tmp_path, price=ImagePrice(0.05), store=store)
    loop = _drawing_loop(model)
    loop = lw.Loop(
        name="draw-async",
        actor=AsyncImageActor(model, loop.actor.job),  # type: ignore[attr-defined]
        verifiers=loop.verifiers,
        contract=loop.contract,
        retry=FAST,
    )
    fake.fail(429, retry_after=0.01)
    with lw.Runtime(store) as rt:
        r = rt.run_sync(loop, {"goal": "draw a panel"}, task_key="draw-async")
        calls = [e.data for e in rt.store.events(r.run_id) if e.kind == "model_call"]
    assert (r.status, r.stop_reason) == ("accepted", "success")
    assert [q.status for q in fake.requests] == [429, 200]
    _assert_image_calls(calls, fake, failed_status=429)
    assert r.spent.cost_usd == pytest.approx(0.05)


def test_dashboard_serves_a_runs_picture_with_safe_headers(
    fake: FakeImages, tmp_path: Path
) -> None:
    """``/runs/{id}/blob/{digest}`` (web/_pictures.py, registered by ``create_app``)."""
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    from loopwright.web._pictures import picture_url, register_picture_routes

    store = str(tmp_path / "run.db")
    model = _model(fake, tmp_path, store=store)
    with lw.Runtime(store) as rt:
        run_id = rt.run_sync(_drawing_loop(model), {"goal": "draw"}, task_key="draw-2").run_id
        value = rt.store.checkpoints(run_id)[-1].task_state().part("panel/art").value  # type: ignore[union-attr]
    other = model.save(_png.encode(2, 2, b"\x00" * 12))  # in the store, in no part of the run
    svg = Blobs(open_store(store)).put(
        b"<svg xmlns='http://www.w3.org/2000/svg'/>", "image/svg+xml"
    )
    app = FastAPI()
    register_picture_routes(app, open_store(store))
    c = TestClient(app)
    url = picture_url(run_id, value)
    assert url == f"/runs/{run_id}/blob/{value['image']}"
    r = c.get(url)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "image/png"
    assert r.headers["x-content-type-options"] == "nosniff"
    assert "sandbox" in r.headers["content-security-policy"]
    assert "immutable" in r.headers["cache-control"]
    assert hashlib.sha256(r.content).hexdigest() == value["image"].removeprefix("sha256:")
    for bad in (other["image"], svg, "sha256:" + "0" * 64, "nonsense"):
        assert c.get(f"/runs/{run_id}/blob/{bad}").status_code == 404, bad
    assert c.get(f"/runs/no-such-run/blob/{value['image']}").status_code == 404
    assert picture_url(run_id, {"image": svg, "media_type": "image/svg+xml"}) is None

    # An SVG part placing the run's picture by digest (the comic's lettered panel) is shown with
    # the picture in it: an SVG seen through <img> loads nothing from outside.
    from loopwright.web._pictures import inline_blob_refs

    st = open_store(store)
    panel = (
        "<svg xmlns='http://www.w3.org/2000/svg'>"
        f'<image href="lw-blob:{value["image"]}"/><image href="lw-blob:{other["image"]}"/></svg>'
    )
    state = st.latest_checkpoint(run_id).task_state()
    shown = inline_blob_refs(st, state, panel)
    assert 'href="data:image/png;base64,' in shown  # the run's own picture
    assert f'href="lw-blob:{other["image"]}"' in shown  # not this run's: left as it was
    assert inline_blob_refs(st, state, "<svg/>") == "<svg/>"


@pytest.mark.postgres
def test_blobs_on_postgresql() -> None:
    url = os.environ.get("LOOPWRIGHT_TEST_PG")
    if not url:
        pytest.skip("LOOPWRIGHT_TEST_PG is not set")
    import uuid

    schema = f"blobs_{uuid.uuid4().hex[:8]}"
    sep = "&" if "?" in url else "?"
    store = open_store(f"{url}{sep}schema={schema}")
    try:
        blobs = Blobs(store)
        data = _png.encode(3, 2, bytes(draw("x", 3, 2)))
        digest = blobs.put(data, "image/png")
        assert blobs.put(data, "image/png") == digest  # written once
        got = blobs.get(digest)
        assert got is not None and got.data == data and got.media_type == "image/png"
        assert digest in blobs and blobs.get("sha256:" + "1" * 64) is None
    finally:
        with store._tx() as conn:  # type: ignore[attr-defined]
            conn.execute(f"DROP SCHEMA {schema} CASCADE")
        store.close()


def test_a_pickled_model_keeps_its_store(fake: FakeImages, tmp_path: Path) -> None:
    """What a Ray worker gets: the same endpoint and store (an SQLite Store object by its URL),
    no client or connection carried along."""
    import pickle

    store = open_store(str(tmp_path / "given.db"))
    model = _model(fake, tmp_path, store=store, price=0.01)
    copy = pickle.loads(pickle.dumps(model))
    made = copy.generate(LAYOUT)
    assert Blobs(store).get(made.digest) is not None  # written where the original writes
    assert copy.model_identity() == model.model_identity()


def _whole_png() -> bytes:
    return openai_images._png.encode(8, 6, bytes(range(144)))


@pytest.mark.parametrize(
    "picture",
    [
        _whole_png()[:60],  # cut short inside IDAT
        _whole_png()[:-12],  # cut short before IEND
        _whole_png()[:40] + bytes([_whole_png()[40] ^ 1]) + _whole_png()[41:],  # a bit flipped
        b"GIF89a<html><script>alert(1)</script></html>",  # begins like a GIF, is none
        b"\xff\xd8\xff\xe0" + b"\x10" * 64,  # a JPEG without its end
        b"RIFF\xff\x00\x00\x00WEBPVP8 ",  # a WebP shorter than it says
    ],
    ids=["png cut", "png no iend", "png crc", "gif html", "jpeg cut", "webp cut"],
)
def test_a_damaged_picture_in_a_reply_is_malformed_not_stored(
    tmp_path: Path, picture: bytes
) -> None:
    """A reply whose picture only began like one (a PNG cut short, a GIF that is HTML) was
    stored as the part's picture: the check that read it raised (``image file is
    truncated``), and the run escalated telling the user to fix their verifier. It is a
    malformed reply (transient: asked again), and ``save`` refuses such bytes too."""
    err = _generate_against(tmp_path, [{"b64_json": base64.b64encode(picture).decode()}])
    assert lw.classify(err) == "transient"
    assert "picture is damaged" in str(err)
    model = ImageModel(
        "fake-image-1", base_url="http://127.0.0.1:9/v1", store=str(tmp_path / "s.db")
    )
    with pytest.raises(ValueError, match="damaged picture"):
        model.save(picture)
    assert model.save(_whole_png())["width"] == 8
