"""Pictures from an OpenAI-compatible image endpoint: generate, and repair a region.

``ImageModel`` talks to any server that speaks OpenAI's images API through the ``openai`` SDK
(``pip install 'loopwright[openai]'``), by ``base_url``:

* ``generate(prompt)`` is ``POST /images/generations``.
* ``generate(prompt, references=[sheet, accepted panel, ...])`` sends the references as
  ``image[]`` parts of ``POST /images/edits`` without a mask: the generations endpoint takes no
  images, and an edit of several input images is how OpenAI's ``gpt-image-*`` models (and the
  servers that copy the API) take a character sheet or earlier pages as references.
* ``edit(image, mask, prompt)`` is ``POST /images/edits`` with a mask: **local repair** of a
  picture. The mask is a PNG of the image's size whose transparent pixels (alpha 0) mark what
  may change (OpenAI's convention; ``region_mask`` draws one from boxes); the rest of the
  picture stays as it was. With references they follow the image as further ``image[]``
  parts; without, the image goes as a single ``image`` part (what every server accepts).

**Pictures are blobs, not state.** Each picture is stored once in the run's store, by its
SHA-256 (``store/_blobs.py``); a part's value is ``image_value``: ``{"image": "sha256:…",
"media_type", "bytes", "width", "height"}``. ``store=`` names the store (a ``Store``, a URL or
a path); by default the one ``LOOPWRIGHT_STORE`` names, else ``./.loopwright/loopwright.db``,
opened on first use. The dashboard shows such a part as a picture
(``/runs/{run_id}/blob/{digest}``).

**Retries, limits and secrets are the chat adapter's.** The SDK client has ``max_retries=0``;
every failure is raised, named after the model and endpoint, redacted, ``Retry-After`` capped,
for the engine to classify and retry under the loop's persisted ``RetryPolicy`` (429/5xx and
timeouts transient, 401/403 need a person, other 4xx permanent); a 2xx without a picture is a
``MalformedReplyError`` (transient). ``max_concurrency`` and ``tokens_per_minute`` are the
process-wide per-endpoint limits of ``_limits`` (shared with the chat adapters on the same
``(base_url, model)``).

**Many runs at once.** ``agenerate``/``aedit`` and ``AsyncImageActor`` use
``openai.AsyncOpenAI`` (one client per event loop, as the chat adapters): waiting for the
endpoint's slot or the picture never blocks the loop the runs share.

**Cost** is per image: ``price=ImagePrice(per_image_usd)`` (or a number), else the reply's
token usage priced by ``genai-prices`` (``gpt-image-1`` is priced by tokens), else 0 with one
logged warning.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .._errors import ConfigError
from .._proposal import Context, Edit, Proposal
from . import _png
from ._image_client import MAX_REPLY_BYTES  # noqa: F401  (re-exported; patch it in _image_client)
from ._image_data import image_value, is_image_value, media_type_of, region_mask
from ._image_model import ImageModelBase
from ._image_reply import ImagePrice, ImageResult

__all__ = [
    "AsyncImageActor",
    "ImageActor",
    "ImageJob",
    "ImageModel",
    "ImagePrice",
    "ImageResult",
    "image_value",
    "is_image_value",
    "region_mask",
]


class ImageModel(ImageModelBase):
    """A client of one image model on one OpenAI-compatible endpoint (see the module's
    docstring).

    Args:
        model: the model name the server knows (``gpt-image-1``, ``dall-e-2``, a local one).
        base_url: the endpoint (``http://localhost:8000/v1``); default ``OPENAI_BASE_URL`` or
            OpenAI.
        api_key: default ``OPENAI_API_KEY``; ``"not-needed"`` for another server when unset.
        size: ``"WIDTHxHEIGHT"`` asked for (``None``: the server's default).
        quality: the ``quality`` field, when set.
        response_format: ``"b64_json"`` (the picture in the reply), ``"url"`` (fetched), or
            ``None`` to send none; default: none for ``gpt-image-*`` models (which always reply
            with base64 and refuse the field), ``b64_json`` for others.
        timeout_s: the most one request to the images API may take, its reply's body
            included, as the chat adapters' (a timeout is transient); a picture fetched from a
            ``url`` reply is bounded per read only.
        price: ``ImagePrice`` or dollars per picture; default: ``genai-prices`` by tokens.
        provider: a ``genai-prices`` provider id for a proxy the table does not know.
        extra_body: extra request fields.
        max_retry_after_s: the longest ``Retry-After`` honoured.
        max_concurrency / tokens_per_minute: process-wide limits for this endpoint and model.
        store: where pictures are kept (a ``Store``, URL or path; default the process's store).
    """

    # --- the calls ------------------------------------------------------------------------
    def generate(
        self,
        prompt: str,
        *,
        references: Sequence[Any] = (),
        size: str | None = None,
        budget_s: float | None = None,
    ) -> ImageResult:
        """A new picture from ``prompt``; with ``references`` (pictures, digests or bytes)
        they go as ``image[]`` of an edit without a mask (see the module's docstring)."""
        refs = [self._file(f"reference-{i}", self.load(r)) for i, r in enumerate(references)]
        if not refs:
            return self._call("generations", prompt, size, budget_s, masked=False, refs=0)
        return self._call("edits", prompt, size, budget_s, masked=False, refs=len(refs), image=refs)

    def edit(
        self,
        image: Any,
        mask: bytes,
        prompt: str,
        *,
        references: Sequence[Any] = (),
        size: str | None = None,
        budget_s: float | None = None,
    ) -> ImageResult:
        """``image`` with the region ``mask`` leaves transparent repainted from ``prompt``;
        the rest stays as it was (local repair)."""
        base = self.load(image)
        files = self._edit_files(base, mask, [self.load(r) for r in references])
        return self._call(
            "edits", prompt, size, budget_s, masked=True, refs=len(references), **files
        )

    async def agenerate(
        self,
        prompt: str,
        *,
        references: Sequence[Any] = (),
        size: str | None = None,
        budget_s: float | None = None,
    ) -> ImageResult:
        """``generate`` with the async client."""
        pictures = [await asyncio.to_thread(self.load, r) for r in references]
        refs = [self._file(f"reference-{i}", data) for i, data in enumerate(pictures)]
        if not refs:
            return await self._acall("generations", prompt, size, budget_s, masked=False, refs=0)
        return await self._acall(
            "edits", prompt, size, budget_s, masked=False, refs=len(refs), image=refs
        )

    async def aedit(
        self,
        image: Any,
        mask: bytes,
        prompt: str,
        *,
        references: Sequence[Any] = (),
        size: str | None = None,
        budget_s: float | None = None,
    ) -> ImageResult:
        """``edit`` with the async client."""
        base = await asyncio.to_thread(self.load, image)
        pictures = [await asyncio.to_thread(self.load, r) for r in references]
        files = self._edit_files(base, mask, pictures)
        return await self._acall(
            "edits", prompt, size, budget_s, masked=True, refs=len(pictures), **files
        )

    def _edit_files(self, base: bytes, mask: bytes, pictures: Sequence[bytes]) -> dict[str, Any]:
        """The ``image`` and ``mask`` parts of a masked edit, the mask checked first."""
        if media_type_of(mask) != "image/png":
            raise ConfigError("a mask is a PNG with an alpha channel", field="mask")
        if media_type_of(base) == "image/png" and _png.size_of(base) != _png.size_of(mask):
            raise ConfigError(
                f"the mask is {_png.size_of(mask)}, the picture {_png.size_of(base)}: "
                "they must be the same size",
                field="mask",
            )
        files = [self._file("image", base)]
        files += [self._file(f"reference-{i}", data) for i, data in enumerate(pictures)]
        return {
            "image": files if len(files) > 1 else files[0],
            "mask": ("mask.png", mask, "image/png"),
        }

    @staticmethod
    def _file(name: str, data: bytes) -> tuple[str, bytes, str]:
        kind = media_type_of(data) or "application/octet-stream"
        return (f"{name}.{kind.rpartition('/')[2]}", data, kind)


@dataclass(frozen=True)
class ImageJob:
    """What an ``ImageActor`` draws this cycle.

    Attributes:
        artifact, part: where the picture goes (the part's value becomes its ``image_value``).
        prompt: what to draw (or, for a repair, what the masked region must become).
        references: pictures to follow (``image_value``s, digests or bytes).
        base: the picture to repair; with ``mask``, a masked edit instead of a new picture.
        mask: the edit mask (``region_mask``).
        size: ``WIDTHxHEIGHT`` for this picture (default: the model's).
        note: the proposal's note.
        then: more edits of the same proposal, made from the result (say, a lettered panel
            that shows the new picture).
    """

    artifact: str
    part: str
    prompt: str
    references: Sequence[Any] = ()
    base: Any = None
    mask: bytes | None = None
    size: str | None = None
    note: str = ""
    then: Callable[[ImageResult], Sequence[Edit]] | None = field(default=None, compare=False)


class ImageActor:
    """An actor step that draws: ``job(ctx)`` says what (an ``ImageJob``, or ``None`` when
    there is nothing to draw), the model draws or repairs it, and the proposal sets the part
    to the picture's ``image_value`` with the picture's cost as its usage."""

    def __init__(
        self,
        images: ImageModel,
        job: Callable[[Context], ImageJob | None],
        *,
        name: str = "image_actor",
    ) -> None:
        self.images = images
        self.job = job
        self.__name__ = name

    def model_identity(self) -> tuple[str, str]:
        return self.images.model_identity()

    def use_limits(self, **limits: int | None) -> None:
        self.images.use_limits(**limits)

    def __call__(self, ctx: Context) -> Proposal:
        job = self.job(ctx)
        if job is None:
            return Proposal(note="nothing to draw")
        budget = ctx.remaining.seconds
        if job.mask is not None:
            if job.base is None:
                raise ConfigError("a masked repair needs the picture to repair", field="base")
            result = self.images.edit(
                job.base, job.mask, job.prompt, references=job.references, size=job.size,
                budget_s=budget,
            )  # fmt: skip
        else:
            result = self.images.generate(
                job.prompt, references=job.references, size=job.size, budget_s=budget
            )
        return self._proposal(job, result)

    @staticmethod
    def _proposal(job: ImageJob, result: ImageResult) -> Proposal:
        edits = [Edit(job.artifact, job.part, result.value)]
        if job.then is not None:
            edits += list(job.then(result))
        what = "repaired a region of" if result.masked else "drew"
        return Proposal(
            edits=tuple(edits),
            note=job.note or f"{what} {job.artifact}/{job.part}",
            usage=result.usage,
        )


class AsyncImageActor(ImageActor):
    """``ImageActor`` with the async client: ``await actor(ctx)``. The engine awaits it on its
    event loop, so many runs share one loop and the endpoint's limits without a thread each."""

    async def __call__(self, ctx: Context) -> Proposal:  # type: ignore[override]
        job = self.job(ctx)
        if job is None:
            return Proposal(note="nothing to draw")
        budget = ctx.remaining.seconds
        if job.mask is not None:
            if job.base is None:
                raise ConfigError("a masked repair needs the picture to repair", field="base")
            result = await self.images.aedit(
                job.base, job.mask, job.prompt, references=job.references, size=job.size,
                budget_s=budget,
            )  # fmt: skip
        else:
            result = await self.images.agenerate(
                job.prompt, references=job.references, size=job.size, budget_s=budget
            )
        return self._proposal(job, result)
