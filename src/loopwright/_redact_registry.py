"""The redaction net's registry: secret values (environment, registered) and field names."""

from __future__ import annotations

import os
import re
import threading
from typing import Any

from ._redact_forms import written_forms
from ._redact_runs import register_runs, runs_state

MIN_SECRET_LEN = 6
"""Shorter values are not masked by value (they would mask ordinary text); their keys and
shapes still are."""

SECRET_FIELDS: frozenset[str] = frozenset(
    {
        "password",
        "passwd",
        "pwd",
        "passphrase",
        "secret",
        "secret_key",
        "client_secret",
        "api_key",
        "apikey",
        "access_key",
        # Azure storage's key (``{"AccountKey": …}``, ``account_key``, ``accountkey``)
        "account_key",
        "accountkey",
        "private_key",
        "token",
        "access_token",
        "refresh_token",
        "id_token",
        "auth_token",
        "bearer",
        "authorization",
        "credentials",
        "cookie",
        "session_key",
    }
)
"""Mapping keys whose values are always masked (compared lower-cased, ``-`` read as ``_``)."""

# (``MYSQL_PWD`` is MySQL's password variable, ``SMTP_PASS`` a common spelling; ``PWD`` and
# ``OLDPWD``, the shell's directories, have no ``_`` before it)
_ENV_NAME = re.compile(
    r"(?:_KEY|_TOKEN|_SECRET|_APIKEY|_PWD|_PASS)$|PASSWORD|PASSWD", re.IGNORECASE
)

# A mapping key ending in one of these (after ``field_key``'s normalising: ``x-api-key`` is
# ``x_api_key``), or holding ``password``/``passwd``, is named like a secret too: ``db_password``,
# ``OPENAI_API_KEY``, ``github_token``, an HTTP header's ``Proxy-Authorization`` (Basic
# credentials) or ``Set-Cookie``. (Not every ``*field_key``: ``task_key`` is a name.)
SECRET_SUFFIXES = (
    "_authorization",
    "_cookie",
    "_credentials",
    "_passphrase",
    "_secret",
    "_api_key",
    "_apikey",
    "_token",
    "_access_key",
    "_account_key",
    "_private_key",
    "_secret_key",
)


def secret_name(k: str, fields: frozenset[str]) -> bool:
    """Whether normalised key ``k`` names a secret."""
    return k in fields or "passw" in k or k.endswith(SECRET_SUFFIXES)


# A lower-case letter or digit followed by a capital: where a name in camelCase or PascalCase
# (``SessionToken``, ``clientSecret``) has the ``_`` of its snake_case spelling
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_camels: dict[str, bool] = {}


def camel_secret(name: str) -> bool:
    """Whether mapping key ``name``, written in camelCase or PascalCase, names a secret of
    ``SECRET_FIELDS`` read as snake_case (``SecretAccessKey`` and ``SessionToken`` of AWS's
    credentials, ``clientSecret``, ``refreshToken``, ``privateKey``); ``taskKey``,
    ``maxTokens`` are not. Decided once per name (mapping keys repeat)."""
    hit = _camels.get(name)
    if hit is None:
        split = _CAMEL.sub("_", name.strip())
        hit = len(split) > len(name.strip()) and secret_name(
            split.lower().replace("-", "_"), SECRET_FIELDS
        )
        if len(_camels) < 10_000:
            _camels[name] = hit
    return hit


registry_lock = threading.Lock()
registered_names: set[str] = set()
registered_fields: set[str] = set()
# [environment snapshot, secret values], replaced whole (one assignment: thread-safe enough).
_env_cache: list[Any] = [None, ()]


# The dummy keys local servers are given (their docs' own examples: vLLM "EMPTY", Ollama
# "ollama", LM Studio "lm-studio" / "not-needed", llama.cpp "sk-no-key-required"): no secret,
# and masking one would mask that word in every model name and prompt ("ollama/llama3").
PLACEHOLDER_KEYS = frozenset(
    {
        "empty", "ollama", "lm-studio", "lmstudio", "not-needed", "sk-no-key-required",
        "no-key", "none", "dummy", "placeholder", "offline", "local", "sk-local", "sk-dummy",
    }
)  # fmt: skip


def _placeholder(value: str) -> bool:
    return value.lower() in PLACEHOLDER_KEYS


def register_secret(value: str | None) -> None:
    """Mask ``value`` wherever it appears from now on (the adapters register their API keys).
    Values shorter than ``MIN_SECRET_LEN`` and ``PLACEHOLDER_KEYS`` are ignored."""
    if not isinstance(value, str):
        return
    value = value.strip()
    if len(value) >= MIN_SECRET_LEN and not _placeholder(value):
        with registry_lock:
            registered_names.update(written_forms(value))
        register_runs(value, registered_names)  # and its pieces (``_redact_runs``)


RegistryState = tuple[frozenset[str], frozenset[str], Any]
reset_count = [0]  # how many times ``reset`` ran: what was registered once may be gone since


def resets() -> int:
    """How many times ``reset`` has run in this process (a memo of "registered already",
    ``_spec.register_run_secrets``'s, holds only while this is unchanged)."""
    return reset_count[0]


def registry_state() -> RegistryState:
    """What is registered now: the values, the field names and the index of the values'
    pieces (``_redact_runs``), for ``reset``."""
    with registry_lock:
        return frozenset(registered_names), frozenset(registered_fields), runs_state()


def register_secret_field(name: str) -> None:
    """Mask the value of every mapping key called ``name`` from now on (a spec's
    ``secret_fields``)."""
    if isinstance(name, str) and name.strip():
        with registry_lock:
            registered_fields.add(field_key(name))


_keys: dict[str, str] = {}


def field_key(name: str) -> str:
    # Mapping keys repeat (every record has the same ones): normalise each once.
    k = _keys.get(name)
    if k is None:
        k = name.strip().lower().replace("-", "_")
        if len(_keys) < 10_000:
            _keys[name] = k
    return k


def env_secrets() -> tuple[str, ...]:
    """Values of secret-looking environment variables, longest first; recomputed only when
    those variables change."""
    # A C-level comparison with a copy of the raw environment decides whether the cache still
    # holds (no snapshot is built per call: this runs on every commit).
    raw = getattr(os.environ, "_data", None)
    current = raw if isinstance(raw, dict) else dict(os.environ)
    cached = _env_cache[0]
    values: tuple[str, ...] = _env_cache[1]
    if current != cached:
        snapshot = dict(current)
        values = tuple(
            sorted(
                {
                    form
                    for k, v in os.environ.items()
                    if len(v) >= MIN_SECRET_LEN
                    and _ENV_NAME.search(k) is not None
                    and not _placeholder(v.strip())
                    for form in written_forms(v)
                },
                key=len,
                reverse=True,
            )
        )
        _env_cache[:] = [snapshot, values]
    return values


def secret_values() -> tuple[str, ...]:
    env = env_secrets()
    if not registered_names:
        return env
    with registry_lock:
        extra = tuple(registered_names)
    return tuple(sorted(set(env).union(extra), key=len, reverse=True))


def fields_now() -> frozenset[str]:
    """``SECRET_FIELDS`` and the names registered since (the same object when none are)."""
    if not registered_fields:
        return SECRET_FIELDS
    with registry_lock:
        return SECRET_FIELDS | registered_fields


def any_registered() -> bool:
    """Whether a value was given to ``register_secret`` (no call into the walk when none)."""
    return bool(registered_names)
