"""Tokens per second of long answers of varying length: capjudge's slot refill vs the alternatives.

N requests (two images, distinct prompts) whose answer lengths are planted from ``--min-len`` to
``--max-len`` (tenfold by default): the tiny thinking model of ``capjudge.testing.tiny_thinking``
built with ``endless=True`` reasons until its token limit, so each request's ``max_new_tokens`` is
its answer length (as a planted end of sequence after N tokens would make it). Greedy, with the
per-step top log-probabilities a judge reads (``top_logprobs=5``). Four ways to decode them:

(a) capjudge:    ``HFBackend(batch_size=S).generate(requests)``: S slots, each refilled from the
    queue as soon as its answer ends (``capjudge/backends/hf/refill.py``);
(b) one by one:  the same backend with ``refill=false``, one request per call (on every
    ``--alone-every``-th request, 8 by default: the same spread of lengths at an eighth of the time);
(c) padded:      ``model.generate`` on batches of S requests (left-padded, ``output_logits``),
    each batch decoding until its longest answer (the rows that ended idle meanwhile);
(d) floor:       the same number of tokens with every slot busy: N requests of one length (the
    mean), decoded by (a)'s refill path and by (c)'s padded batches (no idle rows either way); the
    faster of the two.

Useful tokens per second (the planted lengths' sum over the seconds) for each, the ratios
``speedup_vs_padded`` (c's seconds over a's) and ``ratio_to_floor`` (a's seconds over d's).
Medians of ``--reps`` rounds, each timing every variant once in turn, after one warm-up call.

    python benchmarks/bench_long.py                # ~3-4 min on 2 shared cores
    python benchmarks/bench_long.py --json         # last line: one JSON object
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _machine import cpu_name  # benchmarks/ is on sys.path when a script runs

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

IMAGES = [ROOT / "examples" / "images" / "cats.jpg", ROOT / "examples" / "images" / "dog.jpg"]
TOP = 5


def planted_lengths(n: int, low: int, high: int, seed: int) -> list[int]:
    """``n`` answer lengths from ``low`` to ``high`` (both included), spread evenly, shuffled."""
    lengths = [round(low + (high - low) * i / max(1, n - 1)) for i in range(n)]
    random.Random(seed).shuffle(lengths)
    return lengths


def requests_for(lengths: list[int]) -> list[Any]:
    from capjudge.backends.base import GenerationConfig, Message, Request
    from capjudge.data.images import load_image

    imgs = [load_image(p) for p in IMAGES]
    return [
        Request((Message("user", f"Think, then rate caption {i}: a cat lying on a bed.", images=(imgs[i % 2],)),), GenerationConfig(max_new_tokens=n, top_logprobs=TOP))
        for i, n in enumerate(lengths)
    ]


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
            out = backend.net.generate(**inputs, max_new_tokens=longest, min_new_tokens=longest, do_sample=False, return_dict_in_generate=True, output_logits=True, pad_token_id=backend.tokenizer.pad_token_id)
        # what a judge reads of each row: its own answer's steps, log-softmaxed
        for b, r in enumerate(chunk):
            logits = torch.stack([x[b] for x in out.logits[: r.config.max_new_tokens]]).float()
            torch.log_softmax(logits, dim=-1).topk(TOP, dim=-1)
        steps += longest
    return steps


def timed(fn: Callable[[], Any]) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print the table (and, with ``--json``, one JSON line last)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=64, help="requests (default 64)")
    ap.add_argument("--alone-every", type=int, default=8, help="(b) on every k-th request (default 8)")
    ap.add_argument("--slots", type=int, default=8, help="batch size / slots (default 8)")
    ap.add_argument("--min-len", type=int, default=128, help="shortest planted answer (default 128)")
    ap.add_argument("--max-len", type=int, default=1280, help="longest planted answer (default 1280)")
    ap.add_argument("--reps", type=int, default=2, help="rounds; medians are reported (default 2)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default 1: the 2-core machine is shared)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    args = ap.parse_args(argv)

    import torch
    import transformers

    from capjudge.backends.hf import HFBackend
    from capjudge.testing.tiny_thinking import build_tiny_thinking_vlm

    torch.set_num_threads(args.threads)
    lengths = planted_lengths(args.n, args.min_len, args.max_len, args.seed)
    tokens = sum(lengths)
    mean = tokens // args.n
    even = [mean] * args.n
    with tempfile.TemporaryDirectory() as tmp:
        folder = build_tiny_thinking_vlm(Path(tmp) / "endless", endless=True)
        opts = {"device": "cpu", "thinking_budget": 0}
        cj = HFBackend(str(folder), batch_size=args.slots, **opts)
        alone = HFBackend(str(folder), batch_size=1, refill=False, prefix_reuse=False, **opts)
        varied, uniform = requests_for(lengths), requests_for(even)
        assert cj._refill is not None and cj._refill.unsupported is None, "slot refill not available"
        variants: dict[str, Callable[[], Any]] = {
            "capjudge": lambda: cj.generate(varied),
            "one_by_one": lambda: [alone.generate([r]) for r in varied[:: args.alone_every]],
            "padded": lambda: padded_generate(cj, varied, args.slots),
            "floor_refill": lambda: cj.generate(uniform),
            "floor_padded": lambda: padded_generate(cj, uniform, args.slots),
        }
        cj.generate(varied[: args.slots])  # warm-up
        padded_generate(cj, varied[: args.slots], args.slots)
        times: dict[str, list[float]] = {k: [] for k in variants}
        for _ in range(args.reps):
            for name, fn in variants.items():
                times[name].append(timed(fn))
        padded_steps = padded_generate(cj, varied, args.slots)
        cj.close()
        alone.close()
    med = {k: statistics.median(v) for k, v in times.items()}
    floor = min(med["floor_refill"] * tokens / (mean * args.n), med["floor_padded"] * tokens / (mean * args.n))
    rows = {k: {"seconds": med[k], "tokens_per_s": tokens / med[k]} for k in ("capjudge", "padded")}
    alone_tokens = sum(lengths[:: args.alone_every])
    rows["one_by_one"] = {"seconds": med["one_by_one"] * tokens / alone_tokens, "tokens_per_s": alone_tokens / med["one_by_one"]}  # scaled to all N
    rows["floor"] = {"seconds": floor, "tokens_per_s": tokens / floor}
    print(f"{args.n} requests, answers of {min(lengths)}-{max(lengths)} tokens ({tokens} in all), {args.slots} slots, "
          f"median of {args.reps}; torch {torch.__version__}, transformers {transformers.__version__}, {args.threads} threads, {cpu_name()}")
    print(f"{'variant':<12} {'s':>8} {'tokens/s':>10}")
    for name, row in rows.items():
        print(f"{name:<12} {row['seconds']:>8.3f} {row['tokens_per_s']:>10.1f}")
    result = {
        "speedup_vs_padded": med["padded"] / med["capjudge"],
        "speedup_vs_one_by_one": rows["one_by_one"]["seconds"] / med["capjudge"],
        "ratio_to_floor": med["capjudge"] / floor,
        "padded_row_use": tokens / (padded_steps * args.slots),
        "tokens": tokens, "n": args.n, "slots": args.slots, "lengths": [min(lengths), max(lengths)],
        "rows": rows, "floor_variants_s": {"refill": med["floor_refill"], "padded": med["floor_padded"]},
        "reps": args.reps, "threads": args.threads, "device": "cpu", "cpu": cpu_name(),
        "torch": torch.__version__, "transformers": transformers.__version__,
    }  # fmt: skip
    print(f"speed-up vs padded generate {result['speedup_vs_padded']:.2f}x, vs one by one {result['speedup_vs_one_by_one']:.2f}x; "
          f"time over the full-slot floor {result['ratio_to_floor']:.2f}x (padded rows busy {result['padded_row_use']:.0%})")
    if args.json:
        print(json.dumps(result, default=float))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
