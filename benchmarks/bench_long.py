"""Tokens per second of long answers of varying length: capjudge's slot refill vs the alternatives.

N requests (distinct prompts) whose answer lengths are planted from ``--min-len`` to ``--max-len``
(tenfold by default): each request's ``max_new_tokens`` is its answer length, on a model whose
answers never end before it (as a planted end of sequence after N tokens would make them). Greedy,
with the per-step top log-probabilities a judge reads (``top_logprobs=5``). Two models:

* ``--preset tiny`` (CPU default): the tiny thinking model of ``capjudge.testing.tiny_thinking``
  built with ``endless=True`` (its reasoning never closes), float32; prompts with one of two images;
* ``--preset 7b`` (CUDA default): LLaVA-1.5-7B shapes (``benchmarks/_llava7b.py``), random weights,
  float16 on CUDA (float32 on the CPU, a smoke test with ``--layers 1`` and a smaller ``--hidden``),
  the output head's rows of the end of sequence, the other special tokens and the ids past the
  tokenizer's vocabulary set to zero, so that no answer ends; text prompts by default
  (``--image``: with LLaVA's 576 image tokens; see the README for the memory that takes).

Four ways to decode them:

(a) capjudge:    ``HFBackend(batch_size=S).generate(requests)``: S slots, each refilled from the
    queue as soon as its answer ends (``capjudge/backends/hf/refill.py``); ``--backend-option
    KEY=VALUE`` goes to this backend, and ``--compare-graphs`` adds ``capjudge_eager``, the same with
    ``decode_graphs=off``;
(b) one by one:  the same backend with ``refill=false``, one request per call (on every
    ``--alone-every``-th request, 8 by default on the CPU: the same spread of lengths at an eighth
    of the time; 0 skips it);
(c) padded:      ``model.generate`` on batches of S requests (left-padded, ``output_logits``),
    each batch decoding until its longest answer (the rows that ended idle meanwhile);
(d) floor:       the same number of tokens with every slot busy: N requests of one length (the
    mean), decoded by (a)'s refill path and by (c)'s padded batches (no idle rows either way); the
    faster of the two.

Useful tokens per second (the planted lengths' sum over the seconds) for each, the ratios
``speedup_vs_padded`` (c's seconds over a's) and ``ratio_to_floor`` (a's seconds over d's).

The bandwidth floor: the decoding steps of (d)'s full-slot schedule (N requests of the mean length
in batches of S: per batch one step per token after the first, which the prompt's forward gives),
each reading the language model's weights once (output head included, input embedding not) and
every row's keys and values (its prompt and the tokens so far), over the memory bandwidth (a
device-to-device copy, or ``--bandwidth-gbs``): ``bandwidth_bound_tokens_per_s`` and
``fraction_of_bandwidth_bound`` (capjudge's tokens/s over that bound). It is computed on the CPU
too, where compute rather than memory bounds a step.

Medians of ``--reps`` rounds, each timing every variant once in turn, after one warm-up call. A
``SIGTERM`` (``timeout``) ends the rounds early and prints what was measured (``"partial": true``).

    python benchmarks/bench_long.py                # ~3-4 min on 2 shared cores
    python benchmarks/bench_long.py --json         # last line: one JSON object
    python benchmarks/bench_long.py --device cuda --n 128 --reps 1 --json   # 7B shapes, 64 slots
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import random
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _gpu import (
    bandwidth,
    decode_weight_bytes,
    gpu_name,
    kv_bytes_per_token,
)  # benchmarks/ is on sys.path
from _machine import cpu_name

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

IMAGES = [ROOT / "examples" / "images" / "cats.jpg", ROOT / "examples" / "images" / "dog.jpg"]
TOP = 5
CAPJUDGE = ("capjudge", "capjudge_eager")


class Stopped(BaseException):
    """A SIGTERM during the rounds (a BaseException: the backends' fallbacks catch Exception)."""


class RefillFailed(BaseException):
    """The slot refill raised (out of memory, say): the variant fails instead of the backend
    answering again with batched ``generate``, which would time another path for minutes."""


def strict_refill(backend: Any) -> None:
    """Make ``backend``'s slot refill raise :class:`RefillFailed` where it would fall back."""
    refiller = backend._refill
    decode = getattr(refiller, "_decode", None)
    if decode is None:
        return

    def strict(*args: Any, **kwargs: Any) -> Any:
        try:
            return decode(*args, **kwargs)
        except Exception as exc:
            raise RefillFailed(f"{type(exc).__name__}: {exc}") from exc

    refiller._decode = strict


def planted_lengths(n: int, low: int, high: int, seed: int) -> list[int]:
    """``n`` answer lengths from ``low`` to ``high`` (both included), spread evenly, shuffled."""
    lengths = [round(low + (high - low) * i / max(1, n - 1)) for i in range(n)]
    random.Random(seed).shuffle(lengths)
    return lengths


def requests_for(lengths: list[int], image: bool = True) -> list[Any]:
    """One request per length: a distinct prompt (with one of two images when ``image``), that
    length as its ``max_new_tokens``, top-5 log-probabilities per step."""
    from capjudge.backends.base import GenerationConfig, Message, Request
    from capjudge.data.images import load_image

    imgs = [load_image(p) for p in IMAGES] if image else []
    return [
        Request(
            (Message("user", f"Think, then rate caption {i}: a cat lying on a bed.", images=(imgs[i % 2],) if image else ()),),
            GenerationConfig(max_new_tokens=n, top_logprobs=TOP),
        )
        for i, n in enumerate(lengths)
    ]  # fmt: skip


def padded_generate(backend: Any, requests: list[Any], slots: int) -> int:
    """(c): batches of ``slots`` left-padded rows, each decoded to its longest answer; returns the
    decoding steps taken."""
    import torch

    steps = 0
    for start in range(0, len(requests), slots):
        chunk = requests[start : start + slots]
        longest = max(r.config.max_new_tokens for r in chunk)
        inputs = backend.encode(chunk)
        with torch.inference_mode():
            out = backend.net.generate(
                **inputs,
                max_new_tokens=longest,
                min_new_tokens=longest,
                do_sample=False,
                return_dict_in_generate=True,
                output_logits=True,
                pad_token_id=backend.tokenizer.pad_token_id,
            )
        # what a judge reads of each row: its own answer's steps, log-softmaxed
        for b, r in enumerate(chunk):
            logits = torch.stack([x[b] for x in out.logits[: r.config.max_new_tokens]]).float()
            torch.log_softmax(logits, dim=-1).topk(TOP, dim=-1)
        steps += longest
    return steps


def full_slot_schedule(
    prompts: list[int], length: int, slots: int, weight_bytes: int, kv_bytes: int
) -> tuple[int, int]:
    """Decoding steps and bytes read for answers of ``length`` tokens to prompts of ``prompts``
    tokens, in batches of ``slots`` rows: per batch ``length - 1`` steps (the first token comes
    from the prompt's forward), step t reading the weights once and each row's p + t keys and values."""
    n = max(0, length - 1)
    steps = total = 0
    for start in range(0, len(prompts), slots):
        batch = prompts[start : start + slots]
        steps += n
        total += n * weight_bytes + kv_bytes * (n * sum(batch) + len(batch) * n * (n + 1) // 2)
    return steps, total


def check_answers(name: str, outs: list[Any], requests: list[Any], refill: bool) -> None:
    """Every answer ran to its planted length (and, for capjudge, through the slot refill)."""
    for r, out in zip(requests, outs, strict=True):
        if isinstance(out, BaseException):
            raise RuntimeError(f"{name}: a request failed: {type(out).__name__}: {out}")
        got = out.usage.completion_tokens if out.usage is not None else None
        if got != r.config.max_new_tokens:
            raise RuntimeError(
                f"{name}: an answer ended after {got} of its {r.config.max_new_tokens} planted tokens"
            )
        if refill and out.meta.get("refill") != "used":
            raise RuntimeError(
                f"{name}: an answer did not go through the slot refill ({out.meta.get('refill')})"
            )


def parse_options(pairs: list[str]) -> dict[str, str]:
    """``KEY=VALUE`` strings as a dict (values stay strings: the backend parses its options)."""
    out = {}
    for pair in pairs:
        key, eq, value = pair.partition("=")
        if not eq or not key.strip():
            raise SystemExit(f"--backend-option wants KEY=VALUE, not {pair!r}")
        out[key.strip()] = value.strip()
    return out


def takes_option(cls: Any, name: str) -> bool:
    """Whether ``cls(...)`` accepts the keyword ``name``."""
    params = inspect.signature(cls.__init__).parameters
    return name in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The options, with the device's defaults filled in."""
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    ap.add_argument(
        "--preset",
        choices=["tiny", "7b"],
        default=None,
        help="model: tiny thinking VLM (default on cpu) or LLaVA-1.5-7B shapes (default on cuda)",
    )
    ap.add_argument("--n", type=int, default=None, help="requests (default 64 on cpu, 256 on cuda)")
    ap.add_argument(
        "--alone-every",
        type=int,
        default=None,
        help="(b) on every k-th request (default 8 on cpu, 32 on cuda; 0: skip)",
    )
    ap.add_argument(
        "--slots", type=int, default=None, help="batch size / slots (default 8 on cpu, 64 on cuda)"
    )
    ap.add_argument(
        "--min-len", type=int, default=128, help="shortest planted answer (default 128)"
    )
    ap.add_argument(
        "--max-len", type=int, default=1280, help="longest planted answer (default 1280)"
    )
    ap.add_argument("--reps", type=int, default=2, help="rounds; medians are reported (default 2)")
    ap.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads (default 1: the 2-core machine is shared)",
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--layers",
        type=int,
        default=None,
        help="7b preset: text layers (default 32 on cuda, 2 on cpu)",
    )
    ap.add_argument(
        "--vision-layers",
        type=int,
        default=None,
        help="7b preset: CLIP layers (default 24 on cuda, 1 on cpu)",
    )
    ap.add_argument(
        "--hidden",
        type=int,
        default=None,
        help="7b preset: text width (default 4096; smaller for a CPU smoke test)",
    )
    ap.add_argument(
        "--image",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="one image per prompt (default: on for tiny, off for 7b)",
    )
    ap.add_argument(
        "--backend-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="passed to HFBackend(...) for the capjudge variant (repeatable)",
    )
    ap.add_argument(
        "--compare-graphs",
        action="store_true",
        help="also time capjudge_eager: the capjudge backend with decode_graphs=off",
    )
    ap.add_argument(
        "--skip",
        default="",
        help="variants not to time, comma-separated (capjudge_eager, one_by_one, padded, floor_refill, floor_padded)",
    )
    ap.add_argument(
        "--bandwidth-gbs",
        type=float,
        default=None,
        help="memory bandwidth in GB/s for the bandwidth floor (default: measured)",
    )
    ap.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    args = ap.parse_args(argv)
    cuda = args.device.startswith("cuda")
    args.cuda = cuda
    args.preset = args.preset or ("7b" if cuda else "tiny")
    args.n = args.n or (256 if cuda else 64)
    args.slots = args.slots or (64 if cuda else 8)
    args.alone_every = (32 if cuda else 8) if args.alone_every is None else args.alone_every
    args.image = (args.preset == "tiny") if args.image is None else args.image
    args.layers = args.layers or (32 if cuda else 2)
    args.vision_layers = args.vision_layers or (24 if cuda else 1)
    args.hidden = args.hidden or 4096
    args.options = parse_options(args.backend_option)
    args.skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    if args.alone_every <= 0:
        args.skip.add("one_by_one")
    if not args.compare_graphs:
        args.skip.add("capjudge_eager")
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print the table (and, with ``--json``, one JSON line last)."""
    args = parse_args(argv)

    import torch
    import transformers

    from capjudge.backends.hf import HFBackend

    if args.compare_graphs and not takes_option(HFBackend, "decode_graphs"):
        raise SystemExit(
            "--compare-graphs needs HFBackend's decode_graphs option, which this capjudge does not have"
        )
    torch.set_num_threads(args.threads)
    lengths = planted_lengths(args.n, args.min_len, args.max_len, args.seed)
    tokens = sum(lengths)
    mean = tokens // args.n
    even = [mean] * args.n
    # measured before the model takes the memory
    bw, bw_source = bandwidth(torch, args.device, args.bandwidth_gbs)
    with tempfile.TemporaryDirectory() as tmp:
        make, model, dtype = _backend_maker(args, Path(tmp), torch)
        backends: dict[str, Any] = {}
        try:
            cj = backends["capjudge"] = make(batch_size=args.slots, **args.options)
            if "capjudge_eager" not in args.skip:
                backends["capjudge_eager"] = make(
                    batch_size=args.slots, **{**args.options, "decode_graphs": "off"}
                )
            if "one_by_one" not in args.skip:
                backends["one_by_one"] = make(batch_size=1, refill=False, prefix_reuse=False)
        except TypeError as exc:
            raise SystemExit(
                f"HFBackend rejected an option ({', '.join(args.backend_option) or 'none given'}): {exc}"
            ) from exc
        assert cj._refill is not None and cj._refill.unsupported is None, (
            "slot refill not available"
        )
        for name in CAPJUDGE:
            if name in backends:
                strict_refill(backends[name])
        varied, uniform = requests_for(lengths, args.image), requests_for(even, args.image)
        alone_reqs = varied[:: max(1, args.alone_every)]
        prompts = [int(cj.encode([r])["input_ids"].shape[1]) for r in uniform]
        w_bytes, kv_bytes = decode_weight_bytes(cj.net), kv_bytes_per_token(cj.net)
        floor_steps, floor_bytes = full_slot_schedule(prompts, mean, args.slots, w_bytes, kv_bytes)
        scale = tokens / (mean * args.n)  # the floors decode mean x N tokens
        bw_floor = floor_bytes / (bw * 1e9) * scale
        print(
            f"bandwidth floor {bw_floor:.3f} s ({tokens / bw_floor:.0f} tokens/s) at {bw:.0f} GB/s ({bw_source}): {floor_steps} steps, "
            f"{w_bytes / 1e9:.2f} GB of weights + {kv_bytes / 2**10:.0f} KiB per token of context each; prompts {min(prompts)}-{max(prompts)} tokens",
            file=sys.stderr,
            flush=True,
        )
        if args.cuda:
            slot_gib = args.slots * (max(prompts) + args.max_len + 256) * kv_bytes / 2**30
            print(
                f"slot buffers ~{slot_gib:.1f} GiB; weights {torch.cuda.memory_allocated(args.device) / 2**30:.1f} GiB allocated",
                file=sys.stderr,
                flush=True,
            )

        variants: dict[str, tuple[Callable[[], Any], list[Any], int]] = {
            "capjudge": (lambda: cj.generate(varied), varied, tokens),
            "capjudge_eager": (lambda: backends["capjudge_eager"].generate(varied), varied, tokens),
            "floor_refill": (lambda: cj.generate(uniform), uniform, mean * args.n),
            "floor_padded": (lambda: padded_generate(cj, uniform, args.slots), uniform, mean * args.n),
            "padded": (lambda: padded_generate(cj, varied, args.slots), varied, tokens),
            "one_by_one": (lambda: [backends["one_by_one"].generate([r])[0] for r in alone_reqs], alone_reqs, sum(lengths[:: max(1, args.alone_every)])),
        }  # fmt: skip
        variants = {k: v for k, v in variants.items() if k not in args.skip}
        _warm_up(args, backends, varied, lengths)
        times, peaks, errors, refill_steps, partial = _rounds(args, torch, variants, cj, bw_floor)
        for be in backends.values():
            be.close()
    facts = {
        "lengths": lengths, "tokens": tokens, "scale": scale, "model": model, "dtype": dtype, "bw": bw, "bw_source": bw_source,
        "bw_floor": bw_floor, "floor_steps": floor_steps, "w_bytes": w_bytes, "kv_bytes": kv_bytes, "prompts": prompts,
        "times": times, "peaks": peaks, "errors": errors, "refill_steps": refill_steps, "partial": partial,
    }  # fmt: skip
    return _report(args, torch, transformers, facts)


def _backend_maker(
    args: argparse.Namespace, tmp: Path, torch: Any
) -> tuple[Callable[..., Any], str, str]:
    """A function making an HFBackend on the preset's model (shared by the variants), the model's
    description and its dtype."""
    from capjudge.backends.hf import HFBackend

    if args.preset == "tiny":
        from capjudge.testing.tiny_thinking import build_tiny_thinking_vlm

        folder = build_tiny_thinking_vlm(tmp / "endless", endless=True)
        dtype = "float32" if not args.cuda else "bfloat16"

        def make_tiny(**opts: Any) -> Any:
            return HFBackend(
                str(folder), device=args.device, dtype=dtype, thinking_budget=0, **opts
            )

        return make_tiny, f"tiny thinking Qwen3-VL, endless reasoning, {dtype}", dtype

    from _llava7b import build_7b_shapes, describe, hf_backend_on, tokenizer_folder

    dtype = "float16" if args.cuda else "float32"
    folder = tokenizer_folder(tmp / "tok")
    t0 = time.perf_counter()
    net = build_7b_shapes(
        folder,
        layers=args.layers,
        vision_layers=args.vision_layers,
        dtype=getattr(torch, dtype),
        device=args.device,
        hidden=args.hidden,
        answers="endless",
    )
    print(
        f"built the 7B-shaped model in {time.perf_counter() - t0:.1f} s",
        file=sys.stderr,
        flush=True,
    )

    def make_7b(**opts: Any) -> Any:
        return hf_backend_on(net, folder, device=args.device, dtype=dtype, **opts)

    return (
        make_7b,
        describe(args.layers, args.hidden, dtype) + ", end of sequence never the argmax",
        dtype,
    )


def _warm_up(
    args: argparse.Namespace, backends: dict[str, Any], varied: list[Any], lengths: list[int]
) -> None:
    """First-call overheads, and a check that answers run to their planted lengths through the
    refill. CPU: the first S requests; CUDA: S requests of the shortest length (the
    first S would decode up to ``--max-len`` steps)."""
    warm = (
        varied[: args.slots]
        if not args.cuda
        else requests_for([min(lengths)] * args.slots, args.image)
    )
    for name in CAPJUDGE:
        if name in backends:
            check_answers(name, backends[name].generate(warm), warm, refill=True)
    if "one_by_one" in backends:
        check_answers(
            "one_by_one", backends["one_by_one"].generate(warm[:1]), warm[:1], refill=False
        )
    padded_generate(backends["capjudge"], warm, args.slots)


def _rounds(
    args: argparse.Namespace, torch: Any, variants: dict[str, Any], cj: Any, bw_floor: float
) -> tuple[Any, ...]:
    """``--reps`` rounds of every variant in turn: times, CUDA peaks, errors (a variant that fails
    is dropped from later rounds), capjudge's decoding steps, and whether a SIGTERM cut them short."""
    times: dict[str, list[float]] = {k: [] for k in variants}
    peaks: dict[str, list[int]] = {k: [] for k in variants}
    errors: dict[str, str] = {}
    refill_steps = None
    partial = False

    def stop(signum: int, frame: Any) -> None:
        raise Stopped

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        for rep in range(args.reps):
            for name, (fn, reqs, n_tokens) in variants.items():
                if name in errors:
                    continue
                if args.cuda:
                    torch.cuda.empty_cache()
                    torch.cuda.synchronize(args.device)
                    torch.cuda.reset_peak_memory_stats(args.device)
                before = getattr(cj._refill, "forwards", None)
                try:
                    t0 = time.perf_counter()
                    outs = fn()
                    if args.cuda:
                        torch.cuda.synchronize(args.device)
                    seconds = time.perf_counter() - t0
                    if name in CAPJUDGE or name == "floor_refill" or name == "one_by_one":
                        check_answers(name, outs, reqs, refill=name != "one_by_one")
                except (Exception, RefillFailed) as exc:  # noqa: BLE001 - reported; the other variants go on
                    errors[name] = f"{type(exc).__name__}: {str(exc)[:300]}"
                    print(
                        f"[round {rep + 1}] {name} failed: {errors[name]}",
                        file=sys.stderr,
                        flush=True,
                    )
                    continue
                times[name].append(seconds)
                if args.cuda:
                    peaks[name].append(int(torch.cuda.max_memory_allocated(args.device)))
                if name == "capjudge" and before is not None:
                    refill_steps = cj._refill.forwards - before
                note = (
                    f", {bw_floor / seconds:.0%} of the bandwidth bound" if name in CAPJUDGE else ""
                )
                print(
                    f"[round {rep + 1}] {name}: {seconds:.2f} s, {n_tokens / seconds:.0f} tokens/s{note}",
                    file=sys.stderr,
                    flush=True,
                )
    except Stopped:
        partial = True
        print("stopped (SIGTERM): reporting what was measured", file=sys.stderr, flush=True)
    finally:
        signal.signal(signal.SIGTERM, previous)
    return times, peaks, errors, refill_steps, partial


def _report(args: argparse.Namespace, torch: Any, transformers: Any, v: dict[str, Any]) -> int:
    """Print the table and the JSON from what ``main`` measured (``v``)."""
    tokens, lengths, times, peaks = v["tokens"], v["lengths"], v["times"], v["peaks"]
    med = {k: statistics.median(ts) for k, ts in times.items() if ts}
    scale = v["scale"]
    floors = {k: med[k] * scale for k in ("floor_refill", "floor_padded") if k in med}
    floor = min(floors.values()) if floors else None
    bw_floor = v["bw_floor"]

    def ratio(a: float | None, b: float | None) -> float | None:
        return a / b if a is not None and b else None

    rows: dict[str, dict[str, Any]] = {}
    for name in ("capjudge", "padded"):
        if name in med:
            rows[name] = {"seconds": med[name], "tokens_per_s": tokens / med[name]}
    alone_tokens = sum(lengths[:: max(1, args.alone_every)])
    if "one_by_one" in med:
        rows["one_by_one"] = {
            "seconds": med["one_by_one"] * tokens / alone_tokens,
            "tokens_per_s": alone_tokens / med["one_by_one"],
        }  # scaled to all N
    if floor is not None:
        rows["floor"] = {"seconds": floor, "tokens_per_s": tokens / floor}
    if "capjudge_eager" in med:
        rows["capjudge_eager"] = {
            "seconds": med["capjudge_eager"],
            "tokens_per_s": tokens / med["capjudge_eager"],
        }
    for name, row in rows.items():
        row["fraction_of_bandwidth_bound"] = bw_floor / row["seconds"]
        if args.cuda and peaks.get(name):
            row["peak_gib"] = max(peaks[name]) / 2**30
    if args.cuda:
        for name, key in (("floor", "floor_refill"), ("floor", "floor_padded")):
            if name in rows and peaks.get(key):
                rows[name]["peak_gib"] = max(rows[name].get("peak_gib", 0), max(peaks[key]) / 2**30)
    where = gpu_name(torch, args.device) or cpu_name()
    cj_s = med.get("capjudge")
    print(
        f"{args.n} requests, answers of {min(lengths)}-{max(lengths)} tokens ({tokens} in all), {args.slots} slots, "
        f"median of {args.reps}; {v['model']}; torch {torch.__version__}, transformers {transformers.__version__}, {args.threads} threads, {where}"
    )
    print(f"{'variant':<14} {'s':>8} {'tokens/s':>10}")
    for name, row in rows.items():
        print(f"{name:<14} {row['seconds']:>8.3f} {row['tokens_per_s']:>10.1f}")
    padded_steps = sum(max(lengths[s : s + args.slots]) for s in range(0, args.n, args.slots))
    result = {
        "speedup_vs_padded": ratio(med.get("padded"), cj_s),
        "speedup_vs_one_by_one": ratio(rows.get("one_by_one", {}).get("seconds"), cj_s),
        "ratio_to_floor": ratio(cj_s, floor),
        "padded_row_use": tokens / (padded_steps * args.slots),
        "tokens": tokens, "n": args.n, "slots": args.slots, "lengths": [min(lengths), max(lengths)],
        "rows": rows, "floor_variants_s": {"refill": med.get("floor_refill"), "padded": med.get("floor_padded")},
        "reps": args.reps, "threads": args.threads, "device": "cuda" if args.cuda else "cpu", "cpu": cpu_name(),
        "torch": torch.__version__, "transformers": transformers.__version__,
        "gpu": gpu_name(torch, args.device), "preset": args.preset, "model": v["model"], "dtype": v["dtype"], "image": args.image,
        "bandwidth_gbs": v["bw"], "bandwidth_source": v["bw_source"],
        "bandwidth_floor_s": bw_floor, "bandwidth_bound_tokens_per_s": tokens / bw_floor,
        "fraction_of_bandwidth_bound": ratio(bw_floor, cj_s),
        "floor_steps": v["floor_steps"], "capjudge_steps": v["refill_steps"],
        "weight_bytes_per_step": v["w_bytes"], "kv_bytes_per_token": v["kv_bytes"], "prompt_tokens": [min(v["prompts"]), max(v["prompts"])],
        "backend_options": args.options, "speedup_graphs_vs_eager": ratio(med.get("capjudge_eager"), cj_s),
        "errors": v["errors"], "partial": v["partial"],
    }  # fmt: skip

    def fmt(x: float | None, spec: str) -> str:
        return "n/a" if x is None else format(x, spec)

    print(
        f"speed-up vs padded generate {fmt(result['speedup_vs_padded'], '.2f')}x, vs one by one {fmt(result['speedup_vs_one_by_one'], '.2f')}x; "
        f"time over the full-slot floor {fmt(result['ratio_to_floor'], '.2f')}x (padded rows busy {result['padded_row_use']:.0%}); "
        f"{fmt(result['fraction_of_bandwidth_bound'], '.0%')} of the bandwidth bound ({result['bandwidth_bound_tokens_per_s']:.0f} tokens/s at {v['bw']:.0f} GB/s)"
    )
    if args.json:
        print(json.dumps(result, default=float))
    return 1 if "capjudge" not in med else 0


if __name__ == "__main__":
    raise SystemExit(main())
