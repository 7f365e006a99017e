"""The redaction net's substitutions beside its shapes: JWTs, curl -u, Docker auth, Twilio."""

from __future__ import annotations

import base64
import functools
import re

from ._redact_shapes import BARE, NO_ALNUM_BEFORE, REDACTED, WORD_EDGE

# A JSON Web Token (header and payload are base64 JSON objects: ``eyJ`` is ``{"``): ``eyJ``
# at a word's start and 5 or more characters, then ``.eyJ`` and 5 or more, then ``.`` and a
# signature. Not an alternative of ``_SHAPES``: tried at every ``eyJ`` after a ``-`` (a word's
# start), the header's run was scanned to its end from each, and a text of ``x-eyJ`` repeated
# took seconds per 100 KB, growing with its square. Here a run of base64url characters
# followed by ``.eyJ`` is read once from its start (``_JWT_RUN``); it holds a token when an
# ``eyJ`` at a word's start (``_JWT_HEAD``) begins its header, and is masked from its start
# (``Bearer sk-x-eyJ…``: what is glued to the token before a ``-`` is masked with it).
_JWT_RUN = re.compile(
    r"(?<![A-Za-z0-9_-])[A-Za-z0-9_-]{8,}+(?=\.eyJ)\.eyJ[A-Za-z0-9_-]{5,}+\.[A-Za-z0-9_-]*+"
)
_JWT_HEAD = re.compile(WORD_EDGE + "eyJ")  # (after an escaped line break too: ``\neyJ…``)


def jwts(s: str) -> str:
    """``s`` with each JSON Web Token masked (see ``_JWT_RUN``), in one pass of its length."""
    out: list[str] = []
    done = pos = 0
    while (m := _JWT_RUN.search(s, pos)) is not None:
        dot = s.index(".", m.start())  # the header's end
        head = _JWT_HEAD.search(s, m.start(), dot)
        if head is None or dot - head.start() < 8:  # ``eyJ`` and 5 or more
            pos = dot + 1  # the payload may start a token of its own
            continue
        start = m.start()
        if s[start] in "nrt" and s[start - 1 : start] == "\\":
            start += 1  # the run starts with an escape's letter (``\neyJ…``): kept
        out += (s[done:start], REDACTED)  # with what it is glued to (``x-eyJ…``)
        done = pos = m.end()
    return s if not out else "".join(out) + s[done:]


# curl's credentials option: ``-u USER:PASSWORD`` (``--user``, ``-U``/``--proxy-user``, glued
# ``-uUSER:PW``, ``=``, an argument list's next item ``'-u', 'USER:PW'``), the user up to the
# first ``:``. Read only on a command line that names ``curl`` (``curl_users``): ``docker
# run -u 1000:1000`` is a user and a group.
_CURL_USER = (
    r"(?<![\w-])(?:-[uU]|--(?:proxy-)?user)(?:[ \t]++|=|\\*+['\"],[ \t]*+)?+\\*+['\"]?+"
    r"(?P<user>[^\s'\":\\]*+):(?!\*\*\*)(?P<pw>" + BARE + ")?"
)
_CURL_WORD = r"(?<![\w.-])curl(?:\.exe)?(?![\w-])"
# a line's end that is not continued: a raw line break, or an escaped one (``\n`` in a printed
# or JSON string), unless a backslash is before it (a shell's continuation)
_LINE_BREAK = r"(?<!\\)\n|(?<!\\\\)\\n"
_CURL_SPAN = 2000  # how far back from its option a ``curl`` is looked for


@functools.cache
def compiled_pattern(pattern: str) -> re.Pattern[str]:
    """The passes' expressions, compiled when first used (most processes never meet a ``curl
    -u`` or an ``auth`` key: 3 M instructions less at import)."""
    return re.compile(pattern)


def curl_users(s: str) -> str:
    """``s`` with the password of each ``curl -u USER:PASSWORD`` masked (``USER:***``; a user
    alone, ``-u KEY:``, an API key as the user name, is masked itself when 6 or more
    characters). One pass: the ``curl`` words and line breaks before each option are found
    by scans that go forward with the options (each character read once)."""
    out: list[str] = []
    done = seen = 0
    curl = brk = -1
    words, breaks = compiled_pattern(_CURL_WORD), compiled_pattern(_LINE_BREAK)
    for m in compiled_pattern(_CURL_USER).finditer(s):
        i = m.start()
        for c in words.finditer(s, seen, i):
            curl = c.start()
        for b in breaks.finditer(s, seen, i):
            brk = b.start()
        seen = i
        if curl < 0 or brk > curl or i - curl > _CURL_SPAN:
            continue
        span = m.span("pw") if m.group("pw") else m.span("user")
        if span[1] - span[0] < (1 if m.group("pw") else MIN_USER_KEY):
            continue
        out += (s[done : span[0]], REDACTED)
        done = span[1]
    return s if not out else "".join(out) + s[done:]


MIN_USER_KEY = 6  # ``-u KEY:``: a user name alone masked from this length


# Docker's ``config.json`` (and a Basic credential kept under ``auth`` elsewhere): the value of
# a quoted ``auth`` key that is base64 of ``user:password`` (``basic_pair``)
_AUTH_VALUE = (
    r"(?<=['\"])auth\\*+['\"]\s*+:\s*+\\*+['\"](?P<v>[A-Za-z0-9+/]{4,}+={0,2}+)(?=\\*+['\"])"
)


def basic_pair(value: str) -> bool:
    """Whether ``value`` is base64 of ``user:password`` (printable UTF-8 text with a ``:``
    between two non-empty parts): Docker's ``auth``; ``"auth": "oauth2"`` is a name."""
    if len(value) < 4 or len(value) > 4096:
        return False
    try:
        text = base64.b64decode(value + "=" * (-len(value) % 4), validate=True).decode()
    except ValueError:  # (binascii.Error and UnicodeDecodeError are ValueErrors)
        return False
    user, colon, password = text.partition(":")
    return bool(colon and user and password and text.isprintable())


def auth_values(s: str) -> str:
    """``s`` with each quoted ``auth`` key's base64 ``user:password`` value masked."""

    def one(m: re.Match[str]) -> str:
        if not basic_pair(m.group("v")):
            return m.group(0)
        return m.group(0)[: m.start("v") - m.start()] + REDACTED

    return compiled_pattern(_AUTH_VALUE).sub(one, s)


# A Twilio account's SID (``AC`` and 32 hex digits) and, in the same text, an auth token
# written apart from it (32 hex digits standing alone: ``sid AC… token 5d1e…``, two lines of a
# config): the token has no shape of its own, but beside an account's SID a bare run of 32 hex
# digits is its token far more often than anything else (Twilio's other SIDs are prefixed:
# ``SM…``, ``CA…``). The SID itself stays (an identifier).
_TWILIO_ACCOUNT = r"(?<![A-Za-z0-9])AC[0-9a-f]{32}(?![A-Za-z0-9])"
_TWILIO_TOKEN = NO_ALNUM_BEFORE + r"[0-9a-f]{32}(?![A-Za-z0-9])"


def twilio_tokens(s: str) -> str:
    """``s`` with each bare run of 32 hex digits masked where ``s`` names a Twilio account's
    SID (``_TWILIO_ACCOUNT``); ``s`` itself (no copy) where it names none."""
    if compiled_pattern(_TWILIO_ACCOUNT).search(s) is None:
        return s
    return compiled_pattern(_TWILIO_TOKEN).sub(REDACTED, s)


def masked_shape(m: re.Match[str]) -> str:
    group = m.lastgroup  # the kept part's name (each alternative has at most one)
    if group is None:
        return REDACTED
    if group == "url":
        return m.group(group) + REDACTED + "@"
    if group == "encurl":
        return m.group(group) + REDACTED + "%40"
    if group == "twilio":  # an account's SID stays, an API key's SID is masked
        sid = m.group("twsid")
        return (sid if sid.startswith("AC") else REDACTED) + m.group("twsep") + REDACTED
    return m.group(group) + REDACTED
