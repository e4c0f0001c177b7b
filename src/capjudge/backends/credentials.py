"""Credentials written into a backend spec, taken out of it before it is used anywhere.

A spec such as ``openai-compatible:http://alice:PASS@host/v1?token=T#model`` carries secrets in its
URL: the user info (``alice:PASS``, sent as HTTP Basic authentication) and query parameters whose
name says they are credentials (``token``, ``key``, ``api_key``, ``access_token``,
``subscription-key`` ...; :func:`is_secret_name`). :func:`split_url` separates such a URL into

- the URL requests go to (scheme, host, port and path: no user info, no query),
- the URL as it is shown (``http://***@host/v1?token=***``: in results, reports, logs, state files),
- a :class:`UrlAuth` holding the user info and every query parameter (sent on the wire as query
  parameters, the way the server was addressed).

Every credential form is registered with :func:`capjudge.core.redact.register_secret` (the value as
written, percent-decoded, and for user info the base64 of ``user:password`` that an HTTP Basic
header carries), so a server echoing it back is masked too. Values shorter than
:data:`capjudge.core.redact.MIN_SECRET_LENGTH` are masked in the shown spec but not in free text.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from urllib.parse import parse_qsl, quote, unquote, urlsplit, urlunsplit

from capjudge.core.redact import MASK, register_secret

# Words that make a query parameter or option name a credential: the whole name, or its last
# part after "_" or "-" (``access_token``, ``subscription-key``, ``client_secret``).
_SECRET_WORDS = frozenset({"token", "key", "apikey", "secret", "password", "passwd", "pwd", "auth", "sig", "signature", "credential", "credentials", "accesstoken", "authtoken"})


def is_secret_name(name: str) -> bool:
    """Whether a query parameter or option named ``name`` holds a credential (case-insensitive):
    ``token``, ``key``, ``api_key``, ``apikey``, ``access_token``, ``x-api-key``, ``password`` ...
    Option names such as ``api_key_env`` or ``max_top_logprobs`` are not."""
    text = name.strip().lower().replace("-", "_")
    return text in _SECRET_WORDS or text.rsplit("_", 1)[-1] in _SECRET_WORDS


@dataclass(frozen=True, repr=False)
class UrlAuth:
    """What a URL carried besides where to send requests: its user info and its query parameters
    (every one, in order: credentials and others). Its ``repr`` shows no value."""

    username: str | None = None
    password: str | None = None
    query: tuple[tuple[str, str], ...] = ()

    def __repr__(self) -> str:
        names = [n for n, _ in self.query]
        return f"UrlAuth(userinfo={'yes' if self.username is not None else 'no'}, query={names})"

    def __bool__(self) -> bool:
        return self.username is not None or bool(self.query)

    @property
    def basic_authorization(self) -> str | None:
        """The ``Authorization`` header value of the user info (``Basic <base64(user:password)>``),
        or ``None`` without user info."""
        if self.username is None:
            return None
        return "Basic " + _b64(f"{self.username}:{self.password or ''}")

    @property
    def secret_query_names(self) -> list[str]:
        """The names of the query parameters that are credentials."""
        return [n for n, _ in self.query if is_secret_name(n)]

    @property
    def public_query(self) -> dict[str, str]:
        """The query parameters that are not credentials (they may change answers: part of a
        backend's identity)."""
        return {n: v for n, v in self.query if not is_secret_name(n)}

    def sources(self) -> list[str]:
        """Where this URL carries credentials, by name only (``userinfo``, ``query token`` ...),
        for state files and messages."""
        out = ["userinfo"] if self.username is not None else []
        return out + [f"query {n}" for n in self.secret_query_names]

    def secret_values(self) -> list[str]:
        """Every form of every credential: as written, decoded, and the Basic header's base64."""
        values: list[str] = []
        if self.username is not None:
            if self.password:
                values.append(self.password)
            else:
                values.append(self.username)  # a token given as the user name (https://TOKEN@host)
            values.append(_b64(f"{self.username}:{self.password or ''}"))
        values += [v for n, v in self.query if is_secret_name(n)]
        return [form for v in values for form in (v, quote(v, safe=""))]


@dataclass(frozen=True)
class SplitUrl:
    """A URL taken apart by :func:`split_url`."""

    url: str  # where requests go: scheme://host[:port]/path
    shown: str  # the URL as displayed: credentials as ***
    auth: UrlAuth


def _b64(text: str) -> str:
    return base64.b64encode(text.encode("utf-8")).decode("ascii")


def split_url(url: str) -> SplitUrl:
    """Take user info and query out of ``url`` (see the module) and register every credential
    form as a secret. A URL with neither comes back unchanged (``url == shown``)."""
    parts = urlsplit(url)
    if "@" not in parts.netloc and not parts.query:
        return SplitUrl(url=url, shown=url, auth=UrlAuth())
    userinfo, _, hostport = parts.netloc.rpartition("@")
    username = password = None
    if "@" in parts.netloc:
        user, sep, pw = userinfo.partition(":")
        username, password = unquote(user), (unquote(pw) if sep else None)
    query = tuple(parse_qsl(parts.query, keep_blank_values=True))
    auth = UrlAuth(username=username, password=password, query=query)
    for value in auth.secret_values():
        register_secret(value)
    clean = urlunsplit((parts.scheme, hostport, parts.path, "", ""))
    shown_query = "&".join(f"{n}={MASK if is_secret_name(n) else quote(v, safe='')}" for n, v in query)
    shown = urlunsplit((parts.scheme, (f"{MASK}@" if username is not None else "") + hostport, parts.path, shown_query, ""))
    return SplitUrl(url=clean, shown=shown, auth=auth)


def mask_options(options: dict[str, str]) -> list[tuple[str, str]]:
    """``(name, value)`` pairs of spec options with credential values shown as ``***`` (and
    registered as secrets)."""
    shown: list[tuple[str, str]] = []
    for name, value in options.items():
        if is_secret_name(name):
            register_secret(value)
            value = MASK
        shown.append((name, value))
    return shown


def safe_options(options: dict[str, object]) -> dict[str, object]:
    """Backend options without the credential ones (``api_key``, ``token`` ...): what may be
    written to a file."""
    return {k: v for k, v in options.items() if not is_secret_name(k)}


def mask_argv(argv: Sequence[str]) -> list[str]:
    """A command line with its credentials shown as ``***``: URLs' user info and credential query
    parameters, and ``NAME=VALUE`` arguments (``--backend-opt api_key=...``) whose name is a
    credential."""
    out: list[str] = []
    for arg in argv:
        out.append(_mask_arg(arg))
    return out


def _mask_arg(arg: str) -> str:
    if arg.startswith("--") and "=" in arg:  # --flag=VALUE
        flag, _, value = arg.partition("=")
        return f"{flag}={_mask_arg(value)}"
    if "://" in arg:
        head, sep, tail = arg.partition("://")
        scheme_start = max(head.rfind(":"), head.rfind("="), -1) + 1
        prefix, scheme = head[:scheme_start], head[scheme_start:]
        url, hash_, fragment = (scheme + sep + tail).partition("#")
        return prefix + split_url(url).shown + hash_ + fragment
    head, question, query = arg.partition("?")
    pairs = dict(parse_qsl(query, keep_blank_values=True)) if question else {}
    if any(is_secret_name(k) for k in pairs):  # a spec's options: hf:model?token=...
        return head + "?" + "&".join(f"{k}={v}" for k, v in mask_options(pairs))
    name, eq, value = arg.partition("=")
    if eq and value and is_secret_name(name.lstrip("-")):
        register_secret(value)
        return f"{name}={MASK}"
    return arg


def masked_in(values: Iterable[str]) -> bool:
    """Whether any of ``values`` holds a ``***`` mask (a credential that was not kept)."""
    return any(MASK in v for v in values)
