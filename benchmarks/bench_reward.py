"""GRPO-shaped reward calls: capjudge's reward vs the floor vs scoring each completion alone.

One GRPO step hands the reward B images x G completions at once. On the HF backend this prints,
per completion, side by side (medians over ``--reps`` rounds; each round times every variant once,
in turn, so that a noisy stretch slows all of them alike):

(a) reward:    ``make_reward("fleur", HFBackend(...))(prompts=..., completions=..., image=...)``, the
               B x G completions in one call (images read from their files, as a dataset of paths);
(b) one by one: the same reward called once per completion (a batch of one: no image group);
(c) floor:     per image, one prefix forward (system text, image, instructions up to the caption)
               plus the G suffix forwards, measured on the model with the backend's own pieces
               (``bench_judge.Floor``: the fastest of a padded batch, one by one, or packed), summed
               over the B images;

and the ratios a/c (the target: within 1.3x) and b/a (the speed-up of grouping); also the
reward's own cost: a over ``Judge.score_many`` on the same samples (``ratio_to_judge``).

CPU (default): the tiny random LLaVA-1.5 of ``bench_judge.py`` at a size where compute dominates
(hidden 512, 8 layers, 576 image tokens, a ~2000-token vocabulary: prompt lengths close to
LLaVA's), built into a temporary folder. ``--device cuda``: LLaVA-1.5-7B shapes in float16.

    python benchmarks/bench_reward.py                  # B = 2, G = 8, table
    python benchmarks/bench_reward.py --b 4 --json     # last line: one JSON object
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from _llava7b import build_7b_shapes, hf_backend_on, tokenizer_folder
from _machine import add_reps_and_device
from bench_judge import (
    CAPTIONS,
    Floor,
    build_cpu_model,
    interleaved_medians,
    machine,
)

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

PROMPT = "Describe the image in one sentence."


def images(directory: Path, b: int) -> list[Path]:
    """B distinct pictures: the two example images, then mirrored and rotated copies of them."""
    from PIL import Image, ImageOps

    base = [ROOT / "examples" / "images" / "cats.jpg", ROOT / "examples" / "images" / "dog.jpg"]
    out: list[Path] = []
    for i in range(b):
        src = base[i % 2]
        if i < 2:
            out.append(src)
            continue
        img = Image.open(src).convert("RGB")
        img = ImageOps.mirror(img) if (i // 2) % 2 else img.rotate(90 * (i // 2))
        path = directory / f"image{i}.jpg"
        img.save(path, quality=90)
        out.append(path)
    return out


def bench(args: argparse.Namespace) -> dict[str, Any]:
    """Time the three variants; the row of the table."""
    import torch

    from capjudge.backends.hf import HFBackend
    from capjudge.reward import make_reward

    cuda = args.device.startswith("cuda")
    tmp = Path(tempfile.mkdtemp(prefix="capjudge-bench-reward-"))
    if cuda:
        model_dir = tokenizer_folder(tmp / "tok", args.vocab)  # processor and tokenizer only
        net = build_7b_shapes(
            model_dir,
            layers=args.layers or 32,
            vision_layers=24,
            dtype=torch.float16,
            device=args.device,
        )
        backend = hf_backend_on(
            net, model_dir, device=args.device, dtype="float16", prefix_reuse=True
        )
    else:
        model_dir = build_cpu_model(
            tmp / "tiny", args.hidden, args.layers or 8, args.heads, args.vocab
        )
        backend = HFBackend(str(model_dir), device="cpu", prefix_reuse=True)
    reward = make_reward("fleur", backend, batch_size=max(64, args.b * args.g))
    judge: Any = reward.judge
    pics = images(tmp, args.b)
    caps = [
        [CAPTIONS[(j * args.g + k) % len(CAPTIONS)] for k in range(args.g)] for j in range(args.b)
    ]
    completions = [c for group in caps for c in group]
    column = [str(p) for p in pics for _ in range(args.g)]
    n = len(completions)

    def grouped() -> list[float | None]:
        return reward(prompts=[PROMPT] * n, completions=completions, image=column)

    def one_by_one() -> list[float | None]:
        return [
            x
            for c, i in zip(completions, column)
            for x in reward(prompts=[PROMPT], completions=[c], image=[i])
        ]

    from capjudge import Sample

    samples = [Sample(i, c) for c, i in zip(completions, column)]

    def judge_alone() -> list[Any]:
        return list(judge.score_many(samples))

    floors = [Floor(backend, judge, p, group) for p, group in zip(pics, caps)]

    def floor_of(kind: str) -> Callable[[], None]:
        def run() -> None:
            for f in floors:
                getattr(f, kind)()

        return run

    # Warm-up (first-call overheads; the prefix path also learns its answer draft here).
    rewards = grouped()
    one_by_one()
    for f in floors:
        f.batched()
    stats = backend.prefix_stats
    stats.reset()
    grouped()
    prefix_passes = stats.prefix_forwards
    fns = {
        "reward": grouped,
        "judge": judge_alone,
        "one_by_one": one_by_one,
        "floor_batched": floor_of("batched"),
        "floor_one_by_one": floor_of("one_by_one"),
        "floor_packed": floor_of("packed"),
    }
    med = interleaved_medians(fns, args.reps, torch, cuda)
    t_floor = min(med["floor_batched"], med["floor_one_by_one"], med["floor_packed"])
    backend.close()
    return {
        "b": args.b,
        "g": args.g,
        "reward_s_per_completion": med["reward"] / n,
        "one_by_one_s_per_completion": med["one_by_one"] / n,
        "floor_s_per_completion": t_floor / n,
        "floor_variants_s_per_completion": {
            k.removeprefix("floor_"): v / n for k, v in med.items() if k.startswith("floor_")
        },
        "judge_s_per_completion": med["judge"] / n,
        "ratio_to_floor": med["reward"] / t_floor,
        "ratio_to_judge": med["reward"] / med["judge"],
        "speedup_vs_one_by_one": med["one_by_one"] / med["reward"],
        "prefix_passes_per_call": prefix_passes,
        "prefix_tokens": statistics.median(f.p for f in floors),
        "suffix_tokens": statistics.median(len(s) for f in floors for s in f.suffixes),
        "image_tokens": floors[0].image_tokens,
        "scored": f"{sum(r is not None for r in rewards)}/{n}",
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark and print the table (and, with ``--json``, one JSON line last)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--b", type=int, default=2, help="images per reward call (default 2)")
    ap.add_argument(
        "--g", type=int, default=8, help="completions per image (GRPO's num_generations; default 8)"
    )
    add_reps_and_device(ap)
    ap.add_argument("--hidden", type=int, default=512, help="tiny model: text hidden size")
    ap.add_argument(
        "--layers", type=int, default=None, help="text layers (tiny default 8, cuda default 32)"
    )
    ap.add_argument("--heads", type=int, default=8, help="tiny model: attention heads")
    ap.add_argument(
        "--vocab",
        type=int,
        default=2000,
        help="tokenizer vocabulary to train (2000: prompt lengths close to LLaVA's tokenizer)",
    )
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: all cores)")
    ap.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    args = ap.parse_args(argv)

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    row = bench(args)
    where = machine(args.device)
    shape = (
        "LLaVA-1.5-7B shapes, random weights, float16"
        if args.device.startswith("cuda")
        else f"tiny LLaVA, hidden {args.hidden}, {args.layers or 8} layers, {args.heads} heads, float32"
    )
    print(
        f"\nFLEUR reward, B={row['b']} images x G={row['g']} completions per call, {row['image_tokens']} image tokens, "
        f"{row['prefix_tokens']:.0f} prefix + {row['suffix_tokens']:.0f} suffix tokens; {shape}; {where}; median of {args.reps}"
    )
    print(
        "| B x G | reward s/completion (a) | one by one s/completion (b) | floor s/completion (c) | a/c | b/a | a / Judge.score_many | prefix passes per call | scored |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    print(
        f"| {row['b']} x {row['g']} | {row['reward_s_per_completion']:.4f} | {row['one_by_one_s_per_completion']:.4f} | {row['floor_s_per_completion']:.4f} | "
        f"{row['ratio_to_floor']:.2f} | {row['speedup_vs_one_by_one']:.2f} | {row['ratio_to_judge']:.2f} | {row['prefix_passes_per_call']} | {row['scored']} |"
    )
    print(f"({time.perf_counter() - t0:.0f} s in all)", file=sys.stderr)
    if args.json:
        print(
            json.dumps({**row, "device": where, "model": shape, "reps": args.reps}, default=float)
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
