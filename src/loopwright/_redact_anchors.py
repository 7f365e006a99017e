"""The redaction net's shape search, tried only where a shape can start (stop 51).

``SHAPES.sub`` tries each of its alternatives at each character of a text that passed the
pre-check (``_triggered``), which code always does (it holds ``=``): about 2 µs a character,
95 % of an LDB import's time. Yet every alternative holds a fixed text at or near its start
(``token``, ``://``, ``(``, a key's prefix): one scan of the lower-cased text finds those
texts (a literal search, a few ns a character), and each tells the few places where an
alternative could start. ``shapes_sub`` tries the alternatives alone at those places, in
order, skipping those inside a masked span, and where one matches takes ``SHAPES.match``
there: the matches ``SHAPES.sub`` makes, masked the same (``masked_shape``), provided no place an
alternative matches is left out. Each rule below says why its places hold every start.

The lower-cased text stands for the text in the scan: outside ASCII only four letters match
an ASCII one under ``(?i)`` (İ ı ſ K), and in a text holding one of them each is read as
that ASCII letter (``_FOLD``). Where a name's run of ``[A-Za-z0-9_-]`` is read, such a letter
makes it start earlier than it does: the places tried are more, none is lost (a name that
starts right after such a letter has neither a quote nor a non-word character before it).
"""

from __future__ import annotations

import functools
import re

from ._redact_shapes import SHAPE_ALTERNATIVES, SHAPES, trie
from ._redact_substitutions import compiled_pattern, masked_shape

# The characters of ``[A-Za-z0-9_-]`` lower-cased: a secret's name before its keyword
# (``_NAME_BEFORE``, an option's words in ``_FLAG``), and of a URL's scheme
_NAME_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789_-"
_SCHEME_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789+.-"
_SCHEME_MAX = 21  # ``[A-Za-z][A-Za-z0-9+.-]{0,20}``
# The four letters beyond ASCII that ``(?i)`` reads as ASCII ones (İ ı ſ K), as the scan
# reads them (``str.lower`` makes İ two characters; the others it keeps or makes ``k``)
_ODD = ("\u0130", "\u0131", "\u017f", "\u212a")
_FOLD = tuple(zip(_ODD, "iisk", strict=True))

# The keywords the scan looks for in the lower-cased text (none a prefix of another: at a
# place at most one is found), and for each the alternatives that start right at it (a
# ``cookie`` also four characters before: ``set-``)
_AT = {
    "bearer": ("bearer",),
    "authorization": ("auth",),
    "cookie": ("cookie",),
    "passw": ("conn", "enc"),  # ``passw(?:or)?d``
    "api": ("conn", "enc"),  # ``api[_-]?key``
    "access": ("conn",),  # ``access[_-]?token`` (``shared`` before ``access[_-]?key``)
    "accountkey": ("conn",),
    "account_key": ("conn",),
    "account-key": ("conn",),
    "secret": ("conn", "kv", "logkv", "enc"),  # (and ``client[_-]?secret`` before it)
    "token": ("kv", "logkv", "enc"),
    "pwd": ("pwd",),
    "machine": ("netrc", "netrcfirst"),
    "default": ("netrc", "netrcfirst"),
    "-----begin ": ("pem",),
}
# Keywords of a printed mapping's key (``qkey``: after a quote and a name of ``_NAME_CHARS``)
# and of a command line's option (``flagq``, ``flag``, ``flaglow``: after ``-`` and words of
# them); ``credentials``, ``private`` and ``session`` start no alternative themselves
_QKEY_WORDS = frozenset(
    (
        *("token", "secret", "pwd", "passphrase", "cookie", "credentials", "bearer"),
        *("private", "session", "access", "authorization"),
    )
)
_FLAG_WORDS = frozenset(("passw", "pwd", "passphrase", "token", "secret", "api"))
# The beginnings of the keys' own shapes (``keys``, case-sensitive, so found lower-cased
# too), but for Twilio's ``SK`` and ``AC`` (and 32 hex digits): too common in lower case,
# looked for in the text itself. A unit test checks that each key starts with one.
KEY_HEADS = (
    *("sk_live_", "sk_test_", "rk_live_", "rk_test_", "sk-", "github_pat_", "xox", "akia"),
    *("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "asia", "aiza", "hf_", "glpat-", "gsk_", "xai-"),
    *("pplx-", "npm_", "pypi-age", "ya29.", "gocspx-", "xapp-", "dop_v1_", "shp", "r8_", "lw_"),
    *("sg.", "nvapi-", "tvly-", "pcsk_", "whsec_", "doo_v1_", "dor_v1_", "lsv2_", "csk-"),
    *("fw_", "lin_api_", "ntn_", "dp.", "sntry", "atatt3"),
)
_TWILIO_HEADS = ("SK", "AC")
_HEX = frozenset("0123456789abcdef")
_KEY = frozenset(KEY_HEADS)
_SEPARATES = ("://", "%3a%2f%2f")  # a scheme before them (``url``, ``hook``; ``encurl``)
# (the scan's expressions compiled when first used, by ``compiled_pattern``: most processes never
# search a text for shapes)
WORDS = trie((*_AT, *_QKEY_WORDS, *_FLAG_WORDS, *KEY_HEADS, *_SEPARATES))
# An URL-encoded ``?name=`` (``query``): ``[?&;]``, a name and ``=`` (no ``[?&;]`` inside a
# match: each start is found by ``finditer``)
_QUERY_HEAD = r"[?&;][a-z0-9_.-]*+="
# A header list's pair (``hpair``) up to its name's opening quote (no ``(`` inside a match)
_HPAIR_HEAD = r"\(\s*+b?\\*+['\"]"
_HEADER_WORDS = ("authorization", "cookie", "api", "token")  # ``_HEADER``'s names hold one

# Every alternative of ``SHAPES`` has a rule here (a unit test checks the names)
ANCHORED = frozenset(
    {n for names in _AT.values() for n in names}
    | {"url", "hook", "encurl", "query", "hpair", "qkey", "flagq", "flag", "flaglow", "keys"}
)


@functools.cache
def _alternatives(names: tuple[str, ...]) -> re.Pattern[str]:
    """The alternatives ``names`` of ``SHAPES`` alone (compiled when first needed)."""
    return re.compile("|".join(SHAPE_ALTERNATIVES[n] for n in names))


def _places(s: str, low: str) -> list[tuple[int, tuple[str, ...]]]:
    """Each place where an alternative of ``SHAPES`` may match in ``s`` (with the names of
    those that may start there): every place one does match is among them."""
    out: list[tuple[int, tuple[str, ...]]] = []
    url_end = enc_end = 0  # where the last ``://`` (``%3a%2f%2f``) ended
    name_at = name_start = -1  # the last keyword of a name, and where its name starts
    headers = False
    pos = 0
    words = compiled_pattern(WORDS)
    while (m := words.search(low, pos)) is not None:
        k = m.start()
        word = m.group()
        pos = k + 1
        if word in _SEPARATES:
            # a scheme of up to 21 characters of ``_SCHEME_CHARS`` right before it, which
            # holds neither ``:`` nor ``/`` nor ``%``: it starts after the last one's end
            lo = max(k - _SCHEME_MAX, url_end if word == "://" else enc_end)
            start = lo + len(low[lo:k].rstrip(_SCHEME_CHARS))
            names = ("url", "hook") if word == "://" else ("encurl",)
            out += [(p, names) for p in range(start, k)]
            if word == "://":
                url_end = k + 3
            else:
                enc_end = k + 9
            continue
        if word in _KEY:
            out.append((k, ("keys",)))
            continue
        if word in _AT:
            out.append((k, _AT[word]))
            if word == "cookie" and k >= 4:
                out.append((k - 4, ("cookie",)))  # ``set-cookie``
            elif word == "secret":  # ``client[_-]?secret``
                out += [(p, ("conn",)) for p in (k - 6, k - 7) if p >= 0]
        headers = headers or word in _HEADER_WORDS
        if word not in _QKEY_WORDS and word not in _FLAG_WORDS:
            continue
        # The name before the keyword: the run of ``_NAME_CHARS`` that ends at it, read back
        # to the last keyword at most (where the run reaches it, it starts where that one's
        # did): each character is read once.
        lo = max(name_at, 0)
        start = lo + len(low[lo:k].rstrip(_NAME_CHARS))
        if start == lo and name_at >= 0:
            start = name_start
        name_at, name_start = k, start
        # a printed mapping's key: its opening quote right before the name (a quote is not
        # one of ``_NAME_CHARS``)
        if word in _QKEY_WORDS and start and s[start - 1] in "'\"":
            out.append((start - 1, ("qkey",)))
        # an option: its first ``-`` starts the name, after a character that is not one of
        # ``[\w-]``, or after an escaped line break or tab (``\n--token``: the ``n`` is in it)
        if word in _FLAG_WORDS:
            if s[start] == "-":
                out.append((start, ("flagq", "flag", "flaglow")))
            if start and s[start - 1] == "\\" and s[start] in "nrt" and s[start + 1] == "-":
                out.append((start + 1, ("flagq", "flag", "flaglow")))
    if "=" in low:
        out += [(q.start(), ("query",)) for q in compiled_pattern(_QUERY_HEAD).finditer(low)]
    if headers:
        out += [(h.start(), ("hpair",)) for h in compiled_pattern(_HPAIR_HEAD).finditer(s)]
    for head in _TWILIO_HEADS:
        i = s.find(head)
        while i >= 0:
            if i + 2 < len(s) and s[i + 2] in _HEX:
                out.append((i, ("keys",)))
            i = s.find(head, i + 2)
    return out


def shapes_sub(s: str, low: str) -> str:
    """``SHAPES.sub(masked_shape, s)``, read only where ``_places`` says a shape may start;
    ``low`` is ``s.lower()``. ``s`` itself where nothing is masked."""
    if not s.isascii() and any(c in s for c in _ODD):
        low = s
        for odd, letter in _FOLD:  # (``str.translate`` reads a long text 20 times slower)
            low = low.replace(odd, letter)
        low = low.lower()
    places = _places(s, low)
    if not places:
        return s
    places.sort()
    out: list[str] = []
    done = 0
    last: tuple[int, tuple[str, ...]] = (-1, ())
    for place in places:
        p, names = place
        # (a place found twice is tried once: each keyword of a name of ``token-token-…``
        # finds the name's start, and a try there reads the whole name)
        if p < done or place == last or _alternatives(names).match(s, p) is None:
            last = place
            continue
        m = SHAPES.match(s, p)  # (one of its alternatives matches here: it does)
        if m is not None:
            out += (s[done:p], masked_shape(m))
            done = m.end()
    return s if not out else "".join(out) + s[done:]
