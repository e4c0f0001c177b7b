"""How long ``capjudge --help`` and every subcommand's ``--help`` take, in fresh processes.

Each command runs ``--reps`` times (default 5) in a new interpreter (``python -m capjudge.cli``,
or the installed ``capjudge`` script with ``--script``); the median wall time is printed per
command, with the slowest module imports of the slowest command (``-X importtime``). The target is
under 0.3 s on the 2-core build machine: building the parser imports no heavy module (numpy, scipy,
pandas, matplotlib, torch, transformers, openai, httpx; ``tests/test_startup.py`` checks which).

    .venv/bin/python benchmarks/bench_startup.py [--reps 5] [--json] [--script]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def subcommands() -> list[str]:
    """The subcommands the parser registers."""
    sys.path.insert(0, str(ROOT / "src"))
    from capjudge.cli import build_parser

    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))  # noqa: SLF001
    return sorted(action.choices)


def command(script: bool) -> list[str]:
    if script:
        exe = shutil.which("capjudge") or str(Path(sys.executable).parent / "capjudge")
        return [exe]
    return [sys.executable, "-m", "capjudge.cli"]


def env() -> dict[str, str]:
    e = dict(os.environ)
    e["PYTHONPATH"] = str(ROOT / "src") + (os.pathsep + e["PYTHONPATH"] if e.get("PYTHONPATH") else "")
    return e


def time_once(args: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, env=env())
    return time.perf_counter() - t0


def slowest_imports(args: list[str], n: int = 8) -> list[tuple[float, str]]:
    """The ``n`` largest cumulative import times (seconds, module) of one run."""
    proc = subprocess.run([sys.executable, "-X", "importtime", *args[1:]] if args[0] == sys.executable else args, capture_output=True, text=True, env=env())
    rows = []
    for line in proc.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            _, cumulative, name = line.split("|")
            try:
                rows.append((int(cumulative) / 1e6, name.strip()))
            except ValueError:
                continue
    return sorted(rows, reverse=True)[:n]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--script", action="store_true", help="time the installed `capjudge` script instead of python -m")
    opts = ap.parse_args()
    base = command(opts.script)
    results: dict[str, float] = {}
    for sub in ["", *subcommands()]:
        args = [*base, *([sub] if sub else []), "--help"]
        time_once(args)  # warm the file cache
        results[sub or "(top level)"] = statistics.median(time_once(args) for _ in range(opts.reps))
    worst = max(results, key=lambda k: results[k])
    if opts.json:
        print(json.dumps({"median_s": results, "slowest": worst, "python": sys.version.split()[0]}))
        return
    for name, seconds in results.items():
        print(f"capjudge {name} --help: {seconds:.3f} s")
    print(f"\nslowest: {worst} ({results[worst]:.3f} s); largest imports of `capjudge --help`:")
    for seconds, module in slowest_imports([*base, "--help"]):
        print(f"  {seconds:.3f} s  {module}")


if __name__ == "__main__":
    main()
