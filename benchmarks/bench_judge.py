"""Seconds per caption for FLEUR judging: reference style vs capjudge vs the prefix floor.

For K captions of one image this prints, per caption:

(a) reference: one ``model.generate(output_scores=True, return_dict_in_generate=True)`` per caption,
    as FLEUR's code does (processor call included);
(b) capjudge:  ``Judge("fleur", HFBackend(..., prefix_reuse=True)).score_many`` on the K samples;
(c) floor:     one prefix forward (system text, image, instructions up to the caption) plus the K
    suffix forwards, measured directly on the model (the fastest of: the suffixes as a padded
    batch over copies of the prefix cache, one by one, or packed into one masked sequence);
(d) bandwidth floor: (c) plus the decoding steps of the answers (those of (a): one token per
    unfinished caption per step, the first from the suffix forward; no more than capjudge took,
    whose accepted answer draft yields tokens from the suffix forward), each reading the language
    model's weights once and the keys and values of the prefix and the unfinished rows, at the
    memory bandwidth measured with a device-to-device copy (``--bandwidth-gbs`` overrides;
    ``benchmarks/_gpu.py``);

with the ratios a/b, b/c and b/d and the peak memory of (a) and (b). Medians over ``--reps``
rounds, each round timing every variant once in turn (so that a noisy stretch slows all of them
alike).

CPU (default): a tiny random LLaVA-1.5 at a size where compute dominates (hidden 512, 8 layers,
576 image tokens), built into a temporary folder. ``--device cuda``: LLaVA-1.5-7B shapes (Llama
hidden 4096, 32 layers, 32 heads, MLP 11008, vocab 32000; CLIP ViT-L/14-336: 1024 wide, 24 layers)
with random weights in float16, initialised on the GPU (``benchmarks/_llava7b.py``). When
llama-cpp-python is importable it also measures the llama.cpp backend's prefix reuse on the tiny
GGUF model.

    python benchmarks/bench_judge.py                  # K = 1, 3, 5, 10, table
    python benchmarks/bench_judge.py --k 5 --json     # last line: one JSON object
    python benchmarks/bench_judge.py --device cuda    # 7B shapes on a GPU
    python benchmarks/bench_judge.py --arch qwen2_5_vl --k 5 --reps 3   # Qwen2.5-VL-7B image shapes

``--arch qwen2_5_vl`` / ``llava_onevision``: the judge-like random model of
``capjudge.testing.tiny_vlm`` with the real 7B checkpoint's processor, vision grid and image-token
count and scaled-down layers (``benchmarks/_arch_shapes.py`` says exactly which shapes); the Qwen
and OneVision processors need torchvision.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from _arch_shapes import SHAPES  # benchmarks/ is on sys.path when a script runs
from _gpu import bandwidth, decode_weight_bytes, kv_bytes_per_token
from _llava7b import build_7b_shapes, hf_backend_on, tokenizer_folder
from _machine import add_reps_and_device, cpu_name

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

ARCH_CHOICES = list(SHAPES)
IMAGES = [ROOT / "examples" / "images" / "cats.jpg", ROOT / "examples" / "images" / "dog.jpg"]

CAPTIONS = [
    "an orange cat and a grey cat are lying together on a white bed.",
    "two cats sleeping next to each other on a soft blanket in the room.",
    "a brown dog is running on the green grass in the park.",
    "a small black dog with a red ball is standing near a tree.",
    "three children are playing with a frisbee on the beach.",
    "a man wearing a blue jacket is riding a bike on the street.",
    "a woman is sitting on a sofa and looking at a picture.",
    "a large white bird is standing in the water near the field.",
    "a young boy is holding a plate of food in the kitchen.",
    "several people are walking behind a yellow bus on the road.",
    "a girl in a pink shirt is jumping over a small log.",
    "two horses are eating grass in a large green field.",
]


# ----------------------------------------------------------------------------- memory
def _status_kb(field: str) -> int | None:
    try:
        m = re.search(rf"{field}:\s+(\d+)\s+kB", Path("/proc/self/status").read_text())
    except OSError:
        return None
    return int(m.group(1)) if m else None


class PeakMemory:
    """Peak memory above the level at the start of a block, in MiB.

    CUDA: ``torch.cuda.max_memory_allocated``. CPU: the process's peak resident set (VmHWM), reset
    at the start of the block through ``/proc/self/clear_refs`` (Linux); ``None`` where that is
    not possible.
    """

    def __init__(self, torch: Any, device: str) -> None:
        self.torch = torch
        self.cuda = device.startswith("cuda")
        self.mib: float | None = None

    def __enter__(self) -> PeakMemory:
        if self.cuda:
            self.torch.cuda.synchronize()
            self.torch.cuda.reset_peak_memory_stats()
            self.base = self.torch.cuda.memory_allocated()
        else:
            # Hand freed heap back to the system first, so that the block's allocations show in
            # the resident set instead of reusing pages already resident.
            with contextlib.suppress(OSError, AttributeError):
                ctypes.CDLL("libc.so.6").malloc_trim(0)
            try:
                Path("/proc/self/clear_refs").write_text("5")
                self.base = _status_kb("VmRSS")
            except OSError:
                self.base = None
        return self

    def __exit__(self, *exc: object) -> None:
        if self.cuda:
            self.torch.cuda.synchronize()
            self.mib = (self.torch.cuda.max_memory_allocated() - self.base) / 2**20
        elif self.base is not None:
            peak = _status_kb("VmHWM")
            self.mib = max(0.0, (peak - self.base) / 1024) if peak is not None else None


# ----------------------------------------------------------------------------- models
def build_cpu_model(directory: Path, hidden: int, layers: int, heads: int, vocab: int) -> Path:
    """The tiny judge-like LLaVA (576 image tokens) at the given text-model size; a vocabulary of
    ~2000 gives prompt lengths close to LLaVA's own tokenizer (~140 text tokens, ~34 per caption)."""
    from capjudge.testing.tiny_llava import build_tiny_llava

    return build_tiny_llava(
        directory, hidden_size=hidden, num_layers=layers, num_heads=heads, vocab_size=vocab
    )


# ----------------------------------------------------------------------------- timing
def timed(fn: Callable[[], Any], torch: Any, cuda: bool) -> float:
    """Wall seconds of one call (CUDA synchronised)."""
    if cuda:
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    if cuda:
        torch.cuda.synchronize()
    return time.perf_counter() - t0


def _greedy_new_ids(
    net: Any, inputs: Any, max_new_tokens: int, pad_token_id: int | None
) -> list[int]:
    """One full greedy ``generate`` with scores (as FLEUR's code calls it); the new token ids."""
    import torch

    with torch.inference_mode():
        out = net.generate(
            **inputs,
            max_new_tokens=max_new_tokens,
            do_sample=False,
            num_beams=1,
            output_scores=True,
            return_dict_in_generate=True,
            pad_token_id=pad_token_id,
        )
    return out.sequences[0, inputs["input_ids"].shape[1] :].tolist()


def reference_style(
    backend: Any, image: Path, captions: Sequence[str], max_new_tokens: int
) -> list[Any]:
    """FLEUR's code path: for each caption, preprocess and run one full ``generate`` with scores."""
    from PIL import Image

    from capjudge.data.images import pad_to_square
    from capjudge.prompts import LLAVA_V1_SYSTEM, get_template

    proc, net = backend.processor, backend.net
    tpl = get_template("fleur")
    mean = tuple(int(x * 255) for x in proc.image_processor.image_mean)
    outs = []
    for caption in captions:
        img = pad_to_square(Image.open(image).convert("RGB"), mean)
        prompt = f"{LLAVA_V1_SYSTEM} USER: <image>\n{tpl.render(caption=caption)} ASSISTANT:"
        inputs = proc(images=img, text=prompt, return_tensors="pt").to(backend.device)
        inputs["pixel_values"] = inputs["pixel_values"].to(net.dtype)
        outs.append(_greedy_new_ids(net, inputs, max_new_tokens, proc.tokenizer.pad_token_id))
    return outs


def reference_generic(
    backend: Any, judge: Any, image: Path, captions: Sequence[str], max_new_tokens: int
) -> list[Any]:
    """FLEUR's code path on any architecture: for each caption, load the image, run the processor
    on the judge's prompt and one full ``generate`` with scores."""

    from capjudge import Sample

    net = backend.net
    outs = []
    for i, caption in enumerate(captions):
        inputs = backend.encode(
            [judge.requests.score_request(judge.prepare_sample(i, Sample(image, caption)))]
        )
        outs.append(_greedy_new_ids(net, inputs, max_new_tokens, backend.tokenizer.pad_token_id))
    return outs


class Floor:
    """One prefix forward plus K suffix forwards, on tensors prepared in advance (any architecture
    the prefix path has an adapter for: its image inputs and RoPE positions)."""

    def __init__(self, backend: Any, judge: Any, image: Path, captions: Sequence[str]) -> None:
        from capjudge import Sample

        self.backend = backend
        self.adapter = backend._prefix.adapter
        preps = [judge.prepare_sample(i, Sample(image, c)) for i, c in enumerate(captions)]
        reqs = [judge.requests.score_request(p) for p in preps]
        seqs, self.encoding = backend._prefix._tokenize_group(reqs)
        n = min(len(s) for s in seqs)
        p = 0
        while p < n - 1 and all(s[p] == seqs[0][p] for s in seqs):
            p += 1
        self.p = p
        self.image_tokens = seqs[0].count(self.adapter.image_token_id(backend.net.config))
        self.prefix = seqs[0][:p]
        self.suffixes = [s[p:] for s in seqs]
        self._arena: Any = None

    def _prefix_forward(self, cache: Any = None) -> tuple[Any, int]:
        torch = self.backend._torch
        ids = torch.tensor([self.prefix], device=self.backend.device)
        positions, offset = self.adapter.prefix_positions(self.backend.net, self.encoding, self.p)
        out = self.backend.net(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            position_ids=positions,
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=1,
            **self.adapter.prefix_inputs(self.encoding, self.p),
        )
        return out.past_key_values, offset

    def _prefix_cache(self) -> tuple[list[tuple[Any, Any]], int]:
        cache, offset = self._prefix_forward()
        return [(layer.keys, layer.values) for layer in cache.layers], offset

    def _suffix(
        self, layers: list[tuple[Any, Any]], offset: int, rows: Sequence[list[int]]
    ) -> None:
        from transformers import DynamicCache

        torch = self.backend._torch
        dev = self.backend.device
        b, width = len(rows), max(len(r) for r in rows)
        ids = torch.full((b, width), int(self.backend.tokenizer.pad_token_id), dtype=torch.long)
        seg = torch.zeros((b, width), dtype=torch.long)
        pos = torch.full((b, width), self.p, dtype=torch.long)
        for k, r in enumerate(rows):
            ids[k, width - len(r) :] = torch.tensor(r)
            seg[k, width - len(r) :] = 1
            pos[k, width - len(r) :] = torch.arange(self.p, self.p + len(r))
        mask = torch.cat([torch.ones((b, self.p), dtype=torch.long), seg], dim=1)
        cache = DynamicCache(
            ddp_cache_data=[(k.expand(b, -1, -1, -1), v.expand(b, -1, -1, -1)) for k, v in layers],
            config=self.backend.net.config,
        )
        self.backend.net(
            input_ids=ids.to(dev),
            attention_mask=mask.to(dev),
            position_ids=self.adapter.positions((pos + offset).to(dev)),
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=1,
        )

    def batched(self) -> None:
        """Prefix, then the K suffixes in one batched forward."""
        with self.backend._torch.inference_mode():
            self._suffix(*self._prefix_cache(), self.suffixes)

    def one_by_one(self) -> None:
        """Prefix, then K separate suffix forwards."""
        with self.backend._torch.inference_mode():
            layers, offset = self._prefix_cache()
            for s in self.suffixes:
                self._suffix(layers, offset, [s])

    def packed(self) -> None:
        """Prefix, then the K suffixes as one sequence (batch 1) whose 4D mask lets each suffix see
        the prefix and itself only: no padding, no copies of the prefix cache, keys and values
        written in place (``capjudge.backends.hf.kv.KVArena``)."""
        from capjudge.backends.hf.kv import KVArena

        torch = self.backend._torch
        dev = self.backend.device
        net = self.backend.net
        dtype = net.get_input_embeddings().weight.dtype
        if any(w is not None for w in self.backend._prefix.layout.windows.values()):
            raise NotImplementedError("the packed floor builds no sliding-window masks")
        if self._arena is None:
            self._arena = KVArena(net.config.get_text_config().num_hidden_layers)
        with torch.inference_mode():
            _, offset = self._prefix_forward(self._arena.cache(0))
            ids = torch.tensor([[t for s in self.suffixes for t in s]], device=dev)
            pos = torch.tensor(
                [[self.p + j for s in self.suffixes for j in range(len(s))]], device=dev
            )
            own = torch.tensor([k for k, s in enumerate(self.suffixes) for _ in s], device=dev)
            slot = torch.arange(len(own), device=dev)
            allowed = (own[:, None] == own[None, :]) & (slot[:, None] >= slot[None, :])
            mask = torch.zeros((1, 1, len(own), self.p + len(own)), dtype=dtype, device=dev)
            mask[0, 0, :, self.p :].masked_fill_(~allowed, torch.finfo(dtype).min)
            net(
                input_ids=ids,
                attention_mask=mask,
                position_ids=self.adapter.positions(pos + offset),
                past_key_values=self._arena.cache(self.p),
                use_cache=True,
                logits_to_keep=1,
            )


def interleaved_medians(
    fns: dict[str, Callable[[], Any]], reps: int, torch: Any, cuda: bool
) -> dict[str, float]:
    """Median wall seconds of each function over ``reps`` rounds; every round calls each function
    once, in turn, so that a noisy stretch of a shared machine slows all of them alike."""
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(reps):
        for name, fn in fns.items():
            times[name].append(timed(fn, torch, cuda))
    return {name: statistics.median(ts) for name, ts in times.items()}


def decode_floor_bytes(
    prefix: int,
    suffixes: Sequence[int],
    answers: Sequence[int],
    weight_bytes: int,
    kv_bytes: int,
    most: int | None = None,
) -> tuple[int, int]:
    """Decoding steps and the bytes they read, after the prefix and suffix forwards: K answers of
    ``answers`` tokens decoded together, one token per unfinished answer per step (the first token
    of each comes from its suffix forward), at most ``most`` steps (the steps capjudge took: its
    answer draft, accepted, yields tokens from the suffix forward); step t reads the weights once,
    the shared prefix's keys and values once, and each unfinished row's suffix and t answer tokens."""
    steps = max(answers, default=1) - 1
    if most is not None:
        steps = min(steps, most)
    total = 0
    for t in range(1, steps + 1):
        active = [s for s, n in zip(suffixes, answers, strict=True) if n - 1 >= t]
        total += weight_bytes + kv_bytes * (prefix + sum(s + t for s in active))
    return steps, total


def bench_hf(args: argparse.Namespace) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The HF rows of the table, one per K, and the bandwidth floor's constants."""
    import torch

    from capjudge import Judge, Sample
    from capjudge.backends.hf import HFBackend

    cuda = args.device.startswith("cuda")
    tmp = Path(tempfile.mkdtemp(prefix="capjudge-bench-"))
    # measured before the model takes the memory
    bw, bw_source = bandwidth(torch, args.device, args.bandwidth_gbs)
    reference: Callable[[Path, Sequence[str]], Any]
    if args.arch != "llava":  # another architecture at its 7B model's image shapes (_arch_shapes)
        from _arch_shapes import build_arch_model

        from capjudge.testing.tiny_vlm import ARCHITECTURES

        t0 = time.perf_counter()
        model_dir = build_arch_model(args.arch, tmp / args.arch)
        print(
            f"built the {args.arch} benchmark model in {time.perf_counter() - t0:.0f} s",
            file=sys.stderr,
        )
        backend = HFBackend(
            str(model_dir),
            device=args.device,
            chat_format=ARCHITECTURES[args.arch].chat_format,
            prefix_reuse=True,
        )
    elif args.preset == "7b":  # LLaVA-1.5-7B shapes (on the CPU a smoke test: use --layers 1 or 2)
        dtype = "float16" if cuda else "float32"
        model_dir = tokenizer_folder(tmp / "tok", args.vocab)  # processor and tokenizer only
        t0 = time.perf_counter()
        net = build_7b_shapes(
            model_dir,
            layers=args.layers or (32 if cuda else 2),
            vision_layers=args.vision_layers or (24 if cuda else 2),
            dtype=getattr(torch, dtype),
            device=args.device,
        )
        print(f"built the 7B-shaped model in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
        backend = hf_backend_on(net, model_dir, device=args.device, dtype=dtype, prefix_reuse=True)
    else:
        model_dir = build_cpu_model(
            tmp / "tiny", args.hidden, args.layers or 8, args.heads, args.vocab
        )
        backend = HFBackend(
            str(model_dir), device=args.device, prefix_reuse=True
        )  # judge-like at any size
    w_bytes, kv_bytes = decode_weight_bytes(backend.net), kv_bytes_per_token(backend.net)
    constants = {
        "bandwidth_gbs": bw,
        "bandwidth_source": bw_source,
        "weight_bytes_per_step": w_bytes,
        "kv_bytes_per_token": kv_bytes,
    }
    print(
        f"memory bandwidth {bw:.0f} GB/s ({bw_source}); a decoding step reads {w_bytes / 1e9:.2f} GB of weights + {kv_bytes / 2**10:.0f} KiB per token of context",
        file=sys.stderr,
    )
    judge = Judge("fleur", backend, batch_size=max(args.k) * 2)
    max_new = judge.method.max_new_tokens
    if args.arch == "llava":
        reference = lambda image, caps: reference_style(backend, image, caps, max_new)  # noqa: E731
    else:
        reference = lambda image, caps: reference_generic(backend, judge, image, caps, max_new)  # noqa: E731

    def capjudge(image: Path, caps: Sequence[str]) -> list[Any]:
        return list(judge.score_many([Sample(image, c) for c in caps]))

    # Warm-up (first-call overheads; capjudge also learns its answer draft here).
    capjudge(IMAGES[1], CAPTIONS[:3])
    reference(IMAGES[1], CAPTIONS[:1])
    rows = []
    for k in args.k:
        caps = [CAPTIONS[i % len(CAPTIONS)] for i in range(k)]
        image = IMAGES[0]
        floor = Floor(backend, judge, image, caps)
        floor.batched()
        fns: dict[str, Callable[[], Any]] = {
            "reference": lambda image=image, caps=caps: reference(image, caps),
            "capjudge": lambda image=image, caps=caps: capjudge(image, caps),
            "padded_batch": floor.batched,
        }
        if k > 1:
            fns.update(one_by_one=floor.one_by_one, packed=floor.packed)
        med = interleaved_medians(fns, args.reps, torch, cuda)
        t_ref, t_cj, t_fb = med["reference"], med["capjudge"], med["padded_batch"]
        t_f1, t_fp = med.get("one_by_one", t_fb), med.get("packed", t_fb)
        t_floor = min(t_fb, t_f1, t_fp)
        with PeakMemory(torch, args.device) as m_ref:
            # each answer's new tokens, end of sequence included
            answers = [len(ids) for ids in reference(image, caps)]
        stats = backend.prefix_stats
        before = (stats.forwards, stats.groups) if stats is not None else (0, 0)
        with PeakMemory(torch, args.device) as m_cj:
            results = capjudge(image, caps)
        smoothed = sum(1 for r in results if r.smoothed)
        # capjudge's own decoding steps: its packed forwards less one suffix forward per image
        # (one chunk per image for K <= 32); None where the prefix path did not run (K = 1)
        cj_steps = (
            (stats.forwards - before[0]) - (stats.groups - before[1])
            if stats is not None and stats.groups > before[1]
            else None
        )
        steps, decode_bytes = decode_floor_bytes(
            floor.p, [len(s) for s in floor.suffixes], answers, w_bytes, kv_bytes, cj_steps
        )
        t_bw = t_floor + decode_bytes / (bw * 1e9)
        row = {
            "k": k,
            "reference_s_per_caption": t_ref / k,
            "capjudge_s_per_caption": t_cj / k,
            "floor_s_per_caption": t_floor / k,
            "floor_variants_s_per_caption": {
                "padded_batch": t_fb / k,
                "one_by_one": t_f1 / k,
                "packed": t_fp / k,
            },
            "speedup_vs_reference": t_ref / t_cj,
            "ratio_to_floor": t_cj / t_floor,
            "peak_mib_reference": m_ref.mib,
            "peak_mib_capjudge": m_cj.mib,
            "prompt_tokens": floor.p + statistics.median(len(s) for s in floor.suffixes),
            "prefix_tokens": floor.p,
            "image_tokens": floor.image_tokens,
            "smoothed": f"{smoothed}/{k}",
            "bandwidth_floor_s_per_caption": t_bw / k,
            "ratio_to_bandwidth_floor": t_cj / t_bw,
            "decode_steps": steps,
            "capjudge_decode_steps": cj_steps,
            "answer_tokens": max(answers),
        }
        rows.append(row)
        print(
            f"K={k:>2}  ref {row['reference_s_per_caption']:.3f}  capjudge {row['capjudge_s_per_caption']:.3f}  "
            f"floor {row['floor_s_per_caption']:.3f}  bandwidth floor {row['bandwidth_floor_s_per_caption']:.3f} s/caption  "
            f"a/b {row['speedup_vs_reference']:.2f}  b/c {row['ratio_to_floor']:.2f}  b/d {row['ratio_to_bandwidth_floor']:.2f}",
            file=sys.stderr,
        )
    backend.close()
    return rows, constants


def bench_llamacpp(args: argparse.Namespace) -> dict[str, Any] | None:
    """Per-caption time of the llama.cpp backend with image-prefix reuse vs alternating images."""
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        return None
    from capjudge.backends.base import GenerationConfig, Message, Request
    from capjudge.backends.llamacpp import LlamaCppBackend
    from capjudge.data.images import load_image
    from capjudge.prompts import LLAVA_V1_SYSTEM, get_template
    from capjudge.testing.tiny_gguf import build_tiny_llava_gguf

    model, mmproj = build_tiny_llava_gguf(Path(tempfile.mkdtemp(prefix="capjudge-gguf-")))
    be = LlamaCppBackend(model, mmproj, n_threads=args.threads)
    k = max(args.k)
    imgs = [load_image(p) for p in IMAGES]
    tpl = get_template("fleur")
    cfg = GenerationConfig(max_new_tokens=16, top_logprobs=20)

    def req(img: Any, cap: str) -> Request:
        return Request(
            (
                Message("system", LLAVA_V1_SYSTEM),
                Message("user", tpl.render(caption=cap), images=(img,)),
            ),
            cfg,
        )

    caps = [CAPTIONS[i % len(CAPTIONS)] for i in range(k)]
    be.generate([req(imgs[1], caps[0])])  # warm-up

    def same_image() -> list[Any]:
        return [be.generate([req(imgs[0], c)])[0] for c in caps]

    def alternating() -> list[Any]:
        return [be.generate([req(imgs[i % 2], c)])[0] for i, c in enumerate(caps)]

    def per_caption(fn: Callable[[], list[Any]]) -> tuple[float, float]:
        times, reused = [], []
        for _ in range(args.reps):
            be.generate([req(imgs[1], CAPTIONS[-1])])  # start from another image's cache
            t0 = time.perf_counter()
            outs = fn()
            times.append(time.perf_counter() - t0)
            reused.append(
                statistics.mean(
                    o.meta.get("reused_prompt_tokens", 0)
                    for o in outs
                    if not isinstance(o, BaseException)
                )
            )
        return statistics.median(times) / k, statistics.median(reused)

    t_same, r_same = per_caption(same_image)
    t_alt, r_alt = per_caption(alternating)
    n_prompt = be.generate([req(imgs[0], caps[0])])[0].usage.prompt_tokens
    be.close()
    return {
        "k": k,
        "same_image_s_per_caption": t_same,
        "alternating_s_per_caption": t_alt,
        "speedup": t_alt / t_same if t_same else None,
        "reused_prompt_tokens_same": r_same,
        "reused_prompt_tokens_alternating": r_alt,
        "prompt_tokens": n_prompt,
    }


def machine(device: str) -> str:
    """A one-line description of where the benchmark ran."""
    import torch

    if device.startswith("cuda"):
        return f"{torch.cuda.get_device_name(device)}, torch {torch.__version__}"
    cpu = cpu_name()
    return f"{cpu}, {os.cpu_count()} cores, {torch.get_num_threads()} torch threads, torch {torch.__version__}"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark and print the table (and, with ``--json``, one JSON line last)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--k", default="1,3,5,10", help="captions per image, comma-separated (default 1,3,5,10)"
    )
    add_reps_and_device(ap)
    ap.add_argument(
        "--arch",
        choices=["llava", *ARCH_CHOICES],
        default="llava",
        help="model architecture: llava (the tiny LLaVA-1.5 or its 7B shapes) or a 7B model's image shapes with scaled-down layers (see benchmarks/_arch_shapes.py)",
    )
    ap.add_argument(
        "--preset",
        choices=["tiny", "7b"],
        default=None,
        help="model shapes (default: tiny on CPU, 7b on CUDA)",
    )
    ap.add_argument("--hidden", type=int, default=512, help="tiny model: text hidden size")
    ap.add_argument(
        "--layers", type=int, default=None, help="text layers (tiny default 8, 7b default 32)"
    )
    ap.add_argument("--heads", type=int, default=8, help="tiny model: attention heads")
    ap.add_argument(
        "--vocab",
        type=int,
        default=2000,
        help="tokenizer vocabulary to train (2000: prompt lengths close to LLaVA's tokenizer; the tests use 600)",
    )
    ap.add_argument(
        "--vision-layers", type=int, default=None, help="7b preset: CLIP layers (default 24)"
    )
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: all cores)")
    ap.add_argument(
        "--bandwidth-gbs",
        type=float,
        default=None,
        help="memory bandwidth in GB/s for the bandwidth floor (default: measured, a device-to-device copy)",
    )
    ap.add_argument("--no-llamacpp", action="store_true", help="skip the llama.cpp measurement")
    ap.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    args = ap.parse_args(argv)
    args.k = [int(x) for x in str(args.k).split(",") if x.strip()]
    if args.preset is None:
        args.preset = "7b" if args.device.startswith("cuda") else "tiny"

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    rows, constants = bench_hf(args)
    llama = None if args.no_llamacpp else bench_llamacpp(args)

    where = machine(args.device)
    dtype = "float16" if args.device.startswith("cuda") else "float32"
    if args.arch != "llava":
        arch = SHAPES[args.arch]
        shape = f"{arch.title} image shapes ({arch.bench}), random weights, {dtype}"
        tokens = f"{rows[0]['image_tokens']} image tokens"
    else:
        shape = (
            f"LLaVA-1.5-7B shapes ({args.layers or (32 if args.device.startswith('cuda') else 2)} layers), random weights, {dtype}"
            if args.preset == "7b"
            else f"tiny LLaVA, hidden {args.hidden}, {args.layers or 8} layers, {args.heads} heads, float32"
        )
        tokens = "576 image tokens"
    print(f"\nFLEUR, {tokens}, {shape}; {where}; median of {args.reps}")
    print(
        "| K | reference s/caption (a) | capjudge s/caption (b) | floor s/caption (c) | a/b | b/c | peak MiB ref | peak MiB capjudge | smoothed | bandwidth floor s/caption (d) | b/d |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")

    def mib(x: float | None) -> str:
        return "n/a" if x is None else f"{x:.0f}"

    for r in rows:
        print(
            f"| {r['k']} | {r['reference_s_per_caption']:.3f} | {r['capjudge_s_per_caption']:.3f} | {r['floor_s_per_caption']:.3f} | "
            f"{r['speedup_vs_reference']:.2f} | {r['ratio_to_floor']:.2f} | {mib(r['peak_mib_reference'])} | {mib(r['peak_mib_capjudge'])} | {r['smoothed']} | "
            f"{r['bandwidth_floor_s_per_caption']:.3f} | {r['ratio_to_bandwidth_floor']:.2f} |"
        )
    if llama:
        print(
            f"\nllama.cpp (tiny GGUF, {llama['prompt_tokens']} prompt tokens), K={llama['k']}: same image consecutive "
            f"{llama['same_image_s_per_caption'] * 1000:.1f} ms/caption (reused {llama['reused_prompt_tokens_same']:.0f} prompt tokens), "
            f"alternating images {llama['alternating_s_per_caption'] * 1000:.1f} ms/caption (reused {llama['reused_prompt_tokens_alternating']:.0f}); "
            f"speedup {llama['speedup']:.2f}x"
        )
    if args.json:
        main_row = next((r for r in rows if r["k"] == 5), rows[-1])
        print(
            json.dumps(
                {
                    **main_row,
                    "arch": args.arch,
                    "device": where,
                    "model": shape,
                    "reps": args.reps,
                    **constants,
                    "rows": rows,
                    "llamacpp": llama,
                },
                default=float,
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
