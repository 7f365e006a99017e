"""Whether the ``OTEL_*`` environment asks for live tracing: an OTLP endpoint is set and the SDK
is not disabled. The engine asks before it imports anything of ``loopwright.trace``, so a
``Runtime`` that traces nothing does not pay for loading the trace package.

And the credentials the OTLP exporter sends (``OTEL_EXPORTER_OTLP_HEADERS``,
``OTEL_EXPORTER_OTLP_TRACES_HEADERS``: ``Authorization=Bearer%20…``, ``x-honeycomb-team=…``),
registered as secrets when tracing is configured (``register_otlp_headers``): a collector or
a proxy echoing one in an error body, or a value of the run quoting one, has it masked
(invariant 9). The variables' names do not look secret, so their values were not masked by
the environment's net, and a key alone (no ``Bearer`` before it) has no shape."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from urllib.parse import unquote, urlsplit

from ._redact_registry import SECRET_FIELDS, field_key, register_secret, secret_name

__all__ = ["otel_tracing_configured", "register_header_values", "register_otlp_headers"]

_HEADER_VARS = ("OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS")

# Words of a header's name (split at ``-`` and ``_``) that make its value a credential,
# besides the names ``_redact`` reads as secret (``authorization``, ``*-api-key``,
# ``*-token``): vendors' keys under ordinary names (Honeycomb's ``x-honeycomb-team``,
# Uptrace's ``uptrace-dsn``, a ``license-key``). Other headers (``x-honeycomb-dataset``,
# ``x-scope-orgid``) are names and stay shown: registered, ``production`` would be masked in
# every record.
_CREDENTIAL_WORDS = frozenset(
    {"auth", "key", "apikey", "token", "secret", "dsn", "team", "license", "signature"}
)
_WORDS = re.compile(r"[-_\s]+")


def otel_tracing_configured(env: Mapping[str, str] | None = None) -> bool:
    """True when ``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is
    set and ``OTEL_SDK_DISABLED`` is not ``true``."""
    env = os.environ if env is None else env
    if str(env.get("OTEL_SDK_DISABLED", "")).strip().lower() == "true":
        return False
    return bool(
        env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    )


def _credential_header(name: str) -> bool:
    k = field_key(name)
    return secret_name(k, SECRET_FIELDS) or bool(_CREDENTIAL_WORDS & set(_WORDS.split(k)))


def register_header_values(headers: Mapping[str, str]) -> None:
    """Register the values of the headers in ``headers`` that carry a credential (by name):
    the value, the credential after its scheme (``Bearer``, ``Basic``), a URL's password or
    token (``uptrace-dsn=https://TOKEN@host``). A value under 6 characters is ignored, as
    ``register_secret`` ignores one."""
    for name, value in headers.items():
        if not isinstance(name, str) or not isinstance(value, str) or not value.strip():
            continue
        if not _credential_header(name):
            continue
        value = value.strip()
        register_secret(value)
        credential = value.partition(" ")[2]
        if credential.strip():
            register_secret(credential)
        if "://" in value and "@" in value:
            try:
                parts = urlsplit(value)
                held = parts.password or parts.username
            except ValueError:
                held = None
            if held:
                register_secret(held)
                register_secret(unquote(held))


def _parse(text: str) -> dict[str, str]:
    """``name=value,name=value`` as the OTLP exporters read it (values percent-encoded); a
    piece without ``=`` is skipped, as they skip it."""
    out: dict[str, str] = {}
    for item in text.split(","):
        name, eq, value = item.partition("=")
        if eq and name.strip():
            out[unquote(name.strip())] = unquote(value.strip())
    return out


def register_otlp_headers(env: Mapping[str, str] | None = None) -> None:
    """Register the credentials among the headers the ``OTEL_*`` environment gives the OTLP
    exporter (``register_header_values``); nothing when none is set."""
    env = os.environ if env is None else env
    for var in _HEADER_VARS:
        text = env.get(var)
        if text:
            register_header_values(_parse(text))
