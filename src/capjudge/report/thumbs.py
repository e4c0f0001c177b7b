"""Small embedded thumbnails for the HTML report: an image reference becomes a ``data:`` URI.

Images are read from local files only (the report is made offline; an ``http(s)`` image is never
fetched) and downscaled with Pillow to a JPEG of at most ``max_px`` on the longer side, so that a
report of many samples stays a few KB per image. Whatever goes wrong (a missing file, a corrupt
one, a remote URL) becomes a :class:`Thumb` with no URI and the reason, never an exception: one
bad image must not cost the whole report.

A report made of someone else's results file must not carry pictures from elsewhere on this
machine: with ``allowed`` folders, a file that lies outside all of them (``../``, an absolute path,
a symlink pointing out) is not embedded, and its row says why.
"""

from __future__ import annotations

import base64
import binascii
import io
from dataclasses import dataclass
from pathlib import Path

DEFAULT_MAX_PX = 160
# Pillow refuses images above ~179 Mpx with DecompressionBombError; the report does not need
# anything that large, and saying so is better than hanging on a 2 GB TIFF.
_MAX_PIXELS = 100_000_000


@dataclass(frozen=True)
class Thumb:
    """A thumbnail (``uri``: a ``data:image/jpeg`` URI) or why there is none (``error``)."""

    label: str
    uri: str | None = None
    error: str | None = None


def resolve(image: str, roots: list[Path]) -> Path | None:
    """The first existing file for ``image``: as given when absolute, else under each root in turn."""
    p = Path(image).expanduser()
    if p.is_absolute():
        return p if p.is_file() else None
    for root in roots:
        candidate = root / p
        if candidate.is_file():
            return candidate
    return None


def _encode(data: bytes, label: str, max_px: int) -> Thumb:
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as img:
            w, h = img.size
            if w * h > _MAX_PIXELS:
                return Thumb(label, error=f"image too large for a thumbnail ({w}x{h})")
            img.draft("RGB", (max_px, max_px))  # JPEG: decode at a reduced size, much faster
            rgb = img.convert("RGB")
            rgb.thumbnail((max_px, max_px))
            buf = io.BytesIO()
            rgb.save(buf, "JPEG", quality=80, optimize=True)
    except UnidentifiedImageError:
        return Thumb(label, error="could not be decoded: not an image Pillow can read (unknown format or corrupt file)")
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as exc:
        return Thumb(label, error=f"could not be decoded: {exc}")
    return Thumb(label, uri="data:image/jpeg;base64," + base64.b64encode(buf.getvalue()).decode("ascii"))


def _inside_any(path: Path, folders: list[Path]) -> bool:
    """Whether ``path`` (symlinks followed) lies inside one of ``folders``."""
    try:
        real = path.resolve()
    except (OSError, RuntimeError):
        return False
    for folder in folders:
        try:
            real.relative_to(folder.resolve())
        except (ValueError, OSError, RuntimeError):
            continue
        return True
    return False


def make_thumb(image: str | None, roots: list[Path], max_px: int = DEFAULT_MAX_PX, allowed: list[Path] | None = None) -> Thumb:
    """The thumbnail of a results record's ``image`` (a path, relative ones tried under ``roots``,
    or a ``data:`` URI); a :class:`Thumb` with ``error`` set when it cannot be made, or when
    ``allowed`` folders are given and the file lies outside them."""
    label = str(image or "")
    if not label:
        return Thumb(label, error="the record names no image")
    if label.startswith("data:"):
        head, _, payload = label.partition(",")
        try:
            data = base64.b64decode(payload, validate=False) if ";base64" in head else payload.encode("latin-1")
        except (binascii.Error, ValueError, UnicodeEncodeError):
            return Thumb(label[:32] + "...", error="malformed data: URI")
        return _encode(data, label[:32] + "...", max_px)
    if label.startswith(("http://", "https://")):
        return Thumb(label, error="remote image: not fetched (the report is built offline)")
    path = resolve(label, roots)
    if path is None:
        where = ", ".join(str(r) for r in roots) or "the current folder"
        return Thumb(label, error=f"file not found (looked in {where}; give --images DIR)")
    if allowed is not None and not _inside_any(path, allowed):
        folders = ", ".join(str(f) for f in allowed)
        return Thumb(label, error=f"not embedded: the file is outside the image folder ({folders}); give --allow-outside-images to embed it")
    try:
        data = path.read_bytes()
    except OSError as exc:
        return Thumb(label, error=f"cannot read {path}: {exc.strerror or exc}")
    return _encode(data, label, max_px)


class ThumbCache:
    """Thumbnails by image reference, made once each (several captions share an image). Each
    distinct image gets a short CSS class name, so that the page embeds its data once."""

    def __init__(self, roots: list[Path], max_px: int = DEFAULT_MAX_PX, allowed: list[Path] | None = None) -> None:
        self.roots = roots
        self.max_px = max_px
        self.allowed = allowed  # None: any file found is embedded
        self._thumbs: dict[str, tuple[str, Thumb]] = {}

    def get(self, image: str | None) -> tuple[str, Thumb]:
        """(CSS class, thumbnail) of ``image``; with ``max_px`` 0 no thumbnail is made."""
        key = str(image or "")
        if key not in self._thumbs:
            thumb = make_thumb(key, self.roots, self.max_px, self.allowed) if self.max_px > 0 else Thumb(key, error="thumbnails turned off")
            self._thumbs[key] = (f"t{len(self._thumbs)}", thumb)
        return self._thumbs[key]

    def css_classes(self) -> list[tuple[str, str]]:
        """(class name, data URI) of every thumbnail made."""
        return [(cls, t.uri) for cls, t in self._thumbs.values() if t.uri]
