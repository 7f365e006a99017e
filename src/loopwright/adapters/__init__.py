"""Model adapters: actors and reviewers backed by OpenAI-compatible chat endpoints.

``ChatActor`` turns a ``Context`` into a ``Proposal``; ``ChatReviewer`` judges a candidate
against a rubric and returns a located ``Verdict``. Both talk to any chat-completions server
(OpenAI, vLLM, Ollama, llama.cpp, LM Studio) through the ``openai`` SDK, imported when one is made
(``pip install 'loopwright[openai]'``). Retries are the engine's; cost is usage × price
(``PriceOverride``, else ``genai-prices``, else 0). See ``docs/models.md``.

``ImageModel`` generates pictures and repairs a region of one under a mask on an
OpenAI-compatible images endpoint; ``ImageActor`` makes it an actor step. Pictures are stored
as content-addressed blobs, a part holding their digest (``image_value``).
"""

from __future__ import annotations

from ._limits import Limits, limits_in_use
from ._prices import Priced, PriceOverride, price_call
from ._prompt import (
    CONTEXT_FIELDS,
    REVIEW_FIELDS,
    context_sections,
    render_context,
    render_review,
    review_sections,
)
from ._schema import PROPOSAL_SCHEMA, REVIEW_SCHEMA, MalformedReplyError, parse_reply, validate
from .openai_chat import (
    ACTOR_SYSTEM_PROMPT,
    DEFAULT_BASE_URL,
    REPAIR_PROMPT,
    REVIEWER_SYSTEM_PROMPT,
    AsyncChatActor,
    AsyncChatReviewer,
    ChatActor,
    ChatReviewer,
    ModelReply,
    ResponseFormat,
    ReviewRefusedError,
    normalise_base_url,
)
from .openai_images import (
    AsyncImageActor,
    ImageActor,
    ImageJob,
    ImageModel,
    ImagePrice,
    ImageResult,
    image_value,
    is_image_value,
    region_mask,
)

__all__ = [
    "ACTOR_SYSTEM_PROMPT",
    "CONTEXT_FIELDS",
    "DEFAULT_BASE_URL",
    "PROPOSAL_SCHEMA",
    "REPAIR_PROMPT",
    "REVIEWER_SYSTEM_PROMPT",
    "REVIEW_FIELDS",
    "REVIEW_SCHEMA",
    "AsyncChatActor",
    "AsyncChatReviewer",
    "AsyncImageActor",
    "ChatActor",
    "ChatReviewer",
    "ImageActor",
    "ImageJob",
    "ImageModel",
    "ImagePrice",
    "ImageResult",
    "Limits",
    "MalformedReplyError",
    "ModelReply",
    "PriceOverride",
    "Priced",
    "ResponseFormat",
    "ReviewRefusedError",
    "context_sections",
    "image_value",
    "is_image_value",
    "limits_in_use",
    "normalise_base_url",
    "parse_reply",
    "price_call",
    "region_mask",
    "render_context",
    "render_review",
    "review_sections",
    "validate",
]
