"""Time ``capjudge.agree`` on two results files of N samples (default 10,000), bootstrap included.

The files are synthetic and written to a temporary folder as ``capjudge score`` writes them (full
``ScoreResult`` records): judge A like FLEUR (smoothed, 0-1, four decimals), judge B like VisCE2
(integers 0-100) correlated with A, five captions per image, a few error records. A second pair of
files holds pairwise verdicts with two-order votes. Each case is timed ``--reps`` times (reading the
files, joining, every statistic and the bootstrap at its default of 1000 resamples); the median is
printed. Target: under 5 s for 10,000 score samples.

    python benchmarks/bench_agree.py                 # 10,000 samples, 3 repetitions
    python benchmarks/bench_agree.py --n 50000 --json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _machine import cpu_name  # benchmarks/ is on sys.path when a script runs

from capjudge.data.io import write_results
from capjudge.data.types import PairResult, ScoreResult
from capjudge.metaeval.agree import agree


def _score_files(folder: Path, n: int, seed: int) -> tuple[Path, Path]:
    rng = np.random.default_rng(seed)
    quality = rng.random(n)
    fleur = np.clip(np.round(quality + rng.normal(0, 0.15, n), 4), 0, 1)
    visce2 = np.clip(np.round(100 * quality + rng.normal(0, 20, n)), 0, 100)
    failed = set(rng.choice(n, size=n // 200, replace=False).tolist())  # 0.5% error records

    def records(scores: np.ndarray, method: str, scale: tuple[float, float]) -> list[ScoreResult]:
        return [
            ScoreResult(
                image=f"images/{i // 5:06d}.jpg", caption=f"caption number {i} of image {i // 5}", score=None if i in failed else float(scores[i]),
                method=method, backend="hf:llava-hf/llava-1.5-13b-hf", model="llava-1.5-13b", template_hash="0123456789abcdef",
                raw=str(scores[i]), status="error" if i in failed else "ok", error="no number in the answer" if i in failed else None,
                id=str(i), scale=scale, references=["a reference caption", "another reference"],
            )
            for i in range(n)
        ]

    a, b = folder / "fleur.jsonl", folder / "visce2.jsonl"
    write_results(a, records(fleur, "fleur", (0.0, 1.0)))
    write_results(b, records(visce2, "visce2", (0.0, 100.0)))
    return a, b


def _pair_files(folder: Path, n: int, seed: int) -> tuple[Path, Path]:
    rng = np.random.default_rng(seed + 1)
    labels = np.array(["A", "B", "tie"])
    truth = rng.choice(3, size=n, p=[0.45, 0.45, 0.1])

    def records(noise: float, name: str) -> list[PairResult]:
        out = []
        for i in range(n):
            v1 = labels[truth[i] if rng.random() > noise else rng.integers(3)]
            v2 = labels[truth[i] if rng.random() > noise else rng.integers(3)]
            verdict = v1 if v1 == v2 else ("tie" if {v1, v2} == {"A", "B"} else (v1 if v2 == "tie" else v2))
            out.append(PairResult(image=f"images/{i:06d}.jpg", caption_a=f"first caption {i}", caption_b=f"second caption {i}", verdict=verdict,  # type: ignore[arg-type]
                                  method="gpt4v-pairwise", backend=name, model=name, template_hash="0123456789abcdef", votes=[str(v1), str(v2)], id=str(i)))
        return out

    a, b = folder / "pairs_a.jsonl", folder / "pairs_b.jsonl"
    write_results(a, records(0.2, "openai:gpt-4o"))
    write_results(b, records(0.4, "hf:llava-hf/llava-1.5-13b-hf"))
    return a, b


def _time(paths: tuple[Path, Path], reps: int, bootstrap: int) -> tuple[list[float], dict]:
    times, report = [], None
    for _ in range(reps):
        t0 = time.perf_counter()
        report = agree(list(paths), bootstrap=bootstrap, seed=0)
        times.append(time.perf_counter() - t0)
    assert report is not None
    return times, report.to_dict()


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; the last line with ``--json`` is one JSON object."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=10_000, help="samples per file (default 10000)")
    ap.add_argument("--reps", type=int, default=3, help="repetitions per case (default 3)")
    ap.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples (default 1000, agree's default)")
    ap.add_argument("--json", action="store_true", help="also print one JSON object as the last line")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        scores = _score_files(folder, args.n, 0)
        pairs = _pair_files(folder, args.n, 0)
        st, sd = _time(scores, args.reps, args.bootstrap)
        pt, pd = _time(pairs, args.reps, args.bootstrap)
    result = {
        "n": args.n,
        "bootstrap": args.bootstrap,
        "scores_s": [round(t, 3) for t in st],
        "scores_median_s": round(statistics.median(st), 3),
        "pairs_s": [round(t, 3) for t in pt],
        "pairs_median_s": round(statistics.median(pt), 3),
        "scores_joined": sd["n"],
        "kendall_tau_b": sd["kendall_tau_b"],
        "cohen_kappa": pd["cohen_kappa"],
        "target_s": 5.0,
        "machine": f"{cpu_name()}, {os.cpu_count()} cores, Python {platform.python_version()}, numpy {np.__version__}",
    }
    print(f"agree on 2 x {args.n} score records (FLEUR-like 0-1 vs VisCE2-like 0-100), bootstrap {args.bootstrap}:")
    print(f"  {', '.join(f'{t:.2f}' for t in st)} s  -> median {statistics.median(st):.2f} s (target < 5 s); joined {sd['n']}, tau-b {sd['kendall_tau_b']}")
    print(f"agree on 2 x {args.n} pairwise records, bootstrap {args.bootstrap}:")
    print(f"  {', '.join(f'{t:.2f}' for t in pt)} s  -> median {statistics.median(pt):.2f} s; kappa {pd['cohen_kappa']}")
    if args.json:
        print(json.dumps(result))
    return 0 if statistics.median(st) < 5.0 else 1


if __name__ == "__main__":
    sys.exit(main())
