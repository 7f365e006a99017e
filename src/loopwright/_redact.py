"""Redaction: secrets become ``***`` before data is stored, exported, logged or shown.

``redact(obj)`` walks JSON-like data (mappings, lists, tuples, strings, numbers) and returns it
with secrets masked; the input is never modified (containers with nothing to mask are returned
as they are, so the common case allocates nothing). What counts as a secret:

* in any string: the values of environment variables whose names look secret (``*_KEY``,
  ``*_TOKEN``, ``*_SECRET``, ``*_API_KEY``, ``*PASSWORD*``, ``*PASSWD*``, ``*_PWD``,
  ``*_PASS``; values of at least
  ``MIN_SECRET_LEN`` characters, so that ``DEBUG_KEY=1`` does not mask every "1"); values
  registered with ``register_secret`` (the model adapters register their API keys);
  credentials in URLs (``scheme://user:pw@host`` and ``scheme://TOKEN@host`` →
  ``scheme://***@host``) and credential-like query parameters (``?api_key=…``,
  ``?sslpassword=…``); well-known key shapes (``sk-…``, ``Bearer …``, ``Authorization: <scheme>
  …``, GitHub, Slack, AWS, Google, Hugging Face and GitLab tokens, loopwright's own ``lw_…``
  user tokens, SendGrid keys, Twilio API key SIDs and a secret written after a SID or, in a
  text naming an account's SID, apart from it, JWTs); a ``.netrc`` entry's password, ``curl -u USER:PASSWORD``, Docker's base64 ``"auth"``
  (``_redact_substitutions.curl_users``, ``auth_values``); ``password=…`` (``DB_PASSWORD=…``),
  ``github_token=…``,
  ``{'token': '…'}`` (``{'pwd': …}``, ``{'cookie': …}``, ``{'private_key': …}``; a quoted
  value read to its closing quote, an escaped quote inside it), ``pwd=…``, a command line's
  ``--password VALUE`` (``'--password', '…'``), a log's ``token: VALUE``, HTTP ``Cookie:`` and
  ``Set-Cookie:`` lines and URL-encoded ``password%3D…`` written into text; a known value
  also in base64 (``base64_cores``) and hex (``hex_forms``), percent-encoded and as Go and
  PHP escape it in JSON (``escaped_forms``);
* in a mapping: the value of a key named like a secret (``password``, ``api_key``, ``token``,
  ``secret``, … — ``SECRET_FIELDS``) or ending like one (``github_token``), whatever its case
  and the spaces around it, in camelCase too (``SessionToken``: ``camel_secret``), plus the names given as ``secret_fields`` or registered with
  ``register_secret_field`` (a spec's ``secret_fields``). Numbers and booleans under such a key
  are kept (a fencing ``token`` is a counter, not a credential).

It is meant to run on every write, so it is cheap: patterns are compiled once, the environment's
secret values are cached until the environment changes, and a string is scanned by one regular
expression plus one substring test per known secret value. What it cannot know about (a
secret with no recognisable shape, in a variable with an ordinary name, never registered) is
not masked: see docs/security.md.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from typing import Any

from ._json import numbered_key
from ._redact_anchors import shapes_sub
from ._redact_any import surely_untriggered
from ._redact_forms import (  # noqa: F401  (re-exported: their home before the split)
    base64_cores,
    encoded_of,
    escaped_forms,
    hex_forms,
    mask_base64,
)
from ._redact_registry import (  # noqa: F401  (re-exported: their home before the split)
    MIN_SECRET_LEN,
    SECRET_FIELDS,
    SECRET_SUFFIXES,
    RegistryState,
    any_registered,
    camel_secret,
    env_secrets,
    field_key,
    fields_now,
    register_secret,
    register_secret_field,
    registered_fields,
    registered_names,
    registry_lock,
    registry_state,
    reset_count,
    secret_name,
    secret_values,
)
from ._redact_runs import any_run, mask_runs, restore_runs
from ._redact_shapes import (  # noqa: F401  (re-exported: their home before the split)
    PREFILTER,
    REDACTED,
    SHAPES,
    TRIGGER_IN,
    TRIGGERS,
    quoted_value,
    trie,
    triggered,
    upper_triggered,
)
from ._redact_substitutions import (  # noqa: F401  (re-exported: their home before the split)
    auth_values,
    basic_pair,
    curl_users,
    jwts,
    masked_shape,
    twilio_tokens,
)

try:
    import orjson
except ImportError:  # pragma: no cover - orjson is a core dependency
    orjson = None  # type: ignore[assignment]

__all__ = [
    "MIN_SECRET_LEN",
    "REDACTED",
    "SECRET_FIELDS",
    "redact",
    "redact_text",
    "register_secret",
    "register_secret_field",
]


def reset(state: RegistryState | None = None) -> None:
    """Back to ``state`` (``registry_state``; None: nothing registered, as a process starts):
    the values, the field names, and the index of the values' pieces with them. Emptying
    the values alone left their pieces indexed: a former value's 16-character piece was
    still masked. The cache of texts found clean is emptied too (tests: ``conftest``)."""
    values, fields, runs = state if state is not None else (frozenset(), frozenset(), None)
    with registry_lock:
        registered_names.intersection_update(values)
        registered_names.update(values)
        registered_fields.intersection_update(fields)
        registered_fields.update(fields)
        restore_runs(runs)
        reset_count[0] += 1
    _clean_texts.clear()


_exact: dict[tuple[str, ...], re.Pattern[str] | None] = {}


def _values_pattern(values: tuple[str, ...]) -> re.Pattern[str] | None:
    pat = _exact.get(values, False)
    if pat is False:
        pat = re.compile("|".join(re.escape(v) for v in values)) if values else None
        if len(_exact) > 64:  # the environment changed many times: start over
            _exact.clear()
        _exact[values] = pat
    return pat  # type: ignore[return-value]


def _text(s: str, values: tuple[str, ...], fields: frozenset[str] = SECRET_FIELDS) -> str:
    # The shortest thing masked is 6 characters (a secret value; every shape is longer), and
    # most strings in a record are short names: those are passed over at once.
    if len(s) < MIN_SECRET_LEN:
        return s
    exact = _values_pattern(values)
    if exact is not None and exact.search(s) is not None:
        for v in values:
            if v in s:
                s = s.replace(v, REDACTED)
    if values:
        runs, forms, _, _ = encoded_of(values)
        for core in runs:
            if core in s:
                s = mask_base64(s, core)
        for form in forms:
            if form in s:
                s = s.replace(form, REDACTED)
    if registered_names:  # pieces of a registered value, once its whole forms are masked
        s = mask_runs(s, registered_names)
    if fields is not SECRET_FIELDS:
        s = _declared_text(s, fields)
    if ".eyJ" in s:
        s = jwts(s)
    low = s.lower()
    if not triggered(low) and not upper_triggered(s, low):
        return s
    seen = s
    if "-u" in low and "curl" in low:
        s = curl_users(s)
    if "auth" in low:
        s = auth_values(s)
    if "AC" in s:
        s = twilio_tokens(s)
    s = shapes_sub(s, low if s is seen or s == seen else s.lower())
    if "bearer" in low or "authorization" in low:
        s = _SHORT_AUTH.sub(_short_auth, s)
    return s


# An HTTP ``Authorization`` header's credentials under 8 characters, which the shapes leave
# (``SHAPES``' ``auth`` and ``bearer`` take 8 or more, so that prose after the word is kept):
# after ``Authorization:`` and a scheme of Bearer, Basic or Token, whatever its length; after
# a bare ``Bearer`` (a header's value echoed alone: ``invalid token Bearer abc12``), 3 to 7
# characters holding a letter and a digit (``Bearer tokens``, ``Bearer 2`` are prose).
_AUTH_CHARS = r"[A-Za-z0-9._~+/=-]"
_SHORT_AUTH = re.compile(
    r"(?P<kept>(?i:authorization)\\*+['\"]?\s*+[=:]\s*+\\*+['\"]?(?i:bearer|basic|token)\s++)"
    rf"(?!\*\*\*){_AUTH_CHARS}{{1,7}}+(?!{_AUTH_CHARS}|\*)"
    r"|(?P<bare>\b(?i:bearer)\s++)(?!\*\*\*)"
    rf"(?=[A-Za-z._~+/=-]*[0-9])(?=[0-9._~+/=-]*[A-Za-z]){_AUTH_CHARS}{{3,7}}+(?!{_AUTH_CHARS}|\*)"
)


def _short_auth(m: re.Match[str]) -> str:
    return (m.group("kept") or m.group("bare")) + REDACTED


@functools.lru_cache(maxsize=64)
def _declared(fields: frozenset[str]) -> tuple[str, ...]:
    """The names declared secret besides ``SECRET_FIELDS`` (a spec's ``secret_fields``), as
    ``field_key`` normalises them."""
    return tuple(sorted(fields - SECRET_FIELDS))


@functools.lru_cache(maxsize=64)
def _declared_pattern(names: tuple[str, ...]) -> re.Pattern[str]:
    """A printed mapping's or a keyword's quoted value under one of ``names``."""
    alt = "|".join(re.escape(n).replace("_", "[-_]") for n in names)
    return re.compile(
        rf"(?P<kept>(?:['\"]\s*(?i:{alt})\s*\\*+['\"]\s*:|\b(?i:{alt})\s*=)\s*\\*+['\"])"
        r"(?!\*\*\*)" + quoted_value(r"(?:[^'\"\\]++|\\(?!['\"]))++")
    )


def _declared_text(s: str, fields: frozenset[str]) -> str:
    """``s`` with the value of each declared secret field written into text masked: a printed
    mapping (``{'iban': '…'}``, its quotes escaped too) or a keyword (``Cfg(iban='…')``), as
    the names of ``SECRET_FIELDS`` are by ``SHAPES``. Only quoted values: a number is kept,
    as it is under such a key in a mapping."""
    names = _declared(fields)
    low = s.lower()
    if not any(n in low or n.replace("_", "-") in low for n in names):
        return s
    return _declared_pattern(names).sub(lambda m: m.group("kept") + REDACTED, s)


def redact_text(text: str) -> str:
    """``text`` with every secret it contains masked (see the module's list)."""
    return _text(text, secret_values(), fields_now())


_NO_FIELDS: frozenset[str] = frozenset()


def redact(obj: Any, *, secret_fields: Iterable[str] = ()) -> Any:
    """A copy of ``obj`` (JSON-like data) with secrets masked; see the module docstring.

    ``secret_fields`` adds mapping keys whose values are masked (besides ``SECRET_FIELDS`` and
    registered ones). Numbers, booleans and ``None`` are returned as they are; any other object
    (a dataclass, a date, bytes, an exception) may come back as its masked ``str()``, which is
    what the stores write for it; a mapping key that is not text likewise.
    """
    # (``secret_values`` written out for the common case, no registered secret: one call less)
    values = env_secrets() if not registered_names else secret_values()
    fields = SECRET_FIELDS
    # (no set built for the engine's calls, which name no field: two a cycle)
    extra = {field_key(f) for f in secret_fields} if secret_fields != () else _NO_FIELDS
    if registered_fields or extra:
        with registry_lock:
            fields = SECRET_FIELDS | registered_fields | extra
    if not isinstance(obj, str) and _clean(obj, values, fields):
        return obj
    return _walk(obj, values, fields, False)


def redact_unique(obj: Any) -> Any:
    """``redact(obj)`` for data whose text never repeats (a cycle's commit: its record names
    its cycle), so the clean texts' cache is neither asked nor filled with it: no hash of the
    whole text, and the cache keeps what does repeat (a verifier's verdict)."""
    values = env_secrets() if not registered_names else secret_values()
    fields = SECRET_FIELDS
    if registered_fields:
        with registry_lock:
            fields = SECRET_FIELDS | registered_fields
    if not isinstance(obj, str) and _clean(obj, values, fields, remember=False):
        return obj
    return _walk(obj, values, fields, False)


def redact_registered(obj: Any) -> Any:
    """``obj`` (JSON-like data) with only the values given to ``register_secret`` masked, as
    they are written and their pieces (``_redact_runs``): for the work itself (an edit's
    value), where a shape or a field's name may be the work, but the process's own API key
    never is. ``obj`` itself where it holds none (no copy)."""
    if not registered_names:
        return obj
    with registry_lock:
        values = tuple(sorted(registered_names, key=len, reverse=True))
    return _registered_in(obj, values, _values_pattern(values))


def _registered_in(obj: Any, values: tuple[str, ...], exact: re.Pattern[str] | None) -> Any:
    if isinstance(obj, str):
        s = obj
        if exact is not None and exact.search(s) is not None:
            s = exact.sub(REDACTED, s)
        if any_run(s.lower(), registered_names):
            s = mask_runs(s, registered_names)
        return obj if s == obj else s
    if isinstance(obj, Mapping):
        # A key is the work too: masked as every write masks one (``_walk``), two keys
        # masked alike both kept, the later one numbered.
        out: dict[Any, Any] = {}
        same = True
        for k, v in obj.items():
            nv = _registered_in(v, values, exact)
            nk = _registered_in(k, values, exact) if isinstance(k, str) else k
            if nk in out:  # (only a masked key can meet another)
                nk = numbered_key(str(nk), out)
            same = same and nv is v and nk is k
            out[nk] = nv
        return obj if same else out
    if isinstance(obj, list | tuple):
        items = [_registered_in(v, values, exact) for v in obj]
        if all(a is b for a, b in zip(items, obj, strict=True)):
            return obj
        return items if isinstance(obj, list) else tuple(items)
    return obj


_key_patterns: dict[frozenset[str], tuple[re.Pattern[str], re.Pattern[str]] | None] = {}

# What ``field_key`` strips after a key, as it reads in *reversed* JSON text: whitespace as it is, or
# an escape backwards (``\t`` is ``t\``, ``\u001c`` is ``c100u\``); any escape is taken, to
# err towards the full check.
_SPACE_REVERSED = r"(?:\s|[a-z]\\|[0-9a-f]{4}u\\)*"


def _key_patterns_of(fields: frozenset[str]) -> tuple[re.Pattern[str], re.Pattern[str]] | None:
    """Two expressions that find, in *reversed* lower-cased JSON text with ``-`` read as ``_``,
    every mapping key ``secret_name`` flags by its name or ending (the names of ``fields``,
    which hold every ``SECRET_SUFFIXES`` without its ``_``): the first right before the key's
    closing quote, the second also with what ``field_key`` strips between them (slower: used only
    where the text holds such a character).

    Reversed, because in compact JSON every key, and nothing else outside a string, is followed
    by ``":``: read backwards the expression starts with the two characters ``:"`` and is tried
    at keys only, about a third of the places a pattern starting with ``"`` is tried at. What
    precedes the name is not looked at (``xtoken`` is taken too: the walk decides). None when a
    name is written differently in JSON (a quote, a backslash, a control character): no fast
    path then."""
    if fields in _key_patterns:
        return _key_patterns[fields]
    pats = None
    if all(f and '"' not in f and "\\" not in f and f.isprintable() for f in fields):
        names = trie(n[::-1] for n in fields | {s[1:] for s in SECRET_SUFFIXES})
        pats = (re.compile(f':"(?:{names})'), re.compile(f':"{_SPACE_REVERSED}(?:{names})'))
    if len(_key_patterns) > 64:
        _key_patterns.clear()
    _key_patterns[fields] = pats
    return pats


def _clean(
    obj: Any, values: tuple[str, ...], fields: frozenset[str], remember: bool = True
) -> bool:
    """Whether ``obj`` surely holds nothing to mask, decided on its JSON text in a few passes
    in C: no trigger of a shape, no secret value, no key named like a secret field. This is the
    common case on the engine's write path (every commit), where walking the data in Python
    would cost more than the rest of a cycle. It is a conservative pre-filter: every key that
    ``_walk`` would mask (spaces or tabs around it, any case, ``-`` for ``_``) makes it answer
    no, and so does anything it is unsure of (not JSON, a value JSON would escape)."""
    if orjson is None or (values and _unsure(values)):
        return False
    # (the cache read here: ``_key_patterns_of`` is called once a new set of fields)
    pats = _key_patterns[fields] if fields in _key_patterns else _key_patterns_of(fields)
    if pats is None:
        return False
    try:
        # Dataclasses and dates are left to ``_walk`` (a TypeError here): the stores write them
        # as ``str(obj)`` (``_json.dumps``), which need not be the fields' JSON orjson would
        # scan (a ``__str__`` may print anything).
        text = orjson.dumps(obj, option=_AS_STORED).decode()
    except (TypeError, ValueError):
        return False
    # The same text, with the same secret values and field names, was found clean already:
    # a verifier's verdict often repeats from cycle to cycle while the work is not done.
    if remember and _clean_texts.get(text) == (values, fields):
        return True
    if not _clean_text(text, values, fields, pats):
        return False
    if remember and len(text) <= _CLEAN_TEXT_MAX:
        if len(_clean_texts) >= _CLEAN_TEXTS:
            _clean_texts.clear()
        _clean_texts[text] = (values, fields)  # what it was found clean under
    return True


_AS_STORED = (
    0 if orjson is None else orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME
)

# JSON texts ``_clean`` found clean, each with the (values, fields) it was checked against: at
# most ``_CLEAN_TEXTS`` of at most ``_CLEAN_TEXT_MAX`` characters (under 1 MB).
_CLEAN_TEXTS = 256
_CLEAN_TEXT_MAX = 2048
_clean_texts: dict[str, tuple[tuple[str, ...], frozenset[str]]] = {}


def _clean_text(
    text: str,
    values: tuple[str, ...],
    fields: frozenset[str],
    pats: tuple[re.Pattern[str], re.Pattern[str]],
) -> bool:
    """``_clean``'s decision on the JSON text of the data."""
    low = text.lower()
    # Inside a JSON string a quote reads ``\"``: a string quoting a mapping ({"token": …} in
    # an error message) is tested as the text it holds, as ``_text`` will read it.
    # (Only the triggers ``token"`` and ``secret"`` hold a quote: the copy is made for them.)
    # (``\\`` first: one character, found by ``memchr``; most records hold none)
    quoted = (
        low.replace('\\"', '"')
        if "\\" in low and '\\"' in low and ("token" in low or "secret" in low)
        else low
    )
    # a key holding ``passw`` is a secret's name wherever it is (``quoted`` holds it where
    # ``low`` does: only a backslash before a quote is dropped)
    # (one pass of an automaton on the clean text, the common case, where the package is there)
    hit = False if surely_untriggered(quoted) else triggered(quoted, passw=True)
    if hit or upper_triggered(text, low):
        return False
    # (no secret value known, the common case without one in the environment: no call)
    exact = _values_pattern(values) if values else None
    if exact is not None:
        if exact.search(text) is not None:
            return False
        _, _, in_json, hexes = encoded_of(values)
        for core in in_json:
            if core in text:
                return False
        for core in hexes:
            if core in low:
                return False
        if registered_names and any_run(low, registered_names):  # a piece of one (``_redact_runs``)
            return False
    # Whitespace between a key's name and its closing quote is a raw space, an escape (JSON
    # escapes every other ASCII space) or a character beyond ASCII. (Read before ``-`` is
    # replaced below: the replacement changes none of the three.)
    spaced = "\\" in low or ' ":' in low or not low.isascii()
    if not spaced and fields is SECRET_FIELDS and hit is False:
        # No trigger, and neither ``private`` nor ``session``: every name of ``SECRET_FIELDS``
        # and ``SECRET_SUFFIXES`` written plainly as a key (``"name":``) holds one of those
        # (``"token":`` the trigger ``token"``, ``"session_key":`` the word ``session``; a unit
        # test checks every name), so no key of these names is in the text: the reversed copy
        # and the key pattern's pass over it are not needed — nor the copy with ``-`` replaced
        # (a float's exponent puts one in most of the engine's records: cpu54).
        return True
    if "-" in low:  # ``field_key`` reads ``x-api-key`` (and ``x_api-key``) as ``x_api_key``
        low = low.replace("-", "_")
    if fields is not SECRET_FIELDS and any(n in low for n in _declared(fields)):
        return False  # a declared name, as a key or in a text (a printed mapping): the walk
    return pats[spaced].search(low[::-1]) is None


@functools.lru_cache(maxsize=64)
def _unsure(values: tuple[str, ...]) -> bool:
    """Whether a secret value could be written differently in JSON text (escaped)."""
    return any(('"' in v or "\\" in v or not v.isprintable()) for v in values)


def _walk(obj: Any, values: tuple[str, ...], fields: frozenset[str], masked: bool) -> Any:
    if isinstance(obj, str):
        if masked:
            return REDACTED if obj else obj
        return _text(obj, values, fields)
    if isinstance(obj, Mapping):
        out: dict[Any, Any] | None = None
        for i, (k, v) in enumerate(obj.items()):
            # A key is stored as text: a string as it is, anything but a number or a literal
            # as its ``str()`` (``_json``). That text is read, under a masked key too (the
            # key stays, its secrets masked: ``{"password": {"<the value>": 1}}``).
            if isinstance(k, str) or k is None or isinstance(k, bool | int | float):
                sk = k
            else:
                try:
                    sk = str(k)
                except Exception:  # user code's ``__str__``: ``_json`` writes this name for it
                    sk = f"<{type(k).__name__}>"
            # (a key ``auth`` holding base64 ``user:password``: Docker's, ``basic_pair``)
            hide = masked or (
                isinstance(sk, str)
                and (
                    secret_name(field_key(sk), fields)
                    or camel_secret(sk)
                    or (sk == "auth" and isinstance(v, str) and basic_pair(v))
                )
            )
            nv = _walk(v, values, fields, hide)
            nk = k
            if isinstance(sk, str):
                t = _text(sk, values, fields)
                if t is not sk:
                    nk = t
            if out is None and (nv is not v or nk is not k):
                out = dict(list(obj.items())[:i])
            if out is not None:
                if nk in out:  # two keys masked alike: both kept, the later one numbered
                    nk = numbered_key(str(nk), out)
                out[nk] = nv
        if out is not None:
            return out
        return obj if isinstance(obj, dict) else dict(obj)
    if isinstance(obj, list | tuple):
        changed: list[Any] | None = None
        for i, v in enumerate(obj):
            nv = _walk(v, values, fields, masked)
            if changed is None and nv is not v:
                changed = list(obj[:i])
            if changed is not None:
                changed.append(nv)
        if changed is None:
            return obj
        return changed if isinstance(obj, list) else tuple(changed)
    if obj is None or isinstance(obj, bool | int | float):
        return obj
    # Anything else (an exception, bytes, a dataclass, a date) is stored as its text (JSON's
    # ``default=str``): that text is what is masked.
    text = str(obj)
    if masked:
        return REDACTED if text else text
    return _text(text, values, fields)
