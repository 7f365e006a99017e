"""Whether the ``OTEL_*`` environment asks for live tracing: an OTLP endpoint is set and the SDK
is not disabled. The engine asks before it imports anything of ``loopwright.trace``, so a
``Runtime`` that traces nothing does not pay for loading the trace package."""

from __future__ import annotations

import os
from collections.abc import Mapping


def otel_tracing_configured(env: Mapping[str, str] | None = None) -> bool:
    """True when ``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is
    set and ``OTEL_SDK_DISABLED`` is not ``true``."""
    env = os.environ if env is None else env
    if str(env.get("OTEL_SDK_DISABLED", "")).strip().lower() == "true":
        return False
    return bool(
        env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    )
