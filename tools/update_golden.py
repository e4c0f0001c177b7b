"""Regenerate the golden results files of tests/test_golden.py (tests/data/golden/*.json).

Run it ONLY when a change of results is intended (a new record field, a parser fix, a new prompt
wording) and say in the commit why the results changed; a refactoring must leave them as they are.
Review the diff of tests/data/golden/ before committing it.

    PYTHONPATH=src python tools/update_golden.py            # every case
    PYTHONPATH=src python tools/update_golden.py -k arena   # some (pytest's -k expression)
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str]) -> int:
    """Run tests/test_golden.py with CAPJUDGE_UPDATE_GOLDEN=1 (it writes instead of comparing)."""
    env = {**os.environ, "CAPJUDGE_UPDATE_GOLDEN": "1"}
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(ROOT / "tests" / "test_golden.py"), *argv]
    return subprocess.call(cmd, cwd=ROOT, env=env)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
