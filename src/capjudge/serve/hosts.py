"""Which ``Host`` a request may name: the server's own addresses, and the names it is told.

A web page that makes a browser send a request to the server (a loopback server without a token,
reached through DNS rebinding: an attacker's name that resolves to 127.0.0.1) names the attacker's
host in ``Host``. The server answers only requests whose ``Host`` is an address it listens on
(``localhost`` and the loopback addresses for a loopback server; any IP address and this machine's
name for one listening on every address) or a name given with ``--allowed-host`` (the names a proxy
or DNS gives it). The port is not compared (a proxy may change it).
"""

from __future__ import annotations

import ipaddress
import json
import re
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
NAME = re.compile(r"[a-z0-9_]([a-z0-9_-]{0,62})(\.[a-z0-9_]([a-z0-9_-]{0,62}))*")
WILDCARD_ADDRESSES = ("0.0.0.0", "::", "")


def host_name(header: str) -> str:
    """The host of a ``Host`` header value (``name``, ``name:port``, ``[v6]:port``), lower case,
    without brackets, port or trailing dot."""
    value = header.strip().lower()
    if value.startswith("["):
        value = value[1:].partition("]")[0]
    elif value.count(":") == 1:
        value = value.partition(":")[0]
    return value.rstrip(".")


def is_host_name(text: str) -> bool:
    """Whether ``text`` is a ``Host`` value a rule can name: a DNS name or an IP address, with or
    without a port (no scheme, path, user or wildcard)."""
    if any(c in text for c in "/@*? "):
        return False
    name = host_name(text)
    return bool(name) and (is_address(name) or NAME.fullmatch(name) is not None)


def is_address(name: str) -> bool:
    """Whether ``name`` is an IP address (no DNS name: nobody can rebind it)."""
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


@dataclass(frozen=True)
class HostRule:
    """The ``Host`` names a server answers to: ``names``, and any IP address when ``any_address``."""

    names: frozenset[str]
    any_address: bool = False

    def allows(self, header: str | None) -> bool:
        """Whether a request with this ``Host`` header may be answered (no header: not a browser)."""
        if header is None:
            return True
        name = host_name(header)
        return name in self.names or (self.any_address and is_address(name))


def host_rule(bind: str, allowed: Iterable[str] = ()) -> HostRule:
    """The rule of a server listening on ``bind`` that is also reached by the names ``allowed``."""
    names = {host_name(name) for name in allowed if host_name(name)}
    bind_name = host_name(bind)
    names.add(bind_name)
    loopback = bind_name == "localhost" or (is_address(bind_name) and ipaddress.ip_address(bind_name).is_loopback)
    if loopback:
        names |= LOOPBACK_NAMES
        return HostRule(frozenset(names))
    names |= LOOPBACK_NAMES | {socket.gethostname().lower()}
    return HostRule(frozenset(names), any_address=bind_name in WILDCARD_ADDRESSES)


LOOPBACK_RULE = HostRule(LOOPBACK_NAMES)


class HostGuard:
    """ASGI middleware: a request whose ``Host`` the rule refuses is answered 421 (JSON), before any
    route (and so before the token, the body or the judge)."""

    def __init__(self, app: Any, rule: HostRule) -> None:
        self.app = app
        self.rule = rule

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """The ASGI call."""
        if scope["type"] == "http":
            hosts = [v.decode("latin-1") for k, v in scope["headers"] if k == b"host"]
            if len(hosts) > 1 or not self.rule.allows(hosts[0] if hosts else None):
                shown = hosts[0][:100] if hosts else ""
                body = json.dumps({"error": f"Host {shown!r} is not a name this server answers to (its address, or one given with --allowed-host)"}).encode()
                await send({"type": "http.response.start", "status": 421, "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), (b"connection", b"close")]})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


__all__ = ["HostGuard", "HostRule", "LOOPBACK_RULE", "host_name", "host_rule", "is_address", "is_host_name"]
