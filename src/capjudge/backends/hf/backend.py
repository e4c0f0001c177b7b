"""HF transformers backend: LLaVA-1.5 checkpoints (``llava-hf/llava-1.5-7b-hf``, ``-13b-hf`` or a
local folder) and the other verified image-text-to-text architectures (LLaVA-NeXT/OneVision,
Qwen2/2.5/3-VL, Gemma 3, Idefics3, InternVL, Mistral 3, PaliGemma; see docs/backends.md) with
greedy decoding, batched with left padding, and exact per-step probabilities of the digit tokens
for FLEUR smoothing.

How a model is prompted comes from its judge preset (:mod:`capjudge.backends.presets`), chosen from
the config's ``model_type`` before the processor is loaded (``preset=auto``) or named
(``preset=qwen2.5-vl``); options given explicitly win over it. LLaVA-1.5's prompt format
(``chat_format="llava"``) is its own::

    [SYSTEM ]USER: <image>\\n{prompt} ASSISTANT:[ {answer}</s>USER: {follow-up} ASSISTANT:]

With the ``llava_v1`` system sentence this is the prompt FLEUR's and VisCE2's code build; without a
system turn it is the llava-hf chat template. ``chat_format="template"`` uses the processor's own
chat template instead (other model families), ``chat_format="plain"`` the prompt text after the
image (PaliGemma). With ``pad_square`` (LLaVA-1.5) images are padded to a square with the image
processor's mean colour, as LLaVA-1.5 does (``--image-aspect-ratio pad``), before the processor's
resize and centre crop. ``system_policy="fold"`` puts a system text before the first user turn's
text, for models without a chat (PaliGemma); with ``keep``, a chat template that raises on a
system turn gets it folded the same way (logged once).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from capjudge.backends.base import (
    DIGITS,
    Backend,
    BackendError,
    Capabilities,
    Completion,
    GenerationConfig,
    Message,
    PromptTokens,
    Request,
    TokenStep,
    Usage,
)
from capjudge.backends.hf.context import context_error, context_limit
from capjudge.backends.hf.graphs import mode as graphs_mode
from capjudge.backends.hf.identity import model_identity
from capjudge.backends.hf.loading import (
    check_4bit_packages,
    llava_4bit_settings,
    load_failure,
    local_only,
    missing_package_message,
)
from capjudge.backends.hf.loading import torchvision_requirement as torchvision_requirement
from capjudge.backends.hf.prefix import PrefixReuser
from capjudge.backends.hf.prompt_text import defuse, fold_system, render_plain
from capjudge.backends.hf.refill import Refiller
from capjudge.backends.hf.settings import resolve_settings, usable_device
from capjudge.backends.hf.specials import GuardedTokenizer, SpecialText, guarded_processor
from capjudge.backends.hf.stops import without_stop_rule
from capjudge.backends.hf.thinking import hf_plan, loaded_template, template_text
from capjudge.backends.llava_prompt import render_llava_v1
from capjudge.backends.options import as_bool
from capjudge.backends.thinking import parse as parse_thinking
from capjudge.core.redact import get_logger
from capjudge.data.images import pad_to_square
from capjudge.parsing.stopping import stop_index

log = get_logger(__name__)

class HFBackend(Backend):
    """A LLaVA-style model run with HF transformers.

    Parameters
    ----------
    model:
        A hub id (``llava-hf/llava-1.5-13b-hf``; must already be in the local HF cache when offline)
        or a local folder with the model and its processor.
    device:
        ``"auto"`` (CUDA when available, else CPU), ``"cpu"``, ``"cuda"``, ``"cuda:1"``...
    dtype:
        ``"auto"`` (on CUDA the preset's dtype: float16 for the LLaVA family, bfloat16 for Qwen,
        Gemma, ...; float32 on CPU), ``"float16"``, ``"bfloat16"``, ``"float32"``.
    batch_size:
        Requests decoded together (left-padded).
    preset:
        ``"auto"`` (from the config's ``model_type``) or a judge preset name
        (:func:`capjudge.backends.presets.list_presets`); it sets the defaults of the next three.
    pad_square:
        Pad images to a square before preprocessing (LLaVA-1.5's behaviour); ``None``: the preset's.
    chat_format:
        ``"llava"`` (LLaVA-1.5 conversation, see module doc), ``"template"`` (processor's chat
        template) or ``"plain"`` (prompt text after the image); ``None``: the preset's.
    system_policy:
        ``"keep"`` (a system turn is sent as such) or ``"fold"`` (put before the first user text);
        ``None``: the preset's.
    prefix_reuse:
        Score the captions of one image from one shared prefix computation (default on; see
        :mod:`capjudge.backends.hf.prefix`); results equal independent decoding.
    refill:
        Decode long greedy answers (``max_new_tokens`` of at least 128: reasoning, descriptions)
        in ``batch_size`` slots, each refilled from the queue as soon as its answer ends (default
        on; see :mod:`capjudge.backends.hf.refill`); results equal independent decoding.
    decode_graphs:
        Decoding steps of slot refill at fixed shapes, captured once as CUDA graphs and replayed
        (:mod:`capjudge.backends.hf.graphs`): ``"auto"`` (default: on CUDA), ``"on"`` (on a CPU the
        same fixed-shape steps without a graph), ``"off"``. Each captured step is checked against
        the eager step before it is used.
    thinking, thinking_budget, reasoning_markers:
        Thinking models (:mod:`capjudge.backends.thinking`): ``"on"``/``"off"`` render the chat
        template with ``enable_thinking`` (a usage error on a template without it), ``"auto"`` its
        default; the budget is added to ``max_new_tokens`` when the model thinks.
    load_4bit:
        Load the weights in 4 bits with bitsandbytes, with the settings of LLaVA's own loader
        (NF4, double quantisation, float16 compute), as the VisCE2 code's released runs did. Needs
        ``bitsandbytes`` and ``accelerate`` (and, for most bitsandbytes builds, a CUDA GPU).
    """

    kind = "hf"

    def __init__(
        self,
        model: str,
        *,
        device: str = "auto",
        dtype: str = "auto",
        batch_size: int = 8,
        preset: str = "auto",
        pad_square: bool | None = None,
        chat_format: str | None = None,
        system_policy: str | None = None,
        prefix_reuse: bool = True,
        refill: bool = True,
        decode_graphs: str = "auto",
        local_files_only: bool | None = None,
        attn_implementation: str | None = None,
        trust_remote_code: bool = False,
        load_4bit: bool = False,
        thinking: str = "auto",
        thinking_budget: int | None = None,
        reasoning_markers: str | None = None,
    ) -> None:
        try:
            import torch
            import transformers
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise BackendError("the hf backend needs torch and transformers: pip install 'capjudge[hf]'") from exc
        self.load_4bit = as_bool(load_4bit, "load_4bit")
        if self.load_4bit:
            check_4bit_packages()  # before anything is read from disk
        self._torch = torch
        self.model = model
        self.spec = f"hf:{model}"
        local_files_only = local_only(model, local_files_only)
        # The preset is chosen from the config before the processor is built.
        self.settings = resolve_settings(model, local_files_only, preset, chat_format, system_policy, pad_square)
        self.preset = self.settings.preset
        self.device, self.dtype_name = usable_device(torch, device, dtype, self.settings.dtype)
        self.batch_size = max(1, int(batch_size))
        self.pad_square = self.settings.pad_square
        self.chat_format = self.settings.chat_format
        self.system_policy = self.settings.system_policy
        self._warned_fold = False
        self.prefix_reuse = as_bool(prefix_reuse, "prefix_reuse")
        self.refill = as_bool(refill, "refill")
        self.decode_graphs = graphs_mode(decode_graphs)
        self.thinking = parse_thinking({"thinking": thinking, "thinking_budget": thinking_budget, "reasoning_markers": reasoning_markers})
        if not self.thinking.default:  # a model without the switch fails before it loads
            hf_plan(model, self.thinking, template_text(model, local_files_only), self.chat_format, self.preset)
        kwargs: dict[str, Any] = {"local_files_only": local_files_only, "trust_remote_code": trust_remote_code}
        if not Path(model).is_dir() and local_files_only and Path(model).suffix:
            raise BackendError(f"model folder {model!r} not found")
        try:
            self.processor = transformers.AutoProcessor.from_pretrained(model, **kwargs)
            model_kwargs: dict[str, Any] = {"dtype": getattr(torch, self.dtype_name), **kwargs}
            if attn_implementation:
                model_kwargs["attn_implementation"] = attn_implementation
            if self.load_4bit:
                model_kwargs["quantization_config"] = transformers.BitsAndBytesConfig(**llava_4bit_settings(torch))
                model_kwargs["device_map"] = {"": str(self.device)}
            self._attn_implementation = attn_implementation
            try:
                net: Any = transformers.AutoModelForImageTextToText.from_pretrained(model, **model_kwargs)
            except ValueError:
                net = transformers.LlavaForConditionalGeneration.from_pretrained(model, **model_kwargs)
        except OSError as exc:
            raise load_failure(model, exc) from exc
        except ImportError as exc:
            raise BackendError(missing_package_message(model, exc)) from exc
        # A quantised model is placed by its device_map and cannot be moved.
        self.net = (net if self.load_4bit else net.to(self.device)).eval()
        self.tokenizer = self.processor.tokenizer
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        # Message texts (captions, references, context) never become special tokens: they are
        # rendered with their special strings hidden and tokenized as text (.specials).
        self._specials = SpecialText(self.tokenizer)
        self.prompt_tokenizer = GuardedTokenizer(self._specials)
        self._encode_processor = guarded_processor(self.processor, self.prompt_tokenizer)  # one guard for both paths
        self.max_context, self.context_source = context_limit(self.net.config)  # the default thinking budget fits it
        self._thinking = hf_plan(model, self.thinking, loaded_template(self.processor), self.chat_format, self.preset, (self.max_context, self.context_source))
        self.eos_ids = self._eos_ids()
        self.digit_ids = self._digit_token_ids()
        # Captions of one image from one prefix pass; the reuser reaches this backend only through
        # the PrefixHost interface it declares (capjudge.backends.hf.prefix).
        self._prefix: PrefixReuser | None = PrefixReuser(self, decode_graphs=self.decode_graphs) if self.prefix_reuse else None
        # Long answers: slots refilled from the queue (capjudge.backends.hf.refill).
        self._refill: Refiller | None = Refiller(self, self.batch_size, self.decode_graphs) if self.refill else None
        self.capabilities = Capabilities(
            logprobs=True,
            max_top_logprobs=50,
            exact_digit_probs=self.digit_ids is not None,
            images=True,
            max_images=1,
            batching=True,
            prefix_reuse=self._prefix is not None and self._prefix.unsupported is None,
            system_prompt=True,
        )
        self._identity = self._make_identity()

    @property
    def prefix_stats(self) -> Any:
        """Counters of the prefix-reuse path (:class:`capjudge.backends.hf.prefix.PrefixStats`)."""
        return self._prefix.stats if self._prefix is not None else None

    # ---------------------------------------------------------------- setup helpers
    def _eos_ids(self) -> set[int]:
        ids: set[int] = set()
        gc = getattr(self.net, "generation_config", None)
        eos = getattr(gc, "eos_token_id", None)
        if isinstance(eos, int):
            ids.add(eos)
        elif isinstance(eos, (list, tuple)):
            ids.update(int(e) for e in eos)
        if self.tokenizer.eos_token_id is not None:
            ids.add(int(self.tokenizer.eos_token_id))
        return ids

    def _digit_token_ids(self) -> list[int] | None:
        """Token ids of "0".."9" (FLEUR: the last id of ``encode(str(d))``), checked to decode to the digit."""
        ids = []
        for d in DIGITS:
            enc = self.tokenizer.encode(d, add_special_tokens=False)
            if not enc:
                return None
            tid = int(enc[-1])
            if self.tokenizer.decode([tid]).strip() != d:
                log.warning("tokenizer of %s has no single token for digit %s: FLEUR smoothing unavailable", self.model, d)
                return None
            ids.append(tid)
        return ids

    def _make_identity(self) -> dict[str, Any]:
        revision = lambda: getattr(self.net.config, "_commit_hash", None)  # noqa: E731 - hub ids only
        return model_identity(self.model, self.dtype_name, self.pad_square, self.chat_format, self._attn_implementation, revision, load_4bit=self.load_4bit, settings=self.settings, thinking=self.thinking)

    def identity(self) -> dict[str, Any]:
        """Kind, model, dtype and preprocessing settings (local folders: a hash of their files)."""
        return dict(self._identity)

    # ---------------------------------------------------------------- prompt building
    def format_prompt(self, messages: Sequence[Message]) -> str:
        """The prompt text for a conversation (images become the processor's image tokens), as
        :attr:`prompt_tokenizer` and :meth:`encode` read it: a special-token string inside a
        message's text is held as a private-use character there, so that it is tokenized as text
        (:mod:`capjudge.backends.hf.specials`); a prompt without one is the plain text."""
        messages = [Message(m.role, self._specials.hide(m.content), images=m.images) for m in messages]
        if self.system_policy == "fold":
            messages = fold_system(messages)
        if self.chat_format == "plain":
            return render_plain(messages, getattr(self.processor, "image_token", None) or "<image>")
        if self.chat_format == "template":
            try:
                return self._apply_template(messages)
            except Exception as exc:
                if not any(m.role == "system" for m in messages):
                    raise
                # A template without a system role (it raises on one): the text goes before the
                # first user turn's, as a "fold" policy puts it; said once per backend.
                if not self._warned_fold:
                    self._warned_fold = True
                    log.warning("%s: the chat template rejects a system turn (%s); its text goes before the first user turn", self.model, exc)
                return self._apply_template(fold_system(messages))
        return render_llava_v1(messages, "<image>", self.tokenizer.eos_token or "</s>")

    def _apply_template(self, messages: Sequence[Message]) -> str:
        marker = getattr(self.processor, "image_token", None)
        conv = []
        for m in messages:
            content: list[dict[str, Any]] = [{"type": "image"} for _ in m.images]
            content.append({"type": "text", "text": defuse(m.content, marker)})
            conv.append({"role": m.role, "content": content})
        extra = self._thinking.template_kwargs  # enable_thinking, only when asked for
        return str(self.processor.apply_chat_template(conv, add_generation_prompt=True, tokenize=False, **extra))

    def prepare_image(self, request_image: Any) -> Any:
        """The PIL image the processor receives (padded to a square with the mean colour)."""
        img = request_image.pil()
        if self.pad_square:
            mean = getattr(self.processor.image_processor, "image_mean", None) or (0.5, 0.5, 0.5)
            img = pad_to_square(img, tuple(int(x * 255) for x in mean))
        return img

    def encode(self, requests: Sequence[Request]) -> dict[str, Any]:
        """Tokenize a batch (left-padded) with its pixel values, on the model's device.

        Images go to the processor as one list per sample: a flat list is read by some processors
        (Gemma 3) as several images of one prompt; every processor of the verified architectures
        takes the nested form, LLaVA's giving the same tensors as with a flat list."""
        texts = [self.format_prompt(r.messages) for r in requests]
        images = [[self.prepare_image(i) for i in r.images] for r in requests]
        kwargs: dict[str, Any] = {"text": texts, "return_tensors": "pt", "padding": True}
        if any(images):
            kwargs["images"] = images
        inputs = self._encode_processor(**kwargs)
        out = {}
        for k, v in inputs.items():
            if hasattr(v, "to"):
                v = v.to(self.device)
                if k == "pixel_values":
                    v = v.to(getattr(self._torch, self.dtype_name))
            out[k] = v
        return out

    def prompt_tokens(self, request: Request) -> PromptTokens:
        """The input ids the model reads for ``request`` (image placeholders expanded by the
        processor), with their token strings."""
        ids = [int(i) for i in self.encode([request])["input_ids"][0].tolist()]
        image_id = getattr(self.net.config, "image_token_id", None) or getattr(self.net.config, "image_token_index", None)
        return PromptTokens(ids=tuple(ids), tokens=tuple(self.tokenizer.convert_ids_to_tokens(ids)), source="hf processor", image_token_id=image_id)

    # ---------------------------------------------------------------- generation
    def generate(self, requests: Sequence[Request]) -> list[Completion | BaseException]:
        """Answer the requests in batches of ``batch_size`` (same image count and settings per
        batch); a batch that fails is retried one request at a time, so that only the bad one fails.
        A thinking model's budget is added to ``max_new_tokens`` and its answers say whether the
        prompt opened the reasoning (:mod:`capjudge.backends.thinking`)."""
        asked = requests
        requests = [without_stop_rule(r) for r in self._thinking.budgeted(requests)] if self._thinking.extra_tokens else list(requests)
        results: list[Completion | BaseException | None] = [None] * len(requests)
        notes: dict[int, str] = {}
        refill_notes: dict[int, str] = {}
        if self._refill is not None:
            # Long answers first: slots refilled as answers end (capjudge.backends.hf.refill).
            long = self._refill.run(requests)
            refill_notes = long.notes
            for i, out in long.answers.items():
                results[i] = out
        if self.prefix_reuse and self._prefix is not None:
            # Captions of one image: one prefix pass per image (see capjudge.backends.hf.prefix).
            todo = [i for i in range(len(requests)) if results[i] is None]
            outcome = self._prefix.run([requests[i] for i in todo])
            notes = {todo[j]: note for j, note in outcome.notes.items()}
            for j, out in outcome.answers.items():
                results[todo[j]] = out
        order: dict[tuple[Any, ...], list[int]] = {}
        for i, r in enumerate(requests):
            if results[i] is None:
                key = (len(r.images), r.config)
                order.setdefault(key, []).append(i)
        for idx in order.values():
            for start in range(0, len(idx), self.batch_size):
                chunk = idx[start : start + self.batch_size]
                for i, out in zip(chunk, self._generate_safely([requests[i] for i in chunk])):
                    if isinstance(out, Completion) and i in notes:
                        out.meta["prefix_reuse"] = notes[i]  # why this answer was decoded on its own
                    results[i] = out
        for i, (r, answer) in enumerate(zip(asked, results)):
            self._thinking.annotate(answer, self.format_prompt, r.messages)
            if isinstance(answer, Completion) and i in refill_notes:
                answer.meta["refill"] = refill_notes[i]  # why a long answer was decoded otherwise
        return [r if r is not None else BackendError("not answered") for r in results]

    def _generate_safely(self, reqs: Sequence[Request]) -> list[Completion | BaseException]:
        try:
            return list(self._generate_batch(reqs))
        except Exception as exc:  # noqa: BLE001 - isolate the failing request
            if len(reqs) == 1:
                return [exc if isinstance(exc, BackendError) else BackendError(f"{type(exc).__name__}: {exc}")]
            log.info("batch of %d failed (%s); retrying one by one", len(reqs), exc)
            out: list[Completion | BaseException] = []
            for r in reqs:
                out.extend(self._generate_safely([r]))
            return out

    def check_length(self, n_prompt: int, cfg: GenerationConfig, image_tokens: int | None = None) -> None:
        """Raise :class:`ContextLengthError` (with the counts) when the prompt plus ``max_new_tokens``
        exceeds the model's context (:mod:`.context`)."""
        exc = context_error(n_prompt, image_tokens, cfg.max_new_tokens, self.max_context, self.context_source, thinking_budget=self._thinking.extra_tokens)
        if exc is not None:
            raise exc

    def _generate_batch(self, reqs: Sequence[Request]) -> list[Completion]:
        torch = self._torch
        cfg = reqs[0].config
        inputs = self.encode(reqs)
        ids = inputs["input_ids"]
        attn = inputs["attention_mask"]
        # Left padding: the longest row is as long as the batch; a batch that does not fit is
        # asked again one request at a time (_generate_safely), so only the long one fails.
        longest = int(attn.sum(dim=1).argmax())
        image_id = getattr(self.net.config, "image_token_id", None) or getattr(self.net.config, "image_token_index", None)
        n_img = int((ids[longest][attn[longest].bool()] == image_id).sum()) if isinstance(image_id, int) else None
        self.check_length(int(attn[longest].sum()), cfg, n_img)
        gen_kwargs: dict[str, Any] = {
            "max_new_tokens": cfg.max_new_tokens,
            "return_dict_in_generate": True,
            "output_logits": cfg.top_logprobs > 0,
            "pad_token_id": self.tokenizer.pad_token_id,
            "eos_token_id": sorted(self.eos_ids) or None,
        }
        if cfg.deterministic:
            gen_kwargs.update(do_sample=False, num_beams=1, temperature=None, top_p=None, top_k=None)
        else:
            gen_kwargs.update(do_sample=True, temperature=cfg.temperature, top_p=cfg.top_p, top_k=None)
            if cfg.seed is not None:
                torch.manual_seed(cfg.seed)
        with torch.inference_mode():
            out = self.net.generate(**inputs, **gen_kwargs)
        seqs = out.sequences[:, ids.shape[1] :]
        logits = _at_least_float32(torch, torch.stack(out.logits, dim=1)) if cfg.top_logprobs > 0 else None  # (B, T, V)
        results = []
        for b, req in enumerate(reqs):
            n_prompt = int(attn[b].sum())
            results.append(self.completion_from_ids(seqs[b].tolist(), logits[b] if logits is not None else None, req.config, n_prompt))
        return results

    def completion_from_ids(self, gen_ids: list[int], logits: Any, cfg: GenerationConfig, n_prompt: int) -> Completion:
        """Build a :class:`Completion` from generated ids (cut at the first end-of-sequence) and,
        optionally, the raw logits of each step ``(T, V)``."""
        torch = self._torch
        n = len(gen_ids)
        finish = "length"
        for t, tid in enumerate(gen_ids):
            if tid in self.eos_ids:
                n, finish = t, "stop"
                break
        cut = stop_index(cfg.stop_rule, gen_ids[:n], lambda ids: str(self.tokenizer.decode(list(ids), skip_special_tokens=True)))
        if cut is not None:
            n, finish = cut + 1, "stop"
        kept = gen_ids[:n]
        text = self.tokenizer.decode(kept, skip_special_tokens=True).strip()
        steps: list[TokenStep] = []
        if logits is not None and n:
            logp = torch.log_softmax(_at_least_float32(torch, logits[:n]), dim=-1)
            k = max(1, min(cfg.top_logprobs, logp.shape[-1]))
            top_lp, top_id = logp.topk(k, dim=-1)
            chosen = logp.gather(1, torch.tensor(kept, device=logp.device).unsqueeze(1)).squeeze(1)
            digits = logp[:, self.digit_ids].tolist() if self.digit_ids is not None else None
            pieces = self.tokenizer.convert_ids_to_tokens(kept)
            # Whole tensors to Python at once (a long answer has thousands of steps).
            top_pieces = self.tokenizer.convert_ids_to_tokens(top_id.flatten().tolist())
            chosen_lp, top_lps = chosen.tolist(), top_lp.tolist()
            for t in range(n):
                steps.append(
                    TokenStep(
                        token=pieces[t],
                        logprob=chosen_lp[t],
                        top=tuple(zip(top_pieces[t * k : (t + 1) * k], top_lps[t])),
                        digits=tuple(digits[t]) if digits is not None else None,
                    )
                )
        return Completion(
            text=text,
            steps=steps,
            logprobs=bool(steps),
            model=self.model,
            usage=Usage(prompt_tokens=n_prompt, completion_tokens=n),
            finish_reason=finish,
        )

    def close(self) -> None:
        """Free the model (and GPU memory)."""
        if self._prefix is not None:
            self._prefix.release()
        self.net = None  # type: ignore[assignment]
        if self.device.type == "cuda":
            self._torch.cuda.empty_cache()


def _at_least_float32(torch: Any, x: Any) -> Any:
    """Half-precision logits in float32 for the log-softmax; float64 ones stay float64."""
    return x.to(torch.promote_types(x.dtype, torch.float32))
