"""llama.cpp backend: GGUF vision-language models (text model + projector, ``mmproj``) in-process.

Spec: ``llamacpp:<model.gguf>?mmproj=<mmproj.gguf>&n_ctx=2048&n_threads=8&n_gpu_layers=0&seed=0``
(also ``n_batch``, ``prompt_block``, ``prompt_format``, ``chat_template``, ``verbose``).

Any text model + projector pair that llama.cpp's libmtmd runs (LLaVA-1.5/1.6, Qwen2/2.5/3-VL,
Gemma 3, Idefics3/SmolVLM, InternVL, Pixtral, MiniCPM-V, ...; the table is in :mod:`.families`).
The model and projector are loaded with ``llama-cpp-python`` (``Llama`` and libmtmd's generic
``MTMDChatHandler``); the backend then drives llama.cpp and libmtmd itself rather than going
through ``create_chat_completion``, for four reasons:

* the prompt format is chosen from the GGUF headers (:func:`.families.read_pair`): LLaVA-1.5 gets
  LLaVA's own ``llava_v1`` conversation (``SYSTEM USER: <image>\\n... ASSISTANT:``, ``</s>`` after
  assistant turns), as FLEUR's and VisCE2's code use it; other families their GGUF's own chat
  template, rendered as llama.cpp's server renders it (:mod:`.chat_template`);
* decoding is plain greedy (argmax of the logits): no repeat penalty, top-k or min-p;
* log-probabilities come straight from the logits under the full softmax: the chosen token, the
  top-k alternatives (a list, so tokens that decode to the same text do not overwrite each other)
  and the exact log-probabilities of the ten digit tokens ``"0"``..``"9"`` (FLEUR smoothing);
* the KV cache is kept between requests and the prompt's longest common prefix with the cached one
  is reused: whole leading chunks (system text, the image) and then, inside the first text chunk
  that differs, the longest common token prefix rounded down to a block of ``prompt_block`` tokens
  (default 16). Judging K captions of one image therefore encodes and evaluates the image and the
  instructions up to the caption once; an image already in the cache is not even decoded again.
  Text is always evaluated in the same fixed blocks (counted from the start of its chunk), so a
  reused prompt runs through exactly the batches of a fresh one and results are bit-identical
  whatever ran before (llama.cpp's kernels round differently for different batch sizes).

Images are decoded by llama.cpp (``stb_image``; formats it cannot read fall back to Pillow) and
preprocessed by ``clip.cpp`` as llama.cpp does for each family (LLaVA-1.5: pad to square, resize,
normalise; Qwen-VL: dynamic resolution; ...). Positions follow libmtmd: an image takes as many
positions as tokens, except under Qwen's multimodal rotary positions (M-RoPE), where it takes
``max(rows, columns)``; the context (``n_ctx``) counts tokens.
"""

from __future__ import annotations

import ctypes
import threading
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from capjudge.backends.base import (
    DIGITS,
    Backend,
    BackendError,
    Capabilities,
    Completion,
    ContextLengthError,
    Message,
    Request,
    TokenStep,
    Usage,
)
from capjudge.backends.llamacpp.chat_template import render_chat_template
from capjudge.backends.llamacpp.families import (
    GGUFPair,
    UnsupportedModelError,
    read_headers,
    read_pair,
    supported_families,
)
from capjudge.backends.llamacpp.gguf_files import check_gguf, file_digest
from capjudge.backends.llamacpp.mtmd_prompt import Chunk, MtmdPrompt
from capjudge.backends.llamacpp.sampling import first_stop, image_group_key, sample
from capjudge.backends.llamacpp.specials import ControlText
from capjudge.backends.llava_prompt import render_llava_v1
from capjudge.backends.options import OptionError, as_bool, as_int, check_known
from capjudge.backends.thinking import OPTIONS as THINKING_OPTIONS
from capjudge.backends.thinking import Plan, Thinking, plan
from capjudge.backends.thinking import parse as parse_thinking
from capjudge.core.redact import get_logger

log = get_logger(__name__)

__all__ = ["LlamaCppBackend", "ProjectorMismatchError", "UnsupportedModelError", "from_spec", "render_llava_v1"]

DEFAULT_N_CTX = 2048  # LLaVA-1.5 was trained at 2048; 576 image tokens + prompt + answer fit
PROMPT_FORMATS = ("auto", "llava_v1", "chat_template")
MAX_TOP_LOGPROBS = 100
DEFAULT_PROMPT_BLOCK = 16  # tokens; see LlamaCppBackend._decode_blocks


class ProjectorMismatchError(BackendError):
    """The mmproj file does not belong to the text model (its output width differs)."""


def _block_size(prompt_block: int, n_batch: int) -> int:
    """Text is evaluated (and reused) in blocks of this many tokens; ``<= 0``: whole batches."""
    return max(1, min(int(prompt_block), int(n_batch))) if prompt_block > 0 else max(1, int(n_batch))


def check_files(model_path: Path, mmproj_path: Path | None, *, prompt_format: str = "auto", chat_template: Path | None = None) -> GGUFPair:
    """Both files exist and are GGUF, the pair is one llama.cpp runs (see :mod:`.families`), and
    the projector's output width is the model's. Returns what the headers say and the prompt
    format chosen."""
    check_gguf(model_path, "model")
    if mmproj_path is not None:
        check_gguf(mmproj_path, "mmproj (projector)")
    pair = read_pair(model_path, mmproj_path, prompt_format=prompt_format, chat_template=chat_template)
    text_w, proj_w = gguf_widths(model_path, mmproj_path) if mmproj_path is not None else (None, None)
    if mmproj_path is not None and text_w is not None and proj_w is not None and text_w != proj_w:
        raise ProjectorMismatchError(
            f"projector {str(mmproj_path)!r} outputs {proj_w}-wide embeddings but model "
            f"{str(model_path)!r} has width {text_w}: use the mmproj file released with this model"
        )
    return pair


def model_identity(
    model_path: Path, mmproj_path: Path | None, *, block: int, n_batch: int, n_gpu_layers: int, seed: int, pair: GGUFPair | None = None, thinking: Thinking | None = None, fitted: Plan | None = None
) -> dict[str, Any]:
    """Kind, model file name and content digest, projector name and digest, the prompt format
    chosen (for a chat template: its digest, the architecture and projector type), and the
    settings that change the logits' rounding. LLaVA-1.5 (``llava_v1``) keeps the identity it had
    before other families were supported, so existing caches stay valid."""
    chosen = pair.identity() if pair is not None else {"prompt_format": "llava_v1"}
    return {
        "kind": LlamaCppBackend.kind,
        "model": model_path.stem,
        "model_digest": file_digest(model_path),
        "mmproj": mmproj_path.name if mmproj_path else None,
        "mmproj_digest": file_digest(mmproj_path) if mmproj_path else None,
        **chosen,
        "decoding": "argmax",
        "seed": int(seed),
        # Text is evaluated in blocks of this size; another size, another batch size or GPU
        # offloading change the logits' rounding (~1e-7).
        "prompt_block": block,
        "n_batch": int(n_batch),
        "n_gpu_layers": int(n_gpu_layers),
        **(thinking.identity() if thinking is not None else {}),  # non-default thinking settings only
        # the default thinking budget fitted to n_ctx (an option the identity has not): only then
        **({"thinking_budget_fitted": fitted.extra_tokens} if fitted is not None and fitted.fitted_from is not None else {}),
    }


def gguf_plan(model_path: Path, pair: GGUFPair, thinking: Thinking, n_ctx: int | None = None) -> Plan:
    """The thinking plan of a GGUF: its chat template (not LLaVA's ``llava_v1`` prompt) decides;
    the default budget is fitted to ``n_ctx`` (:func:`capjudge.backends.thinking.fit_default_budget`)."""
    source = pair.chat_template if pair.prompt_format == "chat_template" else None
    return plan(thinking, source, model_path.name, context=n_ctx)


def gguf_widths(model_path: Path, mmproj_path: Path) -> tuple[int | None, int | None]:
    """The text model's embedding width and the projector's output width, read from the GGUF
    headers (``None`` where the file does not say, or for a projector type whose width only
    libmtmd computes)."""
    h = read_headers(model_path, mmproj_path)
    return h.text_width, h.projector_width


class LlamaCppBackend(MtmdPrompt, Backend):
    """A GGUF vision-language model run in-process by llama.cpp (see the module docstring).

    ``mmproj`` may be ``None`` for text-only use; requests with images then fail with a clear error.
    ``prompt_block``: text is evaluated, and reused from the KV cache, in blocks of this many tokens
    (at most ``n_batch``); ``<= 0`` evaluates whole batches and reuses only whole prompt chunks.
    ``prompt_format``: ``auto`` (chosen from the GGUF headers, see :mod:`.families`),
    ``llava_v1`` or ``chat_template``; ``chat_template``: a Jinja file replacing the model's own.
    ``thinking`` (``on``/``off``/``auto``), ``thinking_budget``, ``reasoning_markers``: thinking
    models (:mod:`capjudge.backends.thinking`; ``enable_thinking`` is a template variable).
    """

    kind = "llamacpp"

    def __init__(
        self,
        model_path: str | Path,
        mmproj: str | Path | None = None,
        *,
        n_ctx: int = DEFAULT_N_CTX,
        n_threads: int | None = None,
        n_gpu_layers: int = 0,
        n_batch: int = 512,
        prompt_block: int = DEFAULT_PROMPT_BLOCK,
        seed: int = 0,
        prompt_format: str = "auto",
        chat_template: str | Path | None = None,
        verbose: bool = False,
        spec: str = "",
        thinking: str = "auto",
        thinking_budget: int | None = None,
        reasoning_markers: str | None = None,
    ) -> None:
        try:
            import llama_cpp
            import llama_cpp.mtmd_cpp as mtmd_cpp
            from llama_cpp.llama_chat_format import MTMDChatHandler
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise BackendError(f"llama-cpp-python is not installed ({exc}); pip install 'capjudge[llamacpp]'") from exc
        self._llama_cpp = llama_cpp
        self._mtmd = mtmd_cpp
        self.model_path = Path(model_path).expanduser()
        self.mmproj_path = Path(mmproj).expanduser() if mmproj else None
        template_path = Path(chat_template).expanduser() if chat_template else None
        self.pair = check_files(self.model_path, self.mmproj_path, prompt_format=prompt_format, chat_template=template_path)
        self.thinking = parse_thinking({"thinking": thinking, "thinking_budget": thinking_budget, "reasoning_markers": reasoning_markers})
        self.n_ctx = int(n_ctx)
        self._thinking = gguf_plan(self.model_path, self.pair, self.thinking, self.n_ctx)  # before loading: a missing switch fails first
        if self._thinking.fitted_from is not None:
            log.warning("%s: n_ctx=%d, so the default thinking budget is %d tokens (half of it), not %d; --thinking-budget N sets it", self.model_path.name, self.n_ctx, self._thinking.extra_tokens, self._thinking.fitted_from)
        self.seed = int(seed)
        self.verbose = bool(verbose)
        self.spec = spec or f"llamacpp:{self.model_path}" + (f"?mmproj={self.mmproj_path}" if self.mmproj_path else "")
        self.model = self.model_path.stem
        self._lock = threading.Lock()
        self._kv: list[Chunk] = []
        # text is evaluated (and reused) in blocks of this many tokens; <= 0: whole batches
        self._block = _block_size(prompt_block, n_batch)

        if not verbose:  # libmtmd logs through its own callbacks; route them to llama-cpp-python's
            from llama_cpp._logger import llama_log_callback

            mtmd_cpp.mtmd_log_set(llama_log_callback, ctypes.c_void_p(0))
            mtmd_cpp.mtmd_helper_log_set(llama_log_callback, ctypes.c_void_p(0))

        handler = None
        if self.mmproj_path is not None:
            # libmtmd's generic handler; the backend only uses its context (images, tokenizing)
            handler = MTMDChatHandler(clip_model_path=str(self.mmproj_path), verbose=verbose)
        kwargs: dict[str, Any] = {"n_threads": n_threads} if n_threads else {}
        try:
            self._llm = llama_cpp.Llama(
                model_path=str(self.model_path),
                chat_handler=handler,
                n_ctx=self.n_ctx,
                n_batch=n_batch,
                n_gpu_layers=int(n_gpu_layers),
                seed=self.seed,
                logits_all=False,
                verbose=verbose,
                **kwargs,
            )
        except (ValueError, RuntimeError) as exc:
            raise BackendError(
                f"llama.cpp could not load model {str(self.model_path)!r} (general.architecture = "
                f"{self.pair.architecture!r}): {exc}; is the file complete, and is its architecture one that "
                f"llama-cpp-python {getattr(llama_cpp, '__version__', '?')}'s llama.cpp supports?"
            ) from exc
        self._handler = handler
        # Free llama.cpp objects before interpreter teardown (their __del__ fails once stdout is gone).
        self._finalizer = weakref.finalize(self, self._llm.close)
        if handler is not None:
            try:
                handler._init_mtmd_context(self._llm)
            except (ValueError, RuntimeError) as exc:
                self._llm.close()
                raise ProjectorMismatchError(
                    f"llama.cpp could not load projector {str(self.mmproj_path)!r} "
                    f"(clip.projector_type = {self.pair.projector_type!r}) for model {str(self.model_path)!r} "
                    f"(general.architecture = {self.pair.architecture!r}): {exc} (is it the mmproj released "
                    f"with this model? llama.cpp logs the cause with ?verbose=1). Projector types llama.cpp "
                    f"supports for images:\n{supported_families()}"
                ) from exc
        self._ctx = self._llm._ctx.ctx
        self._vocab = self._llm._model.vocab
        self.n_vocab = int(self._llm.n_vocab())
        self._digit_ids = self._find_digit_ids()
        self._marker = mtmd_cpp.mtmd_default_marker().decode("utf-8")
        self._strip_bos = bool(llama_cpp.llama_vocab_get_add_bos(self._vocab))
        self._bos_text = self._special_text(llama_cpp.llama_vocab_bos(self._vocab))
        self._eos_text = self._special_text(llama_cpp.llama_vocab_eos(self._vocab))
        # Message text (captions, references, context) never becomes a control token (.specials).
        self._controls = ControlText(llama_cpp, self._vocab, self.n_vocab, lambda t, a, p: self._llm.tokenize(t, add_bos=a, special=p))
        self.capabilities = Capabilities(
            logprobs=True,
            max_top_logprobs=MAX_TOP_LOGPROBS,
            exact_digit_probs=self._digit_ids is not None,
            images=handler is not None,
            max_images=None,
            batching=False,
            prefix_reuse=True,
            system_prompt=True,
        )
        self._identity = model_identity(self.model_path, self.mmproj_path, block=self._block, n_batch=n_batch, n_gpu_layers=n_gpu_layers, seed=self.seed, pair=self.pair, thinking=self.thinking, fitted=self._thinking)

    # -- vocabulary ---------------------------------------------------------------------------

    def _find_digit_ids(self) -> tuple[int, ...] | None:
        """Token ids of "0".."9": the normal single-character tokens, else the byte tokens."""
        found: dict[str, int] = {}
        for tid in range(self.n_vocab):
            text = self._llm._model.token_get_text(tid)
            if text in DIGITS and text not in found:
                found[text] = tid
        if len(found) < 10:
            for d in DIGITS:
                if d not in found:
                    byte = self._llm.tokenize(f"<0x{ord(d):02X}>".encode(), add_bos=False, special=True)
                    if len(byte) == 1:
                        found[d] = byte[0]
        if len(found) < 10:
            return None
        return tuple(found[d] for d in DIGITS)

    def _piece(self, token: int) -> str:
        raw = self._llm._model.token_to_piece(token, special=True)
        raw = raw.split(b"\0", 1)[0]
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:  # a byte-fallback token holding part of a UTF-8 character
            return self._llm._model.token_get_text(token)

    def _special_text(self, token: int) -> str:
        """The text of a special token (BOS/EOS) as a chat template writes it; ``""`` if none."""
        if token < 0 or token >= self.n_vocab:
            return ""
        return self._llm._model.token_get_text(token)

    def render(self, messages: Sequence[Message]) -> str:
        """The prompt text of a conversation in the chosen format, libmtmd's marker per image;
        a control-token text inside a message's text is held as a private-use character, which
        the tokenization reads as that text (:mod:`.specials`)."""
        messages = [Message(m.role, self._controls.hide(m.content), images=m.images) for m in messages]
        if self.pair.prompt_format == "llava_v1":
            return render_llava_v1(messages, self._marker)
        assert self.pair.chat_template is not None
        return render_chat_template(
            self.pair.chat_template, messages, self._marker,
            bos=self._bos_text, eos=self._eos_text, strip_bos=self._strip_bos, variables=self._thinking.template_kwargs,
        )

    # -- backend API --------------------------------------------------------------------------

    def identity(self) -> dict[str, Any]:
        """Kind, model file name and content digest, projector name and digest, prompt format."""
        return dict(self._identity)

    def generate(self, requests: Sequence[Request]) -> list[Completion | BaseException]:
        """Answer each request; requests of one image are run one after another (prefix reuse). A
        thinking model's budget is added to ``max_new_tokens`` (:mod:`capjudge.backends.thinking`)."""
        asked, requests = requests, self._thinking.budgeted(requests)
        out: list[Completion | BaseException] = [BackendError("not run")] * len(requests)
        order = sorted(range(len(requests)), key=image_group_key(requests))
        with self._lock:
            for i in order:
                try:
                    out[i] = self._run(requests[i])
                except Exception as exc:  # noqa: BLE001 - one bad request never loses the others
                    out[i] = exc
        for r, answer in zip(asked, out):
            self._thinking.annotate(answer, self.render, r.messages)
        return out

    def close(self) -> None:
        """Free the model, context and projector."""
        finalizer = getattr(self, "_finalizer", None)
        if finalizer is not None:
            finalizer()
        self._kv = []

    # -- one request --------------------------------------------------------------------------

    def _evaluate_prompt(self, chunks: list[Chunk], mt_chunks: Any) -> int:
        """Bring the KV cache to the prompt; returns how many prompt tokens were reused.

        Whole leading chunks that match the cache are kept; in the first chunk that differs, a text
        chunk keeps the whole blocks of its longest common token prefix with the cached one. The
        last block of the prompt is always evaluated (its logits start the answer).
        """
        llama_cpp, m = self._llama_cpp, self._mtmd
        keep = 0
        while keep < len(chunks) - 1 and keep < len(self._kv) and self._kv[keep].key == chunks[keep].key:
            keep += 1
        reused = sum(c.n_pos for c in chunks[:keep])  # positions (= tokens but for M-RoPE images)
        offset = 0  # tokens of chunk `keep` that stay in the cache
        if keep < len(self._kv) and chunks[keep].key[0] == "text" and self._kv[keep].key[0] == "text":
            new, old = chunks[keep].key[1], self._kv[keep].key[1]
            limit = min(len(old), len(new) - 1 if keep == len(chunks) - 1 else len(new))
            common = next((j for j in range(limit) if new[j] != old[j]), limit)
            offset = common - common % self._block
        if not self._llm._ctx.kv_cache_seq_rm(0, reused + offset, -1):  # pragma: no cover - recurrent models
            self._llm._ctx.kv_cache_clear()
            keep, reused, offset = 0, 0, 0
        self._kv = list(chunks[:keep])
        reused_tokens = sum(c.n_tokens for c in chunks[:keep]) + offset
        n_past = reused + offset
        for i in range(keep, len(chunks)):
            last = i == len(chunks) - 1
            if chunks[i].key[0] == "text":
                tokens = chunks[i].key[1]
                start = offset if i == keep else 0
                self._decode_blocks(list(tokens[start:]), n_past, start)
            else:
                out = llama_cpp.llama_pos(n_past)
                rc = m.mtmd_helper_eval_chunk_single(
                    self._mtmd_ctx, self._ctx, m.mtmd_input_chunks_get(mt_chunks, i),
                    n_past, 0, self._llm.n_batch, last, ctypes.byref(out),
                )
                if rc != 0:
                    raise BackendError(f"llama.cpp failed to evaluate prompt chunk {i} (error {rc})")
            # Not the helper's new_n_past: for text chunks it counts from its initial value.
            n_past += chunks[i].n_pos - (offset if i == keep else 0)
            self._kv.append(chunks[i])
        return reused_tokens

    def _decode_blocks(self, tokens: list[int], n_past: int, start: int) -> None:
        """Evaluate text tokens ``start..`` of a chunk in the chunk's fixed blocks.

        Blocks start at multiples of ``self._block`` from the chunk's first token whatever is in
        the cache, so a prompt whose start was reused is evaluated in exactly the batches of a
        fresh one: llama.cpp's kernels may round differently for different batch sizes, and the
        answer must not depend on what ran before.
        """
        pos = 0
        while pos < len(tokens):
            end = pos + self._block - (start + pos) % self._block
            self._decode(tokens[pos:end], n_past + pos)
            pos = end

    def _decode(self, tokens: list[int], n_past: int) -> None:
        llm = self._llm
        for s in range(0, len(tokens), llm.n_batch):
            part = tokens[s : s + llm.n_batch]
            llm._batch.set_batch(batch=part, n_past=n_past + s, logits_all=False)
            rc = self._llama_cpp.llama_decode(self._ctx, llm._batch.batch)
            if rc != 0:
                raise BackendError(f"llama_decode returned {rc}")

    def _logits(self) -> np.ndarray:
        ptr = self._llama_cpp.llama_get_logits_ith(self._ctx, -1)
        return np.ctypeslib.as_array(ptr, shape=(self.n_vocab,)).astype(np.float64)

    def _run(self, request: Request) -> Completion:
        cfg = request.config
        if cfg.n != 1:
            raise BackendError("the llama.cpp backend draws one answer per request (n=1); use sample_index for repeats")
        chunks, mt_chunks, bitmaps = self._tokenize(request)
        try:
            n_prompt = sum(c.n_tokens for c in chunks)  # KV cells: what n_ctx limits
            if n_prompt >= self.n_ctx or n_prompt + cfg.max_new_tokens > self.n_ctx:  # before any decoding
                n_img = sum(c.n_tokens for c in chunks if c.key[0] == "media")
                budget = self._thinking.extra_tokens
                fix = "shorten the caption or lower max_new_tokens (--max-new-tokens)"
                if budget and n_prompt + cfg.max_new_tokens - budget <= self.n_ctx:  # the thinking budget is what does not fit
                    fix = f"lower the thinking budget of {budget} tokens (--thinking-budget N, at most {self.n_ctx - n_prompt - cfg.max_new_tokens + budget} here)"
                raise ContextLengthError(
                    f"prompt is {n_prompt} tokens ({n_img} of them image tokens) + max_new_tokens={cfg.max_new_tokens} "
                    f"= {n_prompt + cfg.max_new_tokens} tokens but the context holds n_ctx={self.n_ctx}: raise n_ctx "
                    f"(spec option ?n_ctx=), {fix}; the prompt is never cut to fit",
                    counts={"prompt_tokens": n_prompt, "image_tokens": n_img, "max_new_tokens": cfg.max_new_tokens, "limit": self.n_ctx, **({"thinking_budget": budget} if budget else {})},
                )
            try:
                reused = self._evaluate_prompt(chunks, mt_chunks)
            except BaseException:
                self._kv = []
                self._llm._ctx.kv_cache_clear()
                raise
        finally:
            self._free(mt_chunks, bitmaps)
        try:
            return self._generate_tokens(request, n_prompt, sum(c.n_pos for c in chunks), reused)
        except BaseException:
            self._kv = []
            self._llm._ctx.kv_cache_clear()
            raise

    def _generate_tokens(self, request: Request, n_prompt: int, n_pos: int, reused: int) -> Completion:
        """Decode the answer; the prompt fills ``n_prompt`` KV cells and ends at position ``n_pos``."""
        cfg = request.config
        k = max(0, min(int(cfg.top_logprobs), MAX_TOP_LOGPROBS))
        rng = None
        if not cfg.deterministic:
            seed = self.seed if cfg.seed is None else cfg.seed
            rng = np.random.default_rng([seed, request.sample_index or 0])
        tokens: list[int] = []
        steps: list[TokenStep] = []
        finish = "length"
        text = ""
        pos, cells = n_pos, n_prompt
        for _ in range(max(0, cfg.max_new_tokens)):
            logits = self._logits()
            lse = float(np.logaddexp.reduce(logits))
            logp = logits - lse
            tok = int(np.argmax(logits)) if rng is None else sample(logits, cfg.temperature, cfg.top_p, rng)
            if self._llama_cpp.llama_vocab_is_eog(self._vocab, tok):
                finish = "stop"
                break
            top: tuple[tuple[str, float], ...] = ()
            if k:
                idx = np.argpartition(-logp, k - 1)[:k] if k < self.n_vocab else np.arange(self.n_vocab)
                idx = idx[np.lexsort((idx, -logp[idx]))]  # by log-prob, ties by token id
                top = tuple((self._piece(int(j)), float(logp[j])) for j in idx)
            digits = tuple(float(logp[j]) for j in self._digit_ids) if self._digit_ids else None
            tokens.append(tok)
            steps.append(TokenStep(token=self._piece(tok), logprob=float(logp[tok]), top=top, digits=digits))
            text = self._detokenize(tokens)
            hit = first_stop(text, cfg.stop)
            if hit is not None:
                text = text[:hit]
                finish = "stop"
                break
            if cells >= self.n_ctx:
                break
            self._decode([tok], pos)
            pos += 1
            cells += 1
        return Completion(
            text=text.strip(),
            steps=steps,
            logprobs=True,
            model=self.model,
            usage=Usage(prompt_tokens=n_prompt, completion_tokens=len(tokens)),
            finish_reason=finish,
            meta={"reused_prompt_tokens": reused},
        )

    def _detokenize(self, tokens: list[int]) -> str:
        return self._llm.detokenize(tokens).decode("utf-8", errors="replace")


def from_spec(spec: Any, **options: Any) -> LlamaCppBackend:
    """Build the backend from a parsed ``llamacpp:<model.gguf>?mmproj=...`` spec.

    Options (spec query or keyword): ``mmproj``, ``n_ctx`` (default 2048), ``n_threads``,
    ``n_gpu_layers`` (default 0; -1 offloads all), ``n_batch`` (512), ``prompt_block`` (16: text is
    evaluated and reused in blocks of this many tokens; 0 evaluates whole batches, reusing only
    whole chunks), ``seed`` (0), ``prompt_format`` (``auto``: chosen from the GGUF headers;
    ``llava_v1``; ``chat_template``), ``chat_template`` (a Jinja file replacing the model's own
    template), ``verbose``.
    """
    o = check_options(spec, **options)
    return LlamaCppBackend(spec.target, o.pop("mmproj"), spec=getattr(spec, "raw", "") or "", **o)


def lazy_from_spec(spec: Any, **options: Any) -> Backend:
    """The backend of :func:`from_spec`, loaded only when a request misses the cache: the files are
    checked and the identity (cache keys) computed now, without loading the model."""
    from capjudge.backends.lazy import LazyBackend

    o = check_options(spec, **options)
    model_path = Path(spec.target).expanduser()
    mmproj = Path(str(o["mmproj"])).expanduser() if o["mmproj"] else None
    template = Path(str(o["chat_template"])).expanduser() if o["chat_template"] else None
    pair = check_files(model_path, mmproj, prompt_format=o["prompt_format"], chat_template=template)
    thinking = parse_thinking(o)
    fitted = gguf_plan(model_path, pair, thinking, o["n_ctx"])
    ident = model_identity(model_path, mmproj, block=_block_size(o["prompt_block"], o["n_batch"]), n_batch=o["n_batch"], n_gpu_layers=o["n_gpu_layers"], seed=o["seed"], pair=pair, thinking=thinking, fitted=fitted)
    raw = getattr(spec, "raw", "") or ""
    shown = raw or f"llamacpp:{model_path}" + (f"?mmproj={mmproj}" if mmproj else "")
    kwargs = {k: v for k, v in o.items() if k != "mmproj"}
    return LazyBackend(lambda: LlamaCppBackend(spec.target, o["mmproj"], spec=raw, **kwargs), kind=LlamaCppBackend.kind, spec=shown, model=model_path.stem, identity=ident)


_LEAST = {"n_ctx": (0, "0 or more tokens (0: the default)"), "n_threads": (1, "1 or more"), "n_batch": (0, "1 or more tokens (0: the default)"), "n_gpu_layers": (-1, "-1 (all) or more")}


def _check_counts(out: dict[str, Any]) -> None:
    """The numeric options of ``llamacpp:`` in range (an option error naming the option)."""
    for name, (least, what) in _LEAST.items():
        if out.get(name) is not None and out[name] < least:
            raise OptionError(f"llamacpp option {name}={out[name]!r}: {what}")


def check_options(spec: Any, **options: Any) -> dict[str, Any]:
    """The options of ``llamacpp:`` converted and checked without loading anything: names,
    numbers, yes/no values, and the model and projector files, which must exist. Returns the
    keyword arguments of :class:`LlamaCppBackend` (``mmproj`` included)."""
    check_known("llamacpp", options, ("mmproj", "n_ctx", "n_threads", "n_gpu_layers", "n_batch", "prompt_block", "seed", "prompt_format", "chat_template", "verbose", "clip_model_path", *THINKING_OPTIONS))
    mmproj = options.get("mmproj") or options.get("clip_model_path")
    block = as_int(options.get("prompt_block"), "prompt_block")
    out = {
        "mmproj": mmproj or None,
        "n_ctx": as_int(options.get("n_ctx"), "n_ctx") or DEFAULT_N_CTX,
        "n_threads": as_int(options.get("n_threads"), "n_threads"),
        "n_gpu_layers": as_int(options.get("n_gpu_layers"), "n_gpu_layers") or 0,
        "n_batch": as_int(options.get("n_batch"), "n_batch") or 512,
        "prompt_block": DEFAULT_PROMPT_BLOCK if block is None else block,
        "seed": as_int(options.get("seed"), "seed") or 0,
        "prompt_format": str(options.get("prompt_format") or "auto"),
        "chat_template": options.get("chat_template") or None,
        "verbose": as_bool(options.get("verbose", False), "verbose"),
    }
    thinking = parse_thinking(options)
    out.update(thinking=thinking.mode, thinking_budget=thinking.budget, reasoning_markers=thinking.markers)
    _check_counts(out)
    if out["chat_template"] is not None and not Path(str(out["chat_template"])).expanduser().is_file():
        raise FileNotFoundError(f"llamacpp option chat_template={str(out['chat_template'])!r}: no such file (a Jinja chat template file)")
    if out["prompt_format"] not in PROMPT_FORMATS:
        raise BackendError(f"llamacpp option prompt_format={out['prompt_format']!r}: use one of {', '.join(PROMPT_FORMATS)}")
    check_gguf(Path(spec.target).expanduser(), "model")
    if out["mmproj"] is not None:
        check_gguf(Path(str(out["mmproj"])).expanduser(), "mmproj (projector)")
    return out
