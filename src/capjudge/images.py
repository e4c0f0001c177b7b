"""Loading images once, with a content hash, and the clear errors a benchmark run needs.

Every backend receives :class:`LoadedImage`: the decoded RGB picture, the original encoded bytes
(API backends send these), and the SHA-256 of the bytes (the cache key and the grouping key: two
paths to the same file are one image).
"""

from __future__ import annotations

import base64
import hashlib
import io
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from capjudge.redact import stable
from capjudge.types import ImageInput, image_label

if TYPE_CHECKING:
    from PIL import Image as PILImage


class ImageError(ValueError):
    """An image could not be read or decoded; the message names the image and the cause."""


@dataclass(frozen=True)
class LoadedImage:
    """A decoded image with its encoded bytes and content hash.

    ``url`` is set (and ``data`` may be empty) for an ``http(s)`` image that was not downloaded:
    API backends pass such URLs through; local backends download them on demand.
    """

    sha256: str
    label: str
    data: bytes = field(repr=False, default=b"")
    mime: str = "image/png"
    url: str | None = None
    _pil: PILImage.Image | None = field(default=None, repr=False, compare=False)
    _data_url: str | None = field(default=None, init=False, repr=False, compare=False)  # data_url(), made once

    def pil(self) -> PILImage.Image:
        """The picture as an RGB PIL image (decoded lazily, downloaded if it is a URL)."""
        if self._pil is not None:
            return self._pil
        data = self.data
        if not data and self.url:
            data = _download(self.url)
        img = _decode(data, self.label)
        object.__setattr__(self, "_pil", img)
        return img

    def data_url(self) -> str:
        """A ``data:`` URL of the encoded bytes (what the OpenAI protocol accepts). Encoded once
        per image and kept: every caption of the image sends the same string."""
        if self.url and not self.data:
            return self.url
        if self._data_url is None:
            object.__setattr__(self, "_data_url", f"data:{self.mime};base64,{base64.b64encode(self.data).decode('ascii')}")
        assert self._data_url is not None
        return self._data_url


_MIME = {"JPEG": "image/jpeg", "PNG": "image/png", "GIF": "image/gif", "WEBP": "image/webp", "BMP": "image/bmp"}


def _decode(data: bytes, label: str) -> PILImage.Image:
    """Decode to RGB; the returned image keeps the file's format name in ``info["format"]``."""
    from PIL import Image, UnidentifiedImageError

    try:
        img = Image.open(io.BytesIO(data))
        img.load()
    except UnidentifiedImageError:
        # PIL's own text names the in-memory buffer by its address, which differs in every run.
        raise ImageError(f"image {label!r} could not be decoded: not an image in a format Pillow reads (unknown format or corrupt file)") from None
    except (OSError, ValueError, Image.DecompressionBombError) as exc:
        raise ImageError(f"image {label!r} could not be decoded: {stable(str(exc))}") from None
    fmt = img.format
    # Already RGB (most JPEGs): keep the decoded image, as convert() would only copy it.
    rgb = img if img.mode == "RGB" else img.convert("RGB")
    rgb.info["format"] = fmt
    return rgb


def _download(url: str) -> bytes:
    import httpx

    try:
        resp = httpx.get(url, timeout=30.0, follow_redirects=True)
        resp.raise_for_status()
    except httpx.HTTPError as exc:
        raise ImageError(f"image {url!r} could not be downloaded: {exc}") from None
    return resp.content


def load_image(image: ImageInput | LoadedImage, *, root: str | Path | None = None, decode: bool = True) -> LoadedImage:
    """Read an image input into a :class:`LoadedImage`.

    ``root`` resolves relative paths. With ``decode=True`` the bytes are decoded at once so that a
    corrupt file fails here, naming the file, rather than deep inside a model call.
    Raises :class:`ImageError` for a missing, unreadable or corrupt image.
    """
    if isinstance(image, LoadedImage):
        return image
    label = image_label(image)
    pil = None
    if isinstance(image, (bytes, bytearray)):
        data = bytes(image)
    elif isinstance(image, (str, Path)):
        s = str(image)
        if s.startswith(("http://", "https://")):
            return LoadedImage(sha256=hashlib.sha256(s.encode()).hexdigest(), label=s, url=s)
        if s.startswith("data:"):
            try:
                header, b64 = s.split(",", 1)
                data = base64.b64decode(b64, validate=False)
            except (ValueError, TypeError) as exc:
                raise ImageError(f"image data URL could not be read: {exc}") from None
        else:
            path = Path(s)
            if root is not None and not path.is_absolute():
                path = Path(root) / path
            if not path.is_file():
                raise ImageError(f"image {s!r} not found (looked for {str(path)!r})")
            try:
                data = path.read_bytes()
            except OSError as exc:
                raise ImageError(f"image {s!r} could not be read: {exc}") from None
    elif image is None or not hasattr(image, "convert"):
        what = "no image given" if image is None else f"unsupported image of type {type(image).__name__}"
        raise ImageError(f"{what}: expected a path, an http(s) or data: URL, encoded bytes or a PIL image")
    else:  # PIL image
        pil = image.convert("RGB")
        buf = io.BytesIO()
        pil.save(buf, format="PNG")
        data = buf.getvalue()
    if not data:
        raise ImageError(f"image {label!r} is empty (0 bytes)")
    sha = hashlib.sha256(data).hexdigest()
    mime = "image/png"
    if decode and pil is None:
        pil = _decode(data, label)
        mime = _MIME.get(pil.info.get("format") or "PNG", "image/png")
    return LoadedImage(sha256=sha, label=label, data=data, mime=mime, _pil=pil)


def pad_to_square(img: PILImage.Image, fill: tuple[int, ...]) -> PILImage.Image:
    """Pad an image to a square with ``fill`` colour, centred (LLaVA-1.5's ``expand2square``)."""
    from PIL import Image

    w, h = img.size
    if w == h:
        return img
    side = max(w, h)
    out = Image.new(img.mode, (side, side), fill)
    out.paste(img, ((side - w) // 2, (side - h) // 2))
    return out
