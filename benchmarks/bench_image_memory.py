"""Peak memory of a run over twelve decompression-bomb-sized PNGs (issue 20, item 4).

Twelve 65000x2700 bilevel PNGs (175.5 megapixels each, under Pillow's bomb limit, ~27 KB on disk)
are scored by ``capjudge score --backend scripted:0.8 --method fleur --batch-size 1`` in a fresh
process; the benchmark reports that process's peak resident set (``getrusage(RUSAGE_CHILDREN)
.ru_maxrss``) and its wall time, and exits 1 when the peak reaches ``--limit-gb`` (default 2.5).
Before the pixel budget, each picture was kept decoded at full size (526 MB in RGB) and the run
peaked at several GB; now each is downscaled at load (``--max-image-pixels``, default 40 Mpx) and
the image memo is bounded by bytes.

    .venv/bin/python benchmarks/bench_image_memory.py [--images 12] [--json] [--src OTHER/src]

``--src`` runs another checkout's ``src`` (e.g. the code before a change, from ``git archive``)
with the same files, for a before/after figure; ``--extra`` passes further options to ``score``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _machine import cpu_name  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
WIDTH, HEIGHT = 65000, 2700


def make_images(folder: Path, n: int) -> list[str]:
    """``n`` distinct WIDTHxHEIGHT bilevel PNGs (a white field with one black square each)."""
    import warnings

    from PIL import Image

    names = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Pillow's DecompressionBombWarning: this is the point
        for i in range(n):
            img = Image.new("1", (WIDTH, HEIGHT), 1)
            img.paste(0, (1000 * i, 100, 1000 * i + 200, 300))
            name = f"bomb{i:02d}.png"
            img.save(folder / name, optimize=True)
            names.append(name)
    return names


def run(src: Path, folder: Path, names: list[str], extra: list[str]) -> dict[str, object]:
    """Score every image once in a child process; its peak RSS, wall time and record statuses."""
    inp = folder / "captions.jsonl"
    inp.write_text("".join(json.dumps({"image": n, "caption": f"a white field {i}", "id": f"b{i}"}) + "\n" for i, n in enumerate(names)))
    out = folder / "results.jsonl"
    out.unlink(missing_ok=True)
    env = dict(os.environ, PYTHONPATH=str(src), PYTHONWARNINGS="ignore")
    cmd = [sys.executable, "-m", "capjudge.cli", "score", "--backend", "scripted:0.8", "--method", "fleur",
           "--input", str(inp), "--images", str(folder), "--out", str(out), "--batch-size", "1", "--no-cache", "--quiet", *extra]  # fmt: skip
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    peak_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # Linux: kilobytes
    records = [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []
    return {
        "peak_rss_gb": round(peak_kb * 1024 / 1e9, 3),
        "wall_s": round(wall, 1),
        "exit_code": proc.returncode,
        "ok": sum(r.get("status") == "ok" for r in records),
        "errors": sum(r.get("status") == "error" for r in records),
        "downscaled": sum("image_downscaled" in (r.get("details") or {}) for r in records),
        "stderr_tail": proc.stderr[-400:] if proc.returncode else "",
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", type=int, default=12, help="how many bomb PNGs (default 12)")
    ap.add_argument("--limit-gb", type=float, default=2.5, help="fail when the peak RSS reaches this many GB (default 2.5)")
    ap.add_argument("--src", type=Path, default=ROOT / "src", help="the capjudge source folder to run (default: this checkout's)")
    ap.add_argument("--extra", nargs=argparse.REMAINDER, default=[], help="further options for capjudge score")
    ap.add_argument("--json", action="store_true", help="last line: one JSON object")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="capjudge-bench-images-") as tmp:
        folder = Path(tmp)
        names = make_images(folder, args.images)
        size_kb = sum((folder / n).stat().st_size for n in names) / len(names) / 1024
        result = run(args.src, folder, names, args.extra)
    result.update({"images": args.images, "size": f"{WIDTH}x{HEIGHT}", "png_kb": round(size_kb, 1), "limit_gb": args.limit_gb, "src": str(args.src), "machine": cpu_name()})
    passed = result["exit_code"] == 0 and float(result["peak_rss_gb"]) < args.limit_gb  # type: ignore[arg-type]
    result["passed"] = passed
    print(f"{args.images} PNGs of {WIDTH}x{HEIGHT} (~{size_kb:.0f} KB each), capjudge score --batch-size 1 on scripted:")
    print(f"  peak RSS {result['peak_rss_gb']} GB (limit {args.limit_gb} GB), {result['wall_s']} s, exit {result['exit_code']}, "
          f"{result['ok']} ok / {result['errors']} errors, {result['downscaled']} downscaled: {'PASS' if passed else 'FAIL'}")  # fmt: skip
    if result["stderr_tail"]:
        print(result["stderr_tail"], file=sys.stderr)
    if args.json:
        print(json.dumps(result))
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
