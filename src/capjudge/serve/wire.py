"""What travels between ``capjudge serve`` and its clients: samples and pairs with their images.

A sample or pair on the wire is the input row (``image``, ``caption`` or ``caption_a`` /
``caption_b``, ``references``, ``id``, a pair's ``shown_first``) with, where the client read the
image itself (a path, an ``http(s)`` URL it fetched, encoded bytes, a PIL image), its bytes in
``image_b64`` (base64; ``image`` is then only the image's name, as records show it) or the reason it
could not be read in ``image_error`` (the record then says what a local run says). Without either,
``image`` is a ``data:`` URL, or an ``http(s)`` URL or a path that the server reads only as its
:class:`~capjudge.data.imagesources.ImageSources` allows (``--allow-url-images``, ``--images``).

On the server, such an image becomes an :class:`InlineImage` carrying the bytes or the error (a
``data:`` URL too, under the same size cap as ``image_b64``); the records name it by the client's
name (what a local run shows).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from capjudge.data.images import (
    REQUEST_DEADLINE_FACTOR,
    ImageError,
    ImageLimits,
    fetch_many,
    load_image,
)
from capjudge.data.imagesources import LOCAL_SOURCES
from capjudge.data.types import image_label

MAX_ERROR_CHARS = 2000
"""An ``image_error`` sent by a client is cut to this length."""

ROW_FIELDS = ("image", "caption", "caption_a", "caption_b", "references", "id", "shown_first")
"""The fields of an input row that travel (others, such as a note, stay with the client);
``shown_first`` (``"A"`` / ``"B"``) fixes the caption a single-order comparison shows first."""


class InlineImage(str):
    """An image sent in the request: its bytes or the error that stopped the client reading it,
    and its ``name`` (what records show). The ``str`` value is a key of its own (the name and a
    digest of the content), so that the judge groups equal images sent by different clients and
    never mistakes one for another image of the same name; :func:`named` puts the name back into
    the records."""

    name: str
    data: bytes | None
    error: str | None

    def __new__(cls, name: str, data: bytes | None = None, error: str | None = None) -> InlineImage:
        digest = hashlib.sha256(data if data is not None else (error or "").encode("utf-8", "replace")).hexdigest()[:24]
        obj = super().__new__(cls, f"{INLINE_PREFIX}{'data' if data is not None else 'error'}-{digest}:{name}")
        obj.name = name
        obj.data = data
        obj.error = error
        return obj


INLINE_PREFIX = "inline-"


def named(record: dict[str, Any], row: Any) -> dict[str, Any]:
    """``record`` (a results-file record of ``row``) with the inline image's key replaced by its name."""
    image = row.get("image") if isinstance(row, dict) else None
    if not isinstance(image, InlineImage):
        return record
    key = str(image)
    if record.get("image") == key:
        record["image"] = image.name
    if isinstance(record.get("error"), str):
        record["error"] = record["error"].replace(key, image.name)
    return record


class WireError(ValueError):
    """A request body that is not what the route takes (a 400 naming the field)."""


def is_url(image: Any) -> bool:
    """Whether ``image`` is an ``http(s)`` URL (what a client fetches itself before sending)."""
    return isinstance(image, str) and image.startswith(("http://", "https://"))


def is_image_object(image: Any) -> bool:
    """Whether ``image`` is encoded bytes or a PIL image (a decoded ``datasets`` image column):
    no path or URL, so it always travels inline."""
    return isinstance(image, (bytes, bytearray)) or (not isinstance(image, (str, Path)) and image is not None and hasattr(image, "convert"))


def _inline_fields(name: str, image: Any, *, root: str | Path | None, limits: ImageLimits, confine: bool) -> dict[str, str]:
    """The wire fields of an image read here: ``image`` (its name) and ``image_b64``, or the
    error that stopped the read in ``image_error``."""
    try:
        loaded = load_image(image, root=root, decode=False, limits=limits, confine=confine)
        return {"image": name, "image_b64": base64.b64encode(loaded.data or b"").decode("ascii")}
    except ImageError as exc:
        return {"image_error": str(exc)}


def fetch_url_fields(urls: list[str], limits: ImageLimits, read: dict[str, dict[str, str]]) -> None:
    """The ``http(s)`` image URLs of one request fetched here, together (the local policy: a
    client is its user's own run; ``limits``' size cap and timeout, all of them within
    :data:`~capjudge.data.images.REQUEST_DEADLINE_FACTOR` times it), each put into ``read`` as the
    wire fields :func:`row_to_wire` sends: its bytes inline under the URL's name, or its error."""
    todo = [u for u in dict.fromkeys(urls) if u not in read]
    got = fetch_many(todo, limits, LOCAL_SOURCES, deadline=REQUEST_DEADLINE_FACTOR * limits.download_timeout)
    for url, body in got.items():
        read[url] = {"image": url, "image_b64": base64.b64encode(body).decode("ascii")} if isinstance(body, bytes) else {"image_error": str(body)}


def row_to_wire(
    row: Mapping[str, Any], index: int, *, images_root: str | Path | None, limits: ImageLimits, confine: bool, send_images: bool = True,
    read: dict[str, dict[str, str]] | None = None,
) -> dict[str, Any]:
    """The wire form of an input row (a dict as :func:`capjudge.run.inputcheck.load_items` reads
    it). ``index`` becomes the ``id`` of a row without one (what a local run's record says). With
    ``send_images``, a local image is read here (``images_root``, ``confine`` as a local run
    reads it) and an ``http(s)`` URL fetched here (:func:`fetch_url_fields`), and sent as
    ``image_b64``, or its error as ``image_error``. Encoded bytes and PIL images are always sent
    inline, named as a local run's records name them. ``read`` keeps each image's fields, so that
    the captions of one image in a request read and encode it once."""
    out = {k: row[k] for k in ROW_FIELDS if k in row}
    if out.get("id") is None:
        out["id"] = str(index)
    if isinstance(out.get("references"), tuple):
        out["references"] = list(out["references"])
    image: Any = row.get("image")
    if is_image_object(image):
        key = f"\0object-{id(image)}"  # the row holds the object for the whole request: its id is its own
        fields = read.get(key) if read is not None else None
        if fields is None:
            fields = _inline_fields(image_label(image), image, root=None, limits=limits, confine=False)
            if read is not None:
                read[key] = fields
        out["image"] = image_label(image)  # its name, also when it could not be read
        out.update(fields)
        return out
    if not send_images or not isinstance(image, (str, Path)):
        if isinstance(image, Path):
            out["image"] = str(image)
        return out
    text = str(image)
    if text.startswith("data:"):
        return out
    read = read if read is not None else {}
    if is_url(text) and text not in read:
        fetch_url_fields([text], limits, read)
    fields = read.get(text)
    if fields is None:
        fields = read[text] = _inline_fields(text, text, root=images_root, limits=limits, confine=confine)
    out.update(fields)
    return out


def row_from_wire(item: Any, max_image_bytes: int) -> Any:
    """An input row for the server's judge: ``image_b64`` / ``image_error`` become an
    :class:`InlineImage`; anything else is passed on as it is (the judge makes the error record of
    a malformed row, naming it). An image above ``max_image_bytes`` is that row's error."""
    if not isinstance(item, dict):
        return item
    row = {k: item[k] for k in ROW_FIELDS if k in item}
    if "image_b64" not in item and "image_error" not in item:
        image = row.get("image")
        if isinstance(image, str) and image.startswith("data:"):
            row["image"] = data_url_image(image, max_image_bytes)
        return row
    name = row.get("image")
    name = name if isinstance(name, str) else "<inline image>"
    error = item.get("image_error")
    if error is not None:
        row["image"] = InlineImage(name, error=str(error)[:MAX_ERROR_CHARS])
        return row
    b64 = item.get("image_b64")
    if not isinstance(b64, str):
        row["image"] = InlineImage(name, error=f"image {name!r}: image_b64 is not a base64 string")
        return row
    row["image"] = _inline(name, b64, max_image_bytes, "image_b64", strict=True)
    return row


def data_url_image(url: str, max_image_bytes: int) -> InlineImage:
    """A ``data:`` URL image as an :class:`InlineImage` under the same size cap as ``image_b64``,
    named as a local run's records name it (its first characters)."""
    name = image_label(url)
    _, comma, b64 = url.partition(",")
    if not comma:
        return InlineImage(name, error=f"image {name!r}: the data URL has no ',' before its data")
    return _inline(name, b64, max_image_bytes, "the data URL", strict=False)


def _inline(name: str, b64: str, max_image_bytes: int, what: str, *, strict: bool) -> InlineImage:
    """The image of base64 text, or its error: over the cap (checked before decoding) or not base64."""
    if len(b64) * 3 // 4 > max_image_bytes + 3:
        return InlineImage(name, error=f"image {name!r} is over the server's size cap of {max_image_bytes:,} bytes: refused")
    try:
        data = base64.b64decode(b64, validate=strict)
    except (binascii.Error, ValueError):
        return InlineImage(name, error=f"image {name!r}: {what} is not valid base64")
    if len(data) > max_image_bytes:  # lenient decoding skips characters: the bytes decide
        return InlineImage(name, error=f"image {name!r} is over the server's size cap of {max_image_bytes:,} bytes: refused")
    return InlineImage(name, data=data)


def items_of(body: Any, field: str) -> list[Any]:
    """The list ``body[field]`` of a request body (a :class:`WireError` otherwise)."""
    if not isinstance(body, dict):
        raise WireError("the request body must be a JSON object")
    items = body.get(field)
    if not isinstance(items, list):
        raise WireError(f"the request body must have {field!r}: a list")
    return items


__all__ = ["INLINE_PREFIX", "InlineImage", "ROW_FIELDS", "WireError", "data_url_image", "fetch_url_fields", "is_image_object", "is_url", "items_of", "named", "row_from_wire", "row_to_wire"]
