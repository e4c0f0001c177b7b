"""`capjudge --help` and every subcommand's `--help` import no heavy module (a deterministic test of
what is imported, not of time: benchmarks/bench_startup.py measures the time)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
HEAVY = ("scipy", "pandas", "matplotlib", "torch", "transformers", "numpy", "openai", "httpx", "PIL", "jinja2", "llama_cpp", "diskcache", "tenacity", "rich")

SCRIPT = """
import argparse, contextlib, io, json, sys
from capjudge.cli import build_parser, main
parser = build_parser()
subs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
for argv in [["--help"], *[[name, "--help"] for name in subs]]:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
        main(argv)
print(json.dumps({"subcommands": sorted(subs), "modules": sorted(sys.modules)}))
"""


def test_help_imports_no_heavy_module() -> None:
    env = {**os.environ, "PYTHONPATH": str(SRC) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, check=True, timeout=120)
    data = json.loads(proc.stdout.strip().splitlines()[-1])
    assert {"score", "compare", "report", "meta-eval", "probe", "cache"} <= set(data["subcommands"])
    loaded = {m.split(".")[0] for m in data["modules"]}
    assert not loaded & set(HEAVY), f"--help imported {sorted(loaded & set(HEAVY))}"


def test_parser_tie_rules_match_the_statistics() -> None:
    from capjudge.cli.metaeval import TIE_CHOICES
    from capjudge.metaeval.stats import TIE_RULES

    assert TIE_CHOICES == TIE_RULES


def test_lazy_metaeval_package_keeps_its_api() -> None:
    import capjudge.metaeval as me

    assert set(me.__all__) <= set(dir(me))
    assert callable(me.evaluate) and me.DATASET_NAMES and me.stats.kendall_tau_c
