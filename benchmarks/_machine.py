"""Where a benchmark ran, in one line (shared by the benchmark scripts)."""

from __future__ import annotations

import argparse
import platform
from pathlib import Path


def add_reps_and_device(ap: argparse.ArgumentParser) -> None:
    """The ``--reps`` and ``--device`` options of the judge and reward benchmarks."""
    ap.add_argument("--reps", type=int, default=5, help="rounds; each round times every variant once, in turn; medians are reported")
    ap.add_argument("--device", default="cpu", help="cpu (tiny model) or cuda (LLaVA-1.5-7B shapes)")


def cpu_name() -> str:
    """The CPU's model name from /proc/cpuinfo (else what platform knows)."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return cpu
