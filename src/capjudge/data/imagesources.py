"""Where a judge may take its images from: :class:`ImageSources`, the policy a shared judge reads
its images under, and the address check of the ``http(s)`` images it fetches.

A local run reads what its user names: any path, any URL (:data:`LOCAL_SOURCES`, the default). A
judge that serves other people (``capjudge serve``, a reward inside a shared service) must not read
a file or reach a host because a request named it: :meth:`ImageSources.shared` reads only images
sent inline unless its operator allowed a folder (``paths``), URLs (``urls``) and, among them,
private addresses (``private_urls``). A URL is then fetched by :func:`capjudge.data.images.download`
with every hop's host resolved once and checked (:func:`checked_address`), the connection made to
that checked address (:func:`pinned`: no second lookup a rebinding DNS server could answer
differently), and redirects followed one at a time, each re-checked.
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass
from typing import Any

MAX_REDIRECTS = 5
"""Redirects a checked fetch follows at most (each hop's address checked)."""

_URL_SCHEMES = ("http://", "https://")


@dataclass(frozen=True)
class ImageSources:
    """Which image inputs a judge reads: ``paths`` (local files: under the judge's images folder
    when it confines them), ``urls`` (``http(s)`` images it fetches) and ``private_urls`` (URLs
    whose host is a loopback, link-local, private or reserved address). Inline images (bytes, a
    PIL image, a ``data:`` URL, a server's ``image_b64``) are always read. ``neutral_errors``: a
    failed fetch says only that it failed, never why (a cause would tell an open port from a
    closed one, a live host from a dead one)."""

    paths: bool = True
    urls: bool = True
    private_urls: bool = True
    neutral_errors: bool = False

    @classmethod
    def shared(cls, *, paths: bool = False, urls: bool = False, private_urls: bool = False) -> ImageSources:
        """The policy of a judge that serves others: inline images only unless widened, neutral
        fetch errors. ``private_urls`` without ``urls`` is a ``ValueError``."""
        if private_urls and not urls:
            raise ValueError("private_urls widens urls: give urls=True with it")
        return cls(paths=paths, urls=urls, private_urls=private_urls, neutral_errors=True)

    @property
    def checks_urls(self) -> bool:
        """Whether a URL this policy allows is fetched at once by the checked fetcher (a shared
        judge: addresses checked, neutral errors) rather than left to a local backend's lazy
        download."""
        return self.urls and (self.neutral_errors or not self.private_urls)

    def refusal(self, image: str) -> str | None:
        """Why this policy does not read ``image`` (a path or URL as given), or ``None``."""
        if image.startswith(_URL_SCHEMES):
            if self.urls:
                return None
            return (
                f"image {image!r} was not fetched: this judge fetches no image URLs; send the image inline "
                "(image_b64, or a data: URL) or ask its operator to allow URLs (capjudge serve --allow-url-images; "
                "ImageSources.shared(urls=True))"
            )
        if self.paths or image.startswith("data:"):
            return None
        return (
            f"image {image!r} was not read: this judge reads no image paths; send the image inline "
            "(image_b64, or a data: URL) or ask its operator to allow a folder (capjudge serve --images DIR; "
            "ImageSources.shared(paths=True))"
        )


LOCAL_SOURCES = ImageSources()
"""A local run's policy: every path and URL its user names is read (the default everywhere)."""


class AddressRefused(Exception):
    """A URL's host is, or resolves to, an address the policy does not reach."""


def address_allowed(address: str) -> bool:
    """Whether ``address`` (an IP address) is a public one: not loopback, link-local, private,
    shared (CGNAT), reserved, multicast or unspecified (an IPv4 address inside IPv6 is judged as
    IPv4)."""
    try:
        ip: ipaddress.IPv4Address | ipaddress.IPv6Address = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address):
        inner = ip.ipv4_mapped or ip.sixtofour or (ip.teredo[1] if ip.teredo else None)
        if inner is not None and not address_allowed(str(inner)):
            return False
    return ip.is_global and not (ip.is_loopback or ip.is_link_local or ip.is_private or ip.is_reserved or ip.is_multicast or ip.is_unspecified)


def checked_address(host: str, port: int) -> str:
    """The address to connect to for ``host``: resolved once, every address it resolves to public
    (one private address among public ones is refused too). Raises :class:`AddressRefused`."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        raise AddressRefused(f"host {host!r} does not resolve: {exc}") from None
    addresses = [str(info[4][0]) for info in infos]
    if not addresses:
        raise AddressRefused(f"host {host!r} does not resolve")
    refused = [a for a in addresses if not address_allowed(a)]
    if refused:
        raise AddressRefused(f"host {host!r} resolves to {refused[0]}, not a public address")
    return addresses[0]


def pinned(url: Any) -> tuple[Any, dict[str, str], dict[str, Any]]:
    """``url`` (an ``httpx.URL``) made to connect to its host's checked address: the URL with the
    address as host, the ``Host`` header and, for ``https``, the TLS server name (so that the
    certificate is checked against the host named, not the address). Raises
    :class:`AddressRefused`."""
    if url.scheme not in ("http", "https"):
        raise AddressRefused(f"scheme {url.scheme!r} is not fetched (http and https only)")
    host = url.host
    if not host:
        raise AddressRefused("the URL names no host")
    address = checked_address(host, url.port or (443 if url.scheme == "https" else 80))
    headers = {"Host": url.netloc.decode("ascii")}
    extensions: dict[str, Any] = {"sni_hostname": host} if url.scheme == "https" else {}
    return url.copy_with(host=address), headers, extensions


__all__ = ["LOCAL_SOURCES", "MAX_REDIRECTS", "AddressRefused", "ImageSources", "address_allowed", "checked_address", "pinned"]
