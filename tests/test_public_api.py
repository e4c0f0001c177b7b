"""Every `from capjudge... import ...` line the README and docs/ show users works as written, without
a DeprecationWarning (a documented path is a current path), and the public names of the package
root are the ones the README lists."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
IMPORT = re.compile(r"^\s*(from capjudge[\w.]* import [\w, ]+)\s*(?:#.*)?$")


def _documented_imports() -> list[str]:
    lines: set[str] = set()
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for line in doc.read_text(encoding="utf-8").splitlines():
            if m := IMPORT.match(line.strip("`; ")):
                lines.add(m.group(1).strip().rstrip(","))
    return sorted(lines)


def test_the_docs_show_imports() -> None:
    assert len(_documented_imports()) >= 10


@pytest.mark.parametrize("statement", _documented_imports())
def test_documented_import_works_without_deprecation(statement: str) -> None:
    done = subprocess.run([sys.executable, "-W", "error::DeprecationWarning", "-c", statement], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{statement}\n{done.stderr[-3000:]}"


def test_root_exports_what_the_readme_uses() -> None:
    import capjudge

    for name in ["Judge", "Sample", "ScoreResult", "PairResult", "load_backend", "list_methods", "get_method", "register_template", "list_presets", "get_preset", "results_frame", "agree", "__version__"]:
        assert name in capjudge.__all__
        assert getattr(capjudge, name) is not None
