"""Loading images once, with a content hash, and the clear errors a benchmark run needs.

Every backend receives :class:`LoadedImage`: the decoded RGB picture, the original encoded bytes
(API backends send these), and the SHA-256 of the bytes (the cache key and the grouping key: two
paths to the same file are one image).

Decoded pixels have a budget (:class:`ImageLimits`): a picture above ``max_pixels`` is downscaled
as it is loaded (a JPEG is decoded at a reduced size, never in full; other formats are decoded one
at a time and shrunk at once), its encoded bytes replaced by the smaller picture's (so every backend
sees the same pixels, and the content hash, hence the cache key, is that of what was sent), or
refused with ``oversize="refuse"``. Remote images are downloaded with a size cap and an overall
deadline. With ``root`` and ``confine=True`` a path that leaves ``root`` is refused. Which inputs
are read at all is the policy of :class:`~capjudge.data.imagesources.ImageSources` (a local run: every
path and URL; a shared judge: inline images unless its operator widened it), checked here.
"""

from __future__ import annotations

import base64
import hashlib
import io
import math
import threading
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from capjudge.core.errors import SampleFailure
from capjudge.core.redact import get_logger, stable
from capjudge.data.imagesources import (
    LOCAL_SOURCES,
    MAX_REDIRECTS,
    AddressRefused,
    ImageSources,
    pinned,
)
from capjudge.data.types import ImageInput, image_label

if TYPE_CHECKING:
    from PIL import Image as PILImage


log = get_logger("capjudge.images")  # its name before the move to data/: log filters keep working


class ImageError(SampleFailure):
    """An image could not be read or decoded; the message names the image and the cause."""


DEFAULT_MAX_PIXELS = 40_000_000  # ~7300x5500: above any VLM's input (they resize to ~1-4 Mpx)
DEFAULT_MAX_DOWNLOAD_BYTES = 50 * 1024 * 1024
DEFAULT_DOWNLOAD_TIMEOUT = 30.0
OversizePolicy = Literal["downscale", "refuse"]


@dataclass(frozen=True)
class ImageLimits:
    """The budget of one image.

    ``max_pixels``: decoded pictures above it are downscaled at load to fit (``oversize=
    "downscale"``) or refused (``"refuse"``); 0 turns the limit off. ``max_download_bytes`` and
    ``download_timeout`` (seconds for the whole download, not per read) bound an ``http(s)`` image.
    """

    max_pixels: int = DEFAULT_MAX_PIXELS
    oversize: OversizePolicy = "downscale"
    max_download_bytes: int = DEFAULT_MAX_DOWNLOAD_BYTES
    download_timeout: float = DEFAULT_DOWNLOAD_TIMEOUT

    def __post_init__(self) -> None:
        if not isinstance(self.max_pixels, int) or self.max_pixels < 0:
            raise ValueError(f"max_image_pixels must be a whole number of pixels >= 0 (0: no limit), got {self.max_pixels!r}")
        if self.oversize not in ("downscale", "refuse"):
            raise ValueError(f"oversize_images must be 'downscale' or 'refuse', got {self.oversize!r}")
        if not isinstance(self.max_download_bytes, int) or self.max_download_bytes <= 0:
            raise ValueError(f"max_image_bytes must be a positive number of bytes, got {self.max_download_bytes!r}")
        if not (isinstance(self.download_timeout, (int, float)) and self.download_timeout > 0):
            raise ValueError(f"image_timeout must be a positive number of seconds, got {self.download_timeout!r}")


DEFAULT_LIMITS = ImageLimits()
# Pictures above the pixel limit that Pillow can only decode in full are decoded one at a time
# in a process (the loader thread and the run's thread never hold two such decodes at once).
_FULL_DECODE = threading.Lock()


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
    # (width, height) of the file when the picture was downscaled to fit the pixel limit
    original_size: tuple[int, int] | None = None
    limits: ImageLimits = field(default=DEFAULT_LIMITS, repr=False, compare=False)
    _pil: PILImage.Image | None = field(default=None, repr=False, compare=False)
    _data_url: str | None = field(default=None, init=False, repr=False, compare=False)  # data_url(), made once
    _failure: str | None = field(default=None, init=False, repr=False, compare=False)  # pil()'s error, kept

    def pil(self) -> PILImage.Image:
        """The picture as an RGB PIL image (decoded lazily, downloaded if it is a URL, within
        :attr:`limits`)."""
        if self._pil is not None:
            return self._pil
        if self._failure is not None:  # a URL that failed once is not fetched again by each caption
            raise ImageError(self._failure)
        data = self.data
        try:
            if not data and self.url:
                data = download(self.url, self.limits)
            img, original = _decode(data, self.label, self.limits)
        except ImageError as exc:
            object.__setattr__(self, "_failure", str(exc))
            raise
        object.__setattr__(self, "_pil", img)
        if original is not None:
            object.__setattr__(self, "original_size", original)
        return img

    def downscale_details(self) -> dict[str, object] | None:
        """What a record says of a picture downscaled to fit the pixel limit (``details
        ["image_downscaled"]``: ``from`` and ``to`` sizes, ``max_pixels``); ``None`` if it was not."""
        if self.original_size is None or self._pil is None:
            return None
        return {"from": list(self.original_size), "to": list(self._pil.size), "max_pixels": self.limits.max_pixels}

    def nbytes(self) -> int:
        """Bytes this image holds now: encoded data, decoded pixels, the ``data:`` URL."""
        pixels = self._pil.width * self._pil.height * len(self._pil.getbands()) if self._pil is not None else 0
        return len(self.data) + pixels + len(self._data_url or "")

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


def _factor(width: int, height: int, max_pixels: int) -> int:
    """The smallest whole factor that brings ``width`` x ``height`` within ``max_pixels``."""
    factor = max(1, math.ceil(math.sqrt(width * height / max_pixels)))
    while math.ceil(width / factor) * math.ceil(height / factor) > max_pixels:
        factor += 1
    return factor


def _decode(data: bytes, label: str, limits: ImageLimits = DEFAULT_LIMITS) -> tuple[PILImage.Image, tuple[int, int] | None]:
    """Decode to RGB within ``limits``: the picture (its ``info["format"]`` is the file's format)
    and, when it was downscaled, the file's (width, height)."""
    from PIL import Image, UnidentifiedImageError

    original: tuple[int, int] | None = None
    try:
        opened = Image.open(io.BytesIO(data))
        fmt = opened.format
        w, h = opened.size
        if limits.max_pixels and w * h > limits.max_pixels:
            if limits.oversize == "refuse":
                raise ImageError(
                    f"image {label!r} is {w}x{h} = {w * h:,} pixels, above the limit of {limits.max_pixels:,} "
                    "(--max-image-pixels): refused (--oversize-images refuse); downscale would shrink it"
                )
            original = (w, h)
            img = _downscaled(opened, limits.max_pixels)
        else:
            opened.load()
            img = opened
    except UnidentifiedImageError:
        # PIL's own text names the in-memory buffer by its address, which differs in every run.
        raise ImageError(f"image {label!r} could not be decoded: not an image in a format Pillow reads (unknown format or corrupt file)") from None
    except (OSError, ValueError, Image.DecompressionBombError) as exc:
        if isinstance(exc, ImageError):
            raise
        raise ImageError(f"image {label!r} could not be decoded: {stable(str(exc))}") from None
    # Already RGB (most JPEGs): keep the decoded image, as convert() would only copy it.
    rgb = img if img.mode == "RGB" else img.convert("RGB")
    rgb.info["format"] = fmt
    return rgb, original


def _downscaled(img: PILImage.Image, max_pixels: int) -> PILImage.Image:
    """``img`` (opened, not yet decoded) shrunk by a whole factor to at most ``max_pixels``
    (each pixel the mean of a factor x factor box). A JPEG is decoded at 1/2, 1/4 or 1/8 of its
    size by the decoder itself (``draft``), never in full; other formats are decoded in full, one
    at a time in the process (``_FULL_DECODE``), and reduced at once, before any colour
    conversion could copy them."""
    from PIL import Image

    if img.format == "JPEG":
        w, h = img.size
        first = _factor(w, h, max_pixels)
        img.draft("RGB", (math.ceil(w / first), math.ceil(h / first)))
        img.load()
        factor = _factor(*img.size, max_pixels)
        if factor == 1:
            return img
        small = img.reduce(factor)
        img.close()
        return small
    with _FULL_DECODE:
        img.load()
        factor = _factor(*img.size, max_pixels)
        work = img.convert("L") if img.mode == "1" else img  # 1 byte a pixel either way; the box mean needs grey
        if work.mode not in ("L", "LA", "RGB", "RGBA", "RGBX", "I", "F", "CMYK", "YCbCr"):
            # reduce() does not take palette or 16-bit pictures: pick pixels instead
            small = work.resize((math.ceil(work.width / factor), math.ceil(work.height / factor)), Image.Resampling.NEAREST)
        else:
            small = work.reduce(factor)
        # The caller still holds ``img``: free the full decode now, not when it lets go.
        work.close()
        img.close()
    return small


def _encoded(img: PILImage.Image, fmt: str | None) -> tuple[bytes, str]:
    """A downscaled picture's bytes: JPEG stays JPEG, anything else becomes PNG."""
    buf = io.BytesIO()
    if fmt == "JPEG":
        img.save(buf, format="JPEG", quality=95)
        return buf.getvalue(), "image/jpeg"
    img.save(buf, format="PNG", compress_level=1)
    return buf.getvalue(), "image/png"


FETCH_WORKERS = 8
"""Downloads of one request (:func:`fetch_many`, a server's door) run at once."""

REQUEST_DEADLINE_FACTOR = 2.0
"""The images of one request are all fetched within this many times ``limits.download_timeout``."""


def download(url: str, limits: ImageLimits = DEFAULT_LIMITS, sources: ImageSources = LOCAL_SOURCES) -> bytes:
    """The body at ``url``: at most ``limits.max_download_bytes`` (a larger ``Content-Length`` is
    refused before the body is read) within ``limits.download_timeout`` seconds for the whole
    download, however slowly the server sends it. Raises :class:`ImageError` naming the URL.

    Under a policy that refuses private addresses (``sources.private_urls`` false), each hop's host
    is resolved once and checked, the connection goes to that checked address (no proxy), and
    redirects are followed one at a time (at most :data:`~capjudge.data.imagesources.MAX_REDIRECTS`),
    each re-checked. With ``sources.neutral_errors`` every failure has one text (the cause is
    logged at debug level, on this side only)."""
    try:
        return _download(url, limits, sources)
    except ImageError as exc:
        if not sources.neutral_errors:
            raise
        log.debug("image URL not fetched: %s", exc)
        raise ImageError(neutral_fetch_error(url)) from None


def neutral_fetch_error(url: str) -> str:
    """The one text of a failed fetch under a policy with ``neutral_errors``."""
    return f"image {url!r} could not be fetched: refused, unreachable, not found, too large or too slow (a shared judge does not say which)"


def fetch_many(urls: Iterable[str], limits: ImageLimits, sources: ImageSources, *, deadline: float) -> dict[str, bytes | ImageError]:
    """Each of ``urls`` downloaded (:func:`download`), :data:`FETCH_WORKERS` at a time, each within
    ``limits.download_timeout`` and all of them within ``deadline`` seconds: a URL not done by then
    gets its error (its download stops at its own deadline)."""
    todo = list(dict.fromkeys(urls))
    if not todo:
        return {}
    pool = ThreadPoolExecutor(max_workers=min(FETCH_WORKERS, len(todo)), thread_name_prefix="capjudge-image-fetch")
    futures = {pool.submit(download, url, limits, sources): url for url in todo}
    wait(futures, timeout=deadline)
    pool.shutdown(wait=False, cancel_futures=True)
    return {url: fetch_outcome(url, future, sources, deadline) for future, url in futures.items()}


def fetch_outcome(url: str, future: Any, sources: ImageSources, deadline: float) -> bytes | ImageError:
    """What a download's future (a ``concurrent.futures.Future`` or an ``asyncio`` task) gave:
    its bytes, its error, or, not done within ``deadline``, the error saying so."""
    if not future.done() or future.cancelled():
        future.cancel()
        late = f"image {url!r} could not be downloaded: the request's images were not all complete within {deadline:g} s"
        return ImageError(neutral_fetch_error(url) if sources.neutral_errors else late)
    exc = future.exception()
    if exc is None:
        body: bytes = future.result()
        return body
    return exc if isinstance(exc, ImageError) else ImageError(f"image {url!r} could not be downloaded: {type(exc).__name__}")


def _download(url: str, limits: ImageLimits, sources: ImageSources) -> bytes:
    box: dict[str, object] = {}
    stop = threading.Event()
    deadline = time.monotonic() + limits.download_timeout
    # The transfer runs in a helper thread, so that the caller is answered at the deadline even
    # while a read waits on a silent server; the helper then stops at its next chunk or read timeout.
    worker = threading.Thread(target=_fetch_into, args=(url, limits, sources, deadline, stop, box), name="capjudge-image-download", daemon=True)
    worker.start()
    worker.join(max(0.0, deadline - time.monotonic()) + 0.05)
    if worker.is_alive():
        stop.set()
        raise ImageError(f"image {url!r} could not be downloaded: not complete within {limits.download_timeout:g} s (--image-timeout)")
    error = box.get("error")
    if isinstance(error, ImageError):
        raise error
    body = box.get("body")
    assert isinstance(body, bytes)
    return body


def _fetch_into(url: str, limits: ImageLimits, sources: ImageSources, deadline: float, stop: threading.Event, box: dict[str, object]) -> None:
    import httpx

    try:
        if sources.private_urls:
            with httpx.stream("GET", url, timeout=httpx.Timeout(limits.download_timeout), follow_redirects=True) as resp:
                box["body"] = _body(resp, url, limits, deadline, stop)
        else:
            with httpx.Client(timeout=httpx.Timeout(limits.download_timeout), follow_redirects=False, trust_env=False) as client:
                box["body"] = _checked_get(client, url, limits, deadline, stop)
    except ImageError as exc:
        box["error"] = exc
    except httpx.TimeoutException:
        # Each wait is bounded by the whole download's time too: a wait that ran out means the
        # download did not complete in time (whichever of this thread and the caller sees it first).
        box["error"] = ImageError(f"image {url!r} could not be downloaded: not complete within {limits.download_timeout:g} s (--image-timeout)")
    except httpx.HTTPError as exc:
        box["error"] = ImageError(f"image {url!r} could not be downloaded: {stable(str(exc))}")
    except Exception as exc:  # noqa: BLE001 - reported to the caller as the image's error
        box["error"] = ImageError(f"image {url!r} could not be downloaded: {type(exc).__name__}: {stable(str(exc))}")


def _checked_get(client: Any, url: str, limits: ImageLimits, deadline: float, stop: threading.Event) -> bytes:
    """The body at ``url``, each hop connected to its host's checked address, redirects re-checked."""
    import httpx

    target = httpx.URL(url)
    for _ in range(MAX_REDIRECTS + 1):
        try:
            where, headers, extensions = pinned(target)
        except AddressRefused as exc:
            raise ImageError(f"image {url!r} could not be downloaded: {exc}") from None
        with client.stream("GET", where, headers=headers, extensions=extensions) as resp:
            if resp.is_redirect:
                target = target.join(resp.headers["location"])
                continue
            return _body(resp, url, limits, deadline, stop)
    raise ImageError(f"image {url!r} could not be downloaded: more than {MAX_REDIRECTS} redirects")


def _body(resp: Any, url: str, limits: ImageLimits, deadline: float, stop: threading.Event) -> bytes:
    """A response's body within the size cap and the deadline (an error status raises)."""
    cap = limits.max_download_bytes
    too_large = f"image {url!r} could not be downloaded: larger than {cap:,} bytes (--max-image-bytes)"
    resp.raise_for_status()
    declared = resp.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > cap:
        raise ImageError(too_large + f": the server announces {int(declared):,}")
    body = bytearray()
    for chunk in resp.iter_bytes():  # decoded: a compressed body is counted as it unpacks
        body += chunk
        if len(body) > cap:
            raise ImageError(too_large)
        if stop.is_set() or time.monotonic() > deadline:
            raise ImageError(f"image {url!r} could not be downloaded: not complete within {limits.download_timeout:g} s (--image-timeout)")
    return bytes(body)


def _inside(path: Path, root: Path) -> bool:
    """Whether ``path`` (symlinks followed) lies inside ``root``."""
    try:
        path.resolve().relative_to(root.resolve())
    except (ValueError, OSError, RuntimeError):
        return False
    return True


def load_image(
    image: ImageInput | LoadedImage,
    *,
    root: str | Path | None = None,
    decode: bool = True,
    limits: ImageLimits = DEFAULT_LIMITS,
    confine: bool = False,
    sources: ImageSources = LOCAL_SOURCES,
) -> LoadedImage:
    """Read an image input into a :class:`LoadedImage`.

    ``root`` resolves relative paths; with ``confine=True`` a path that leaves ``root`` (``../``,
    an absolute path, a symlink pointing outside) is refused. With ``decode=True`` the bytes are
    decoded at once so that a corrupt file fails here, naming the file, rather than deep inside a
    model call; a picture above ``limits.max_pixels`` is then downscaled (``original_size`` says
    from what) or refused. ``sources`` says which paths and URLs are read at all; a URL it checks
    (:attr:`~capjudge.data.imagesources.ImageSources.checks_urls`) is downloaded here, under its address
    check, else left to a local backend's lazy download. Raises :class:`ImageError` for a missing,
    unreadable, corrupt, refused or outside image.
    """
    if isinstance(image, LoadedImage):
        return image
    label = image_label(image)
    pil = None
    if isinstance(image, (bytes, bytearray)):
        data = bytes(image)
    elif isinstance(image, (str, Path)):
        s = str(image)
        refusal = sources.refusal(s)
        if refusal is not None:
            raise ImageError(refusal)
        if s.startswith(("http://", "https://")):
            if not sources.checks_urls:
                return LoadedImage(sha256=hashlib.sha256(s.encode()).hexdigest(), label=s, url=s, limits=limits)
            data = download(s, limits, sources)
        elif s.startswith("data:"):
            try:
                header, b64 = s.split(",", 1)
                data = base64.b64decode(b64, validate=False)
            except (ValueError, TypeError) as exc:
                raise ImageError(f"image data URL could not be read: {exc}") from None
        else:
            path = Path(s)
            if root is not None and not path.is_absolute():
                path = Path(root) / path
            if confine and root is not None and not _inside(path, Path(root)):
                raise ImageError(
                    f"image {s!r} is outside the images folder {str(root)!r} (it resolves to {str(path.resolve())!r}): "
                    "not read; pass --allow-outside-images (allow_outside_images=True) to read it"
                )
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
    mime = "image/png"
    original: tuple[int, int] | None = None
    if decode and pil is None:
        pil, original = _decode(data, label, limits)
        fmt = pil.info.get("format")
        mime = _MIME.get(fmt or "PNG", "image/png")
        if original is not None:
            # Every backend gets the smaller picture (API backends send ``data``), and the hash,
            # the cache key, is that of what is sent.
            data, mime = _encoded(pil, fmt)
            pil.info["format"] = "JPEG" if mime == "image/jpeg" else "PNG"
    elif pil is not None and limits.max_pixels and pil.width * pil.height > limits.max_pixels:
        if limits.oversize == "refuse":
            raise ImageError(f"image {label!r} is {pil.width}x{pil.height} = {pil.width * pil.height:,} pixels, above the limit of {limits.max_pixels:,} (--max-image-pixels): refused")
        original = pil.size
        pil = pil.reduce(_factor(pil.width, pil.height, limits.max_pixels))
        data, mime = _encoded(pil, "PNG")
    sha = hashlib.sha256(data).hexdigest()
    return LoadedImage(sha256=sha, label=label, data=data, mime=mime, original_size=original, limits=limits, _pil=pil)


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
