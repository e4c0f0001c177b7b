"""The llama.cpp backend's prompt as libmtmd chunks: the rendered text and its images tokenized
through libmtmd (bitmaps from the image bytes, or Pillow; placeholder bitmaps for images already in
the KV cache), message text that spells a control token kept as text (:mod:`.specials`).

:class:`MtmdPrompt` is a part of :class:`~capjudge.backends.llamacpp.backend.LlamaCppBackend`
(its base class), kept apart from the decoding and the KV-cache reuse that read its chunks.
"""

from __future__ import annotations

import ctypes
import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from capjudge.backends.base import BackendError, Message, Request
from capjudge.backends.llamacpp.specials import ControlText
from capjudge.core.redact import get_logger
from capjudge.data.images import LoadedImage

log = get_logger(__name__)

_UNNAMED = itertools.count()


@dataclass
class Chunk:
    """One libmtmd chunk: text ``("text", tokens)`` or an image ``("media", id, n_tokens, n_pos)``;
    it fills ``n_tokens`` KV cells and advances the position by ``n_pos`` (they differ for images
    under M-RoPE)."""

    key: tuple[Any, ...]
    n_pos: int
    n_tokens: int


class MtmdPrompt:
    """Tokenizing a request's prompt into libmtmd chunks (the base of ``LlamaCppBackend``, which
    sets the attributes below when it loads the model and projector)."""

    _mtmd: Any
    _handler: Any
    _llm: Any
    _controls: ControlText
    _kv: list[Chunk]
    _marker: str

    def render(self, messages: Sequence[Message]) -> str:
        """The prompt text of a conversation, libmtmd's marker per image (the backend's)."""
        raise NotImplementedError

    @property
    def _mtmd_ctx(self) -> Any:
        """The projector's libmtmd context (the handler exists whenever images are asked)."""
        if self._handler is None:
            raise BackendError("this llama.cpp backend was loaded without a projector: add ?mmproj=<mmproj.gguf> to the spec")
        return self._handler.mtmd_ctx

    def _bitmap(self, image: LoadedImage) -> Any:
        m = self._mtmd
        bitmap = None
        if image.data:
            buf = (ctypes.c_uint8 * len(image.data)).from_buffer_copy(image.data)
            bitmap = m.mtmd_helper_bitmap_init_from_buf(self._mtmd_ctx, buf, len(image.data), False)
        if bitmap is None:  # stb_image cannot read it (or a URL): decode with Pillow
            pil = image.pil()
            rgb = pil.tobytes()
            buf = (ctypes.c_uint8 * len(rgb)).from_buffer_copy(rgb)
            bitmap = m.mtmd_bitmap_init(pil.width, pil.height, buf)
        if bitmap is None:
            raise BackendError(f"llama.cpp could not read image {image.label!r}")
        m.mtmd_bitmap_set_id(bitmap, image.sha256.encode())
        return bitmap

    def _placeholder(self, image: LoadedImage) -> Any:
        """A 1x1 bitmap carrying ``image``'s id: tokenizes to the same chunks when the image's
        token count does not depend on its size (LLaVA-1.5, Gemma 3), without decoding or resizing
        it. For dynamic-resolution families (Qwen-VL, Idefics3 tiles) the chunks usually differ
        from the cached ones and the real image is tokenized instead."""
        m = self._mtmd
        bitmap = m.mtmd_bitmap_init(1, 1, (ctypes.c_uint8 * 3)())
        if bitmap is None:  # pragma: no cover - allocation failure
            raise BackendError("llama.cpp could not allocate an image bitmap")
        m.mtmd_bitmap_set_id(bitmap, image.sha256.encode())
        return bitmap

    def _tokenize(self, request: Request) -> tuple[list[Chunk], Any, list[Any]]:
        """mtmd chunks of the rendered prompt; the caller frees chunks and bitmaps.

        When every image of the request is already evaluated in the KV cache, the prompt is first
        tokenized with placeholder bitmaps (decoding and preprocessing a large image costs more
        than evaluating a caption on small models); that is kept only if all chunks up to the last
        image then match the cache, so the placeholders are never evaluated.
        """
        images = request.images
        if images and self._handler is None:
            raise BackendError("this llama.cpp backend was loaded without a projector: add ?mmproj=<mmproj.gguf> to the spec")
        if self._handler is None:
            prompt = self.render(request.messages)
            if self._controls.holds_hidden(prompt):
                tokens = self._controls.tokenize(prompt, True)
            else:
                tokens = self._llm.tokenize(prompt.encode(), add_bos=True, special=True)
            return [Chunk(("text", tuple(tokens)), len(tokens), len(tokens))], tokens, []
        text = self.render(request.messages).encode("utf-8")
        cached = {c.key[1] for c in self._kv if c.key[0] == "media"}
        if images and all(img.sha256.encode() in cached for img in images):
            try:
                out, chunks, bitmaps = self._mtmd_tokenize(text, [self._placeholder(img) for img in images])
            except BackendError:  # a projector that refuses a 1x1 image: tokenize the real ones
                out, chunks, bitmaps = [], None, []
            media = [i for i, c in enumerate(out) if c.key[0] == "media"]
            n = media[-1] + 1 if media else 0
            # the prompt goes on after the images (the last chunk is always evaluated)
            if media and n < len(out) and [c.key for c in out[:n]] == [c.key for c in self._kv[:n]]:
                return out, chunks, bitmaps
            self._free(chunks, bitmaps)
        bitmaps = []
        try:
            for img in images:
                bitmaps.append(self._bitmap(img))
        except BaseException:
            self._free(None, bitmaps)
            raise
        return self._mtmd_tokenize(text, bitmaps)

    def _free(self, mt_chunks: Any, bitmaps: list[Any]) -> None:
        if mt_chunks is not None and not isinstance(mt_chunks, list):
            self._mtmd.mtmd_input_chunks_free(mt_chunks)
        for b in bitmaps:
            self._mtmd.mtmd_bitmap_free(b)

    def _mtmd_tokenize(self, text: bytes, bitmaps: list[Any]) -> tuple[list[Chunk], Any, list[Any]]:
        """Tokenize ``text`` with its images through libmtmd; frees everything if that fails.
        Message text that spells a control token is tokenized as text (:mod:`.specials`)."""
        prompt = text.decode("utf-8")
        if not self._controls.holds_hidden(prompt):
            return self._mtmd_tokenize_raw(text, bitmaps)
        out, chunks, bitmaps = self._mtmd_tokenize_raw(text, bitmaps)
        spliced = self._controls.splice(prompt, self._marker, [c.key[1] if c.key[0] == "text" else None for c in out])
        if spliced is not None:
            return [c if s is None else Chunk(("text", s), len(s), len(s)) for c, s in zip(out, spliced)], chunks, bitmaps
        log.warning("could not place the caption's text among libmtmd's chunks: its special-token strings are broken up instead")
        self._mtmd.mtmd_input_chunks_free(chunks)
        return self._mtmd_tokenize_raw(self._controls.defused(prompt).encode("utf-8"), bitmaps)

    def _mtmd_tokenize_raw(self, text: bytes, bitmaps: list[Any]) -> tuple[list[Chunk], Any, list[Any]]:
        m = self._mtmd
        inp = m.mtmd_input_text()
        inp.text = text
        inp.text_len = len(text)
        inp.add_special = True
        inp.parse_special = True
        chunks = m.mtmd_input_chunks_init()
        arr = (m.mtmd_bitmap_p_ctypes * max(1, len(bitmaps)))(*bitmaps)
        rc = m.mtmd_tokenize(self._mtmd_ctx, chunks, ctypes.byref(inp), arr, len(bitmaps))
        if rc != 0:
            self._free(chunks, bitmaps)
            raise BackendError(f"llama.cpp could not tokenize the prompt with its {len(bitmaps)} image(s) (mtmd_tokenize returned {rc})")
        out: list[Chunk] = []
        for i in range(m.mtmd_input_chunks_size(chunks)):
            c = m.mtmd_input_chunks_get(chunks, i)
            if m.mtmd_input_chunk_get_type(c) == m.MTMD_INPUT_CHUNK_TYPE_TEXT:
                n = ctypes.c_size_t()
                ptr = m.mtmd_input_chunk_get_tokens_text(c, ctypes.byref(n))
                out.append(Chunk(("text", tuple(ptr[j] for j in range(n.value))), int(m.mtmd_input_chunk_get_n_pos(c)), n.value))
            else:
                # the id is the image's sha256 (set on the bitmap); never let two unnamed images match.
                # n_pos is part of the key: under M-RoPE two images of one token count can take
                # different numbers of positions, and what follows them would be placed elsewhere.
                cid = m.mtmd_input_chunk_get_id(c) or f"unnamed-{next(_UNNAMED)}".encode()
                n_tok, n_pos = int(m.mtmd_input_chunk_get_n_tokens(c)), int(m.mtmd_input_chunk_get_n_pos(c))
                out.append(Chunk(("media", cid, n_tok, n_pos), n_pos, n_tok))
        return out, chunks, bitmaps
