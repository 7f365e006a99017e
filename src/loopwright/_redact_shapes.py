"""The text patterns of the redaction net (``_redact``): the shapes a secret written into text
takes (``SHAPES``, one expression) and the cheap test that decides whether a text can hold
one at all (``triggered``: substring tests in C before the expression runs), on every write.

Moved out of ``_redact`` (which walks data; the registries are ``_redact_registry``'s)
unchanged; ``_redact`` re-exports every name here that its tests reach.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

from ._redact_keys import LOWER_NEEDLES, LOWER_PREFIXES, PROVIDER_KEYS, mixed_case_key

REDACTED = "***"


class LazyPattern:
    """A regular expression compiled when first used, not at import: every process that
    imports the engine imported this module, and compiling ``SHAPES`` (7,000 characters of
    pattern) was its largest single cost at start-up (8 ms of a child's 130, suite53), paid
    by processes most of which never meet a text that passes the pre-check. ``pattern`` is
    the source, as ``re.Pattern.pattern``; the methods are the compiled pattern's."""

    __slots__ = ("_compiled", "pattern")

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern
        self._compiled: re.Pattern[str] | None = None

    def compiled(self) -> re.Pattern[str]:
        if self._compiled is None:
            self._compiled = re.compile(self.pattern)
        return self._compiled

    def match(self, s: str, pos: int = 0) -> re.Match[str] | None:
        return self.compiled().match(s, pos)

    def search(self, s: str, pos: int = 0) -> re.Match[str] | None:
        return self.compiled().search(s, pos)

    def sub(self, repl: Callable[[re.Match[str]], str] | str, s: str) -> str:
        return self.compiled().sub(repl, s)


def quoted_value(bare: str) -> str:
    """A secret's value after its name: read from its opening quote to the closing one (an
    escaped quote inside is part of it: ``"ab\\"cd"``), one level of escaping deeper too (a
    mapping printed inside a printed string, JSON inside a JSON string: ``\\"ab\\\\\\"cd\\"``,
    where a value's own quote is three backslashes and a quote), else as ``bare`` reads it
    (unquoted, or quoted two levels deep: up to an escaped quote). Each branch is chosen by
    what precedes the value (a lookbehind of fixed width), and every loop is possessive: one
    pass, nothing given back. A quoted value ends at a raw line break too."""
    level0 = r"(?:[^{q}\\\n]++|\\[\s\S])++"
    # one level deeper: ``\\`` then an escape of the level below (``\\\"``, ``\\\\``,
    # ``\\n``), or an escape of this level that is not the closing quote (``\n``)
    level1 = r"(?:[^{q}\\\n]++|\\\\(?:\\[\s\S]|[^\\])|\\[^\\{q}])++"
    return (
        "(?:"
        + "|".join(rf"(?<=\\{q})(?<!\\\\{q}){level1.format(q=q)}" for q in "\"'")
        + "|"
        + "|".join(rf"(?<={q})(?<!\\{q}){level0.format(q=q)}" for q in "\"'")
        + f"|{bare})"
    )


# An escaped line break or tab (``\n`` in a printed or JSON-escaped string) ends a value as a raw
# one does: read on, the value took the next line's name (``password=a\naws_secret_key: …``)
# and left that line's value in clear. An escaped backslash (``\\``) is read as the pair it is:
# one before ``n`` is a line break escaped twice (JSON in a JSON string), and ends the value
# before it, where the value ended between the two backslashes and the masked text read one
# level less escaped (``\\n`` became ``\n``: the inner JSON held a raw line break, unreadable).
# A ``:`` before a space or a line break (raw or escaped) ends it: the sentence's, not the
# value's (``password=hunter2: connection refused`` kept its ``:``, as ``query`` does).
BARE = r"(?:[^\s,;&\"'}\\:]++|:(?!\s|\\[nrt])|\\\\(?![nrt])|\\(?![\"'nrt\\]))++"

# Where a key's shape may start: at a word's start, or right after an escaped line break or tab
# (``'…\nsk-…'``: the ``n`` of the escape is a word character, so ``\b`` is not there and a key
# on the next line of a printed or JSON-escaped text was left in clear).
_ESCAPED = r"(?<=\\[nrt])"
WORD_EDGE = rf"(?:\b|{_ESCAPED})"
NO_ALNUM_BEFORE = rf"(?:(?<![A-Za-z0-9])|{_ESCAPED})"  # (``pwd=``, ``token:``)
_NO_NAME_BEFORE = rf"(?:(?<![A-Za-z0-9_-])|{_ESCAPED})"  # (``Cookie:``, not ``x-cookie:``)

# A ``.netrc`` entry: ``machine HOST login USER password VALUE`` (on one line or several;
# ``default login …``), with a ``login`` among its words, so that prose (``machine learning
# password reset``) is not read as one: the password after ``login USER`` (an ``account
# ACCT`` before or after it: ``machine h login u account a password p``), or first and
# followed by ``login`` or ``account`` (``machine h password p login u``). Between its words
# whitespace, or a line break escaped (in a JSON string); a host or a login is read up to
# those, not ending in ``:``, ``,`` or ``;`` (``default login page: password reset`` is prose).
_NETRC_SEP = r"(?:\s|\\[nrt])++"
_NETRC_TOKEN = r"(?:[^\s\\'\",;:]++|:(?=[^\s\\'\",;:])|\\(?![nrt'\"]))++"
_NETRC_HOST = rf"{WORD_EDGE}(?:machine{_NETRC_SEP}{_NETRC_TOKEN}|default){_NETRC_SEP}"
_NETRC_ACCOUNT = rf"(?:account{_NETRC_SEP}{_NETRC_TOKEN}{_NETRC_SEP})?+"
_NETRC = (
    rf"(?P<netrc>{_NETRC_HOST}{_NETRC_ACCOUNT}login{_NETRC_SEP}{_NETRC_TOKEN}{_NETRC_SEP}"
    rf"{_NETRC_ACCOUNT}password{_NETRC_SEP}"
    r"\\*+['\"]?+)(?!\*\*\*)" + BARE
)
_NETRC_FIRST = (
    rf"(?P<netrcfirst>{_NETRC_HOST}password{_NETRC_SEP}\\*+['\"]?+)(?!\*\*\*)"
    + rf"(?:{BARE})(?=(?:\\*+['\"])?+{_NETRC_SEP}(?:login|account){_NETRC_SEP})"
)

# What may precede a secret's name in a longer one: a name ending in ``_`` or ``-``
# (``github_token``), or one in camelCase (``SessionToken``, ``refreshToken``)
_NAME_BEFORE = r"(?:[A-Za-z0-9_-]*[_-]|[A-Za-z0-9]*[a-z0-9](?=[A-Z]))"

# An option's name on a command line: --password, --github-token, -password (one dash too),
# not ``-p`` (a port as often as a password)
_FLAG = (
    rf"(?:(?<![\w-])|{_ESCAPED})--?(?:[A-Za-z0-9]+[-_])*"
    r"(?i:passw(?:or)?d|pwd|passphrase|token|secret|api[-_]?key)"
)
# The headers whose value is a credential, as a header list's pair names them
_HEADER = r"(?i:(?:proxy-)?authorization|(?:set-)?cookie2?|(?:x-)?api-key|x-auth-token)"

# Words that follow an option's name in prose (``the --password prompt``), not a value
_FLAG_PROSE = (
    "option", "options", "prompt", "prompts", "argument", "arguments", "parameter",
    "parameters", "values", "switch", "setting", "settings", "instead", "documentation",
    "required", "missing", "ignored", "deprecated", "removed", "enabled", "disabled",
    "supported", "default", "defaults", "command", "itself", "twice", "before", "flags",
)  # fmt: skip

# One pass finds every shaped secret; each alternative is a named group so that the replacement
# keeps what is not secret (the scheme, the parameter name, the word "Bearer").
# A value is read as ``(?:[^…]++|<escape>)++``: each run of plain characters whole, and the
# loop possessive (nothing follows a value, so nothing is given back). Python's engine keeps
# a frame per iteration of a greedy group: with one character an iteration, a value of
# 300 KB took 50 times as long as one of 30 KB (bench/redact_adversarial.py).
# Each alternative of ``SHAPES`` by name, in its order: the search tries them in this order at
# each place (the first that matches is taken), and ``_redact_anchors`` tries each alone where
# its anchor is (an alternative added here needs an anchor there: a unit test checks both
# name the same).
SHAPE_ALTERNATIVES: dict[str, str] = {
    # scheme://user:password@ (a password with a raw "@" is masked up to the last one before the
    # path, as URL parsers read it) or scheme://TOKEN@ (a user name alone of 16 or more token
    # characters with a digit: ``https://ghp…@github.com``; ``postgres@`` is a name)
    "url": r"(?P<url>\b[A-Za-z][A-Za-z0-9+.-]{0,20}://)"
    r"(?:[^/\s@:]*:[^/\s]*|(?=[A-Za-z_-]*[0-9])[A-Za-z0-9_-]{16,})@",
    # a chat webhook's URL is its credential (whoever has it posts to the channel): the path
    # after Slack's ``/services/`` (``/workflows/``, ``/triggers/``) or Discord's
    # ``/api/webhooks/``
    "hook": r"(?P<hook>"
    + WORD_EDGE
    + r"https?://(?:hooks\.slack\.com/(?:services|workflows|triggers)/"
    r"|(?:ptb\.|canary\.)?discord(?:app)?\.com/api/webhooks/))(?!\*\*\*)[A-Za-z0-9/_-]{8,}",
    # ?api_key=, ?sslpassword=, &refresh_token=, ?client_secret=, ?X-Amz-Signature=,
    # ?authorization=Bearer%20… (a header passed as a parameter)
    "query": r"(?P<query>[?&;](?i:[a-z0-9_.-]*(?:passw(?:or)?d|pwd|token|secret|api[_-]?key"
    r"|signature|authorization)"
    r"|key|auth|sig)=)"
    # the value to the next ``&``, ``#``, space or quote; a ``:`` ending it before a space is
    # the sentence's (``GET …?api_key=…: [Errno 111]``), not the value's, and is kept
    r"(?!\*\*\*)(?:[^&#\s\"':]++|:(?!\s))++",
    "bearer": r"(?P<bearer>" + WORD_EDGE + r"(?i:bearer)(?:\s++|\s*+[:=]\s*+))(?!\*\*\*)"
    r"[A-Za-z0-9._~+/=-]{8,}",
    # Authorization: <any scheme> <credentials> (Basic, Token, Bearer, …); the scheme is taken
    # whole (possessive) so that an already masked value stays as it is
    "auth": r"(?P<auth>" + WORD_EDGE + r"(?i:authorization)"
    r"\\*+['\"]?\s*[=:]\s*\\*+['\"]?(?:[A-Za-z][A-Za-z0-9_-]*\s+)?+)"
    # and the parameters after the first (Digest's ``, response="…"``, AWS Signature 4's
    # ``, Signature=…``): a ``, name=`` goes on, a quoted parameter ends at ``,`` or the line's end
    r"(?!\*\*\*)(?=[A-Za-z0-9._~+/=-]{8})(?:[A-Za-z0-9._~+/=-]++|;(?=[A-Za-z0-9_-])"
    r"|(?<=[A-Za-z]=)\"[^\"\r\n\\]*+\"(?=[ \t]*+(?:,|(?![^\r\n])))"
    r"|,[ \t]*+(?=[A-Za-z][A-Za-z0-9_-]*=))++",
    # a header list's pair as an HTTP client prints it (``[(b'Set-Cookie', b'sid=…')]``, an
    # ASGI scope's ``(b'authorization', b'Basic …')``; its quotes escaped too, printed inside a
    # printed string): the value to its closing quote, unless it is one of these names itself
    # (``("authorization", "cookie")`` names two headers)
    "hpair": r"(?P<hpair>\(\s*+b?\\*+['\"]" + _HEADER + r"\\*+['\"],\s*+b?\\*+['\"])(?!\*\*\*)"
    r"(?!" + _HEADER + r"\\*+['\"])(?=[^'\"\\\r\n]*+\\*+['\"]\s*+\))[^'\"\\\r\n]++",
    # an HTTP Cookie or Set-Cookie line (its value starts with ``name=``): masked to the line's
    # end, which in a JSON or printed string is an escaped ``\r``/``\n`` or the closing quote
    # (a cookie's quoted value ``sid="…"`` read whole)
    "cookie": r"(?P<cookie>" + _NO_NAME_BEFORE + r"(?i:(?:set-)?cookie2?)[ \t]*:[ \t]*+)"
    r"(?!\*\*\*)"
    r"(?=[^\s=;,:\"'\\]++=)(?:[^\r\n\"'\\=]++|=(?:\\?+\"[^\"\r\n\\]*+(?:\\?+\")?+)?+"
    r"|\\[^rn])++",
    # password=, DB_PASSWORD=, PGPASSWORD=, aws_secret_access_key: (no word boundary before
    # the name: a prefix of the variable's name does not hide it); a key printed with spaces
    # in it ({'password ': …}) or as ``'password' => …``; a quote escaped once or more (a
    # printed mapping inside a printed string: ``{\'password\': \'…\'}``, ``{\"token\": …}``)
    # is a quote too; a quoted value is read to its closing quote (``quoted_value``)
    "conn": r"(?P<conn>(?i:passw(?:or)?d|api[_-]?key|secret[_-]?(?:access[_-]?)?key"
    r"|client[_-]?secret"
    # (Azure's storage and Service Bus connection strings: ``AccountKey=``, ``SharedAccessKey=``)
    r"|access[_-]?token|account[_-]?key|(?<=shared)access[_-]?key)\s*+\\*+['\"]?\s*+(?:=>?+|:)\s*\\*+['\"]?)(?!\*\*\*)"
    + quoted_value(BARE),
    # token=…, github_token='…', Cfg(secret='…'): a value with a letter (``token=7`` is a count,
    # and so is a number written with an exponent: ``USD_PER_INPUT_TOKEN = 15e-6``)
    "kv": r"(?P<kv>(?i:token|secret)\\*+['\"]?\s*=\s*\\*+['\"]?)(?!\*\*\*)"
    r"(?=[^\s,;&\"'}]*[A-Za-z])"
    r"(?![0-9][0-9._]*[eE][-+]?[0-9]+(?![^\s,;&\"'}\\)]))" + quoted_value(BARE),
    # pwd=…, DB_PWD='…' (not OLDPWD=; a path, ``PWD=/home/bob``, is the working directory)
    "pwd": r"(?P<pwd>"
    + NO_ALNUM_BEFORE
    + r"(?i:pwd)\\*+['\"]?\s*=\s*\\*+['\"]?)(?!\*\*\*)(?![/~$]|[A-Za-z]:[\\/])"
    + quoted_value(BARE),
    # a printed mapping: {'token': '…'}, {"github_token": "…"}, {'secret': '…'}, and the
    # other names of ``SECRET_FIELDS`` no pattern above reads ({'pwd': …}, {'cookie': …},
    # {'private_key': …}, {'Set-Cookie': …})
    # (a name before it ends in ``_`` or ``-``, or is written in camelCase: ``'SessionToken'``,
    # ``'refreshToken'``, as AWS's and JavaScript's mappings print; ``authorization`` only so,
    # ``'proxyAuthorization'``: alone, the pattern above reads it and keeps its scheme)
    "qkey": r"(?P<qkey>['\"](?:"
    + _NAME_BEFORE
    + r"?(?i:token|secret|pwd|passphrase|cookie|credentials"
    r"|bearer|(?:private|session|access)[_-]?key)|"
    + _NAME_BEFORE
    + r"(?i:authorization))\\*+['\"]\s*:\s*\\*+['\"])"
    r"(?!\*\*\*)" + quoted_value(r"(?:[^'\"\\]++|\\(?!['\"]))++"),
    # a command line's --password VALUE, --github-token VALUE (after ``=`` the patterns above
    # read it): a quoted value, or an argument list's next item (``'--password', '…'``), whatever
    # it holds; unquoted, a value of 6 or more characters with a digit, a capital or a symbol, or
    # of lower-case letters followed by another option, a shell operator or the line's end and
    # not a word of prose about the option (``the --password prompt``)
    "flagq": r"(?P<flagq>"
    + _FLAG
    + r"(?:[ \t]++|['\"],[ \t]*+)['\"])(?!\*\*\*)"
    + quoted_value("(?!)"),
    "flag": r"(?P<flag>" + _FLAG + r"[ \t]++)(?!\*\*\*)"
    r"(?=[^\s,;'\"]*(?:[0-9A-Z!@#$%^&*+=~/:_]|[.-][^\s,;'\"]))[^\s,;'\"]{6,}",
    "flaglow": r"(?P<flaglow>" + _FLAG + r"[ \t]++)(?!(?:" + "|".join(_FLAG_PROSE) + r")\b)"
    r"[a-z]{6,}+(?=[ \t]++-[A-Za-z-]|[ \t]*+(?:[|&;>)`]|(?![^\r\n])))",
    # log text: token: VALUE, github_token: VALUE, secret: VALUE (a value of 8 or more
    # characters with a digit and a letter: ``token: 12`` is a count, ``Token: the unit`` prose)
    "logkv": r"(?P<logkv>" + NO_ALNUM_BEFORE + r"(?i:token|secret) ?:[ \t]*+)(?!\*\*\*)"
    r"(?=[^\s,;'\"}:]*[0-9])(?=[^\s,;'\"}:]*[A-Za-z])[^\s,;'\"}:]{8,}",
    # URL-encoded: password%3D…, api_key%3D…, token%3D… (a query inside a query), to ``%26``
    "enc": r"(?P<enc>(?i:passw(?:or)?d|token|secret|api[_-]?key)%3[Dd])(?!\*\*\*)"
    r"(?:[^\s&%\"'<>#]++|%(?!26))++",
    # a URL-encoded URL's credentials: https%3A%2F%2Fuser%3Apw%40host (a redirect parameter)
    "encurl": r"(?P<encurl>\b[A-Za-z][A-Za-z0-9+.-]{0,20}%3[Aa]%2[Ff]%2[Ff])"
    r"(?:[^\s%/@&]++|%(?!2[Ff]|40|3[Aa]))*+%3[Aa](?:[^\s%/@&]++|%(?!2[Ff]|40))*+%40",
    # a ``.netrc`` entry (``_NETRC``)
    "netrc": _NETRC,
    "netrcfirst": _NETRC_FIRST,
    # a key cut before its END line (text clipped for storage) is masked to the end of it
    # (and OpenPGP's ``PRIVATE KEY BLOCK``)
    "pem": r"-----BEGIN [A-Z ]*PRIVATE KEY(?: BLOCK)?-----[\s\S]*?"
    r"(?:-----END [A-Z ]*PRIVATE KEY(?: BLOCK)?-----|\Z)",
    # the keys' own shapes, each at a word's start (``WORD_EDGE``: tested once for all of them)
    "keys": WORD_EDGE + r"(?:[sr]k_(?:live|test)_[A-Za-z0-9]{16,}"
    r"|sk-[A-Za-z0-9_-]{12,}"
    r"|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}"
    r"|xox[abprs]-[A-Za-z0-9-]{10,}"
    r"|(?:AKIA|ASIA)[0-9A-Z]{16}\b"
    # (Google's keys are 39 characters: a longer run is masked whole, not its first 39)
    r"|AIza[0-9A-Za-z_-]{35,}+"
    r"|hf_[A-Za-z0-9]{20,}"
    r"|glpat-[A-Za-z0-9_-]{20,}"
    + "|"
    + PROVIDER_KEYS
    # loopwright's own user tokens (``lw_`` and 43 characters): a person pasting theirs into a
    # note would put it in the append-only audit log
    + r"|lw_[A-Za-z0-9_-]{40,}"
    # SendGrid (``SG.``, 22 and 43 base64url characters); a Twilio API key's SID (``SK`` and
    # 32 hex digits), and the secret written right after an ``SK`` or an account's ``AC`` SID
    # (``Client("SK…", "…")``, ``"AC…:…"``): the account SID is an identifier and stays
    r"|SG\.[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43}(?![A-Za-z0-9_-])"
    r"|(?P<twilio>(?P<twsid>(?:SK|AC)[0-9a-f]{32})(?P<twsep>\\*+['\"]?[ \t]*+[,:][ \t]*+\\*+['\"]?)"
    r"[A-Za-z0-9]{32}(?![A-Za-z0-9]))"
    r"|SK[0-9a-f]{32}(?![A-Za-z0-9]))",
    # (a JSON Web Token: ``_jwts``, before these)
}
SHAPES = LazyPattern("|".join(SHAPE_ALTERNATIVES.values()))


def upper_triggered(s: str, low: str) -> bool:
    """Whether ``s`` may hold a shape written in capitals (SendGrid's ``SG.``, Twilio's ``SK``
    and ``AC`` SIDs) or a Docker ``auth`` value (base64: capitals too). ``low`` is
    ``s.lower()``: where the two are equal (one ``memcmp``: most of the engine's records) there
    is no capital, and no test is run; each shape's second capital is looked for first, one
    ``memchr`` where it is not in the text."""
    if s == low:
        return False
    return (
        ("K" in s and "SK" in s)
        or ("G" in s and "SG." in s)
        or ("C" in s and "AC" in s)
        or "auth" in low
        or mixed_case_key(s)
    )


# Every shape of ``SHAPES`` but those written in capitals (``upper_triggered``: SendGrid,
# Twilio, ``_redact_keys``'s mixed-case keys) contains one of these (lower-cased); substring
# tests run in C and are about ten times faster than the regular expression on text that has none, the common case.
TRIGGERS = (
    "://",
    "=",
    "-u",
    "password",
    "passwd",
    "api_key",
    "api-key",
    "apikey",
    "secret_key",
    "secret-key",
    "secretkey",
    "client_secret",
    "client-secret",
    "clientsecret",
    "access_token",
    "access-token",
    "accesstoken",
    "access_key",
    "access-key",
    "accesskey",
    "account_key",
    "account-key",
    "accountkey",
    "token'",
    'token"',
    "token\\",
    "token:",
    "token :",
    "-token",
    "token%3d",
    "secret'",
    'secret"',
    "secret\\",
    "secret:",
    "secret :",
    "-secret",
    "secret%3d",
    "%3a%2f%2f",
    "pwd",
    "passphrase",
    "cookie",
    "credentials",
    "private_key",
    "private-key",
    "privatekey",
    "session_key",
    "session-key",
    "sessionkey",
    "authorization",
    "private key-----",
    "private key block-----",
    "k_live_",
    "k_test_",
    "bearer",
    "sk-",
    "ghp_",
    "gho_",
    "ghu_",
    "ghs_",
    "ghr_",
    "github_pat_",
    "xox",
    "akia",
    "asia",
    "aiza",
    "hf_",
    "glpat-",
    *LOWER_PREFIXES,
    "lw_",
    "eyj",
)


def trie(words: Iterable[str]) -> str:
    """An alternation matching any of ``words``, grouped by common prefixes (``a(?:iza|kia)``):
    the regex engine tries one branch per character instead of every word, about three times
    faster on the engine's write path than the flat alternation."""
    heads: dict[str, list[str]] = {}
    for w in sorted(set(words)):
        heads.setdefault(w[:1], []).append(w[1:])
    out = []
    for head, rests in heads.items():
        if not head:
            continue
        tails = [t for t in rests if t]
        if not tails:
            out.append(re.escape(head))
            continue
        inner = trie(tails)
        if "" in rests:
            out.append(f"{re.escape(head)}(?:{inner})?")
        elif "|" in inner:
            out.append(f"{re.escape(head)}(?:{inner})")
        else:
            out.append(re.escape(head) + inner)
    return "|".join(out)


# The triggers in one case-sensitive pattern, run on lower-cased text: an IGNORECASE
# alternation is about ten times slower in Python's engine. Those whose first character is
# everywhere in JSON (":") or could fill a whole value ("xxxx…": the pattern would be tried at
# every character) are plain substring tests instead, which run in C at memory speed.
TRIGGER_IN: tuple[str, ...] = ("=", "://", "xox", "%3a%2f%2f", "-token", "-u")
TRIGGER_IN += tuple(t for t in TRIGGERS if t.startswith("token"))
_TRIGGER = LazyPattern(trie(t for t in TRIGGERS if t not in TRIGGER_IN))


# Every trigger of ``_TRIGGER`` contains one of these (``gh`` stands for the five ``gh?_``,
# ``k_`` for Stripe's four: a needle fewer is a scan fewer, which pays for one of the
# lower-case provider keys' ``LOWER_NEEDLES``, stop 48 and keys52):
# on text with none of them — a clean record — the regular expression never runs. The
# substring tests run in C; together they cost less than one pass of the expression.
PREFILTER = (
    *("access", "account", "aiza", "akia", "api", "asia", "authorization", "bearer", "eyj", "gh"),
    *("github_pat_", "glpat-", "hf_", "k_", "lw_", "passw", "private", "secret", "sk-"),
    *("pwd", "passphrase", "cookie", "credentials", "session", *LOWER_NEEDLES),
)


# The needles of ``PREFILTER`` that hold a character the engine's own records lack (no key
# or number it writes holds a ``z`` or a ``j``): one test for that character (``memchr``, a
# tenth of a substring test) stands for them on a clean record.
_PREFILTER_Z = ("aiza", "authorization")
_PREFILTER_J = ("eyj",)
# The needles holding ``_`` or ``-`` (and neither ``z`` nor ``j``): a text of prose holds
# neither character, so one ``memchr`` for it stands for them (stop 49, digest49: a part's
# value is scanned every cycle it changes, and each needle's test reads all of it).
_PREFILTER_SCORE = tuple(
    n for n in PREFILTER if ("_" in n or "-" in n) and n not in _PREFILTER_Z + _PREFILTER_J
)
_PREFILTER_REST = tuple(
    n for n in PREFILTER if n not in _PREFILTER_Z + _PREFILTER_J + _PREFILTER_SCORE
)
# Each of those needles at each of its ``_`` and ``-`` (the character, its place in it).
_SCORE_AT = tuple(
    (mark, tuple((n, i) for n in _PREFILTER_SCORE for i, c in enumerate(n) if c == mark))
    for mark in "_-"
)
# A text at least this long, holding at most ``_SCORE_MARKS`` of a mark, is read at each mark
# (the engine's record of a large value holds its keys' few ``_``), not once a needle.
_SCORE_WALK_MIN = 4096
_SCORE_MARKS = 32


def _first_mark(needle: str) -> str:
    """``needle`` as an alternative of ``_SCORE_UNDERSCORE``, found at its first ``_``: the
    text up to it looked behind for, the rest matched after it."""
    i = needle.index("_")
    return f"(?<={re.escape(needle[: i + 1])}){re.escape(needle[i + 1 :])}"


# The needles of ``_PREFILTER_SCORE`` holding ``_``, found at their first ``_`` (cpu54): the
# pattern starts with it, so ``re`` passes over the text in C to each ``_`` (a record holds a
# few: ``cost_usd``, ``held_out``, ``best_score``) and tries the needles there, where a scan a
# needle read the whole text nine times (18 k instructions on a trivial cycle's record, every
# commit). The rest hold ``-`` and no ``_`` (``glpat-``, ``sk-``): scanned, behind a ``memchr``.
_SCORE_MID = tuple(n for n in _PREFILTER_SCORE if n.find("_") > 0)  # ``_`` after a letter
_SCORE_UNDERSCORE = re.compile(
    # the letter before the ``_`` first, one class: most ``_`` of code stop there
    "_(?:(?<=["
    + "".join(sorted({n[n.index("_") - 1] for n in _SCORE_MID}))
    + "]_)(?:"
    + "|".join(_first_mark(n) for n in _SCORE_MID)
    + ")|"
    + "|".join(re.escape(n[1:]) for n in _PREFILTER_SCORE if n.startswith("_"))
    + ")"
)
_SCORE_DASH = tuple(n for n in _PREFILTER_SCORE if "_" not in n)


def _scored(hay: str) -> bool:
    """Whether a needle of ``_PREFILTER_SCORE`` is in ``hay``."""
    if len(hay) >= _SCORE_WALK_MIN:
        for mark, at in _SCORE_AT:
            i, seen = hay.find(mark), 0
            while i >= 0 and seen < _SCORE_MARKS:
                for needle, k in at:
                    if i >= k and hay.startswith(needle, i - k):
                        return True
                i, seen = hay.find(mark, i + 1), seen + 1
            if i >= 0:  # marks everywhere: each needle's own scan
                return any(n in hay for n in _PREFILTER_SCORE)
        return False
    if "_" in hay and _SCORE_UNDERSCORE.search(hay) is not None:
        return True
    if "-" in hay:
        for needle in _SCORE_DASH:  # (no generator on a short record)
            if needle in hay:
                return True
    return False


# The ASCII characters no needle of ``PREFILTER`` holds (digits, quotes, spaces, punctuation,
# most capitals): deleted from a long ASCII text before the needles are looked for (one
# ``bytes.translate``). Deleting characters that no needle holds leaves every needle found in
# the text whole, so the tests find all they found (and at most a few more, across a deleted
# character: ``_confirmed`` then reads the text itself); a record's JSON text is about half as
# long then, and a substring test costs by the characters it passes over (stop 46, cpu46c).
_NEEDLE_CHARS = frozenset("".join(PREFILTER))
_NOT_NEEDLE = bytes(c for c in range(128) if chr(c) not in _NEEDLE_CHARS)
# (below this length the deletion costs about what it saves; above the second, the two copies
# it makes — the bytes and what is left — would be transient memory that grows with the text:
# a text of the eval case grows with the run, and tests/integration/test_eval_case_memory.py
# bounds what a cycle holds — the uncapped cut was reverted for it at stop 46)
_STRIP_MIN = 200
_STRIP_MAX = 2048


def _confirmed(low: str, passw: bool) -> bool | None:
    """A needle of the prefilter was found: whether a trigger really is in ``low`` (called
    only then, never on the clean path). For the clean scan (``passw``), None rather than
    False where a needle no trigger stands for is in the text (``private``, ``session``: a
    key ``_key_patterns_of`` finds may be there, so the key pattern must run); a needle of
    prose (``gh`` in "high") alone does not send a record there."""
    if _TRIGGER.search(low) is not None or (passw and "passw" in low):
        return True
    if passw and ("private" in low or "session" in low):
        return None
    return False


# What follows ``token`` in a trigger (``token'``, ``token:``, ``token%3d``, …); ``-token`` is
# the other one holding it.
_TOKEN_AFTER = tuple(t[5:] for t in TRIGGER_IN if t.startswith("token"))


def _token_trigger(low: str) -> bool:
    """Whether a trigger holding ``token`` is in ``low``: one search for the word, then a look
    at its neighbours where it is (records hold ``tokens``; seven full scans cost more)."""
    i = low.find("token")
    while i >= 0:
        if low.startswith(_TOKEN_AFTER, i + 5) or (i and low[i - 1] == "-"):
            return True
        i = low.find("token", i + 5)
    return False


def triggered(low: str, *, passw: bool = False) -> bool | None:
    """Whether lower-cased ``low`` contains one of ``TRIGGERS`` (or, with ``passw``, the
    text ``passw``: the clean scan's test for a key holding it, which the prefilter's scan
    for ``passw`` answers on the clean text, the common case, without reading it again).
    With ``passw``, a falsy answer is None where ``private`` or ``session`` is in the text and
    False only where neither is: then no key of a secret's name can be in a plain text (the
    clean scan skips its key pattern; ``_redact._clean_text``)."""
    # ``TRIGGER_IN`` spelled out: a generator here costs more than the tests. A one-character
    # test first where the needle's character is rare in records (``x``, ``%``).
    if (
        "=" in low
        or "://" in low
        or ("x" in low and "xox" in low)
        or ("%" in low and "%3a%2f%2f" in low)
        or ("-" in low and "-u" in low)
        or _token_trigger(low)
    ):
        return True
    hay = (
        low.encode().translate(None, _NOT_NEEDLE).decode()
        if _STRIP_MIN <= len(low) <= _STRIP_MAX and low.isascii()
        else low
    )
    for needle in _PREFILTER_REST:
        if needle in hay:
            return _confirmed(low, passw)
    if ("_" in hay or "-" in hay) and _scored(hay):
        return _confirmed(low, passw)
    if "z" in hay:
        for needle in _PREFILTER_Z:
            if needle in hay:
                return _confirmed(low, passw)
    if "j" in hay and "eyj" in hay:
        return _confirmed(low, passw)
    return False
