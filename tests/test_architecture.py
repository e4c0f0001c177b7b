"""The rules of docs/architecture.md that import-linter cannot see, checked on the source.

- no module imports another module's private (``_``-prefixed) names, or reads a private member of
  an object other than ``self``/``cls`` (a few third-party internals are allowed by name below:
  each one says why);
- no module of ``src/capjudge`` (the tiny test models of ``testing/`` aside) is over 600 lines;
- argparse lives in the ``cli`` package only;
- the layer contracts of ``pyproject.toml`` hold (import-linter, also run by ``make lint``).
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "capjudge"
MAX_LINES = 600

# Private members of other libraries' objects that capjudge reads on purpose, each with its reason.
# Each entry: (a folder or file of src/capjudge, the attribute).
ALLOWED_FOREIGN_PRIVATES = {
    # namedtuple's documented API is underscore-named (urllib's SplitResult).
    ("backends/hf/", "_replace"),
    # llama-cpp-python: Llama's context, model and batch, its logger and the chat handler's mtmd
    # set-up have no public names; the llama.cpp backend drives libmtmd directly (docs/backends.md).
    ("backends/llamacpp/", "_ctx"),
    ("backends/llamacpp/", "_model"),
    ("backends/llamacpp/", "_batch"),
    ("backends/llamacpp/", "_logger"),
    ("backends/llamacpp/", "_init_mtmd_context"),
    # transformers reads a model's attention implementation off its config at every forward and has
    # no public per-forward switch (set_attn_implementation walks every module): slot refill sets
    # the text config's for the duration of one step (backends/hf/slot_attention.py).
    ("backends/hf/slot_attention.py", "_attn_implementation"),
}


def _modules() -> list[Path]:
    return sorted(p for p in SRC.rglob("*.py") if "testing" not in p.relative_to(SRC).parts)


def _rel(path: Path) -> str:
    return path.relative_to(SRC).as_posix()


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def test_no_module_imports_private_names_of_another() -> None:
    found = []
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("capjudge"):
                found += [f"{_rel(path)}:{node.lineno}: from {node.module} import {a.name}" for a in node.names if _is_private(a.name)]
    assert not found, "private names imported across modules:\n" + "\n".join(found)


def test_no_private_member_read_off_another_object() -> None:
    found = []
    for path in _modules():
        rel = _rel(path)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.Attribute) and _is_private(node.attr)):
                continue
            owner = node.value
            if isinstance(owner, ast.Name) and owner.id in ("self", "cls"):
                continue
            if any(rel.startswith(place) and node.attr == attr for place, attr in ALLOWED_FOREIGN_PRIVATES):
                continue
            found.append(f"{rel}:{node.lineno}: {ast.unparse(node)}")
    assert not found, "private members read from outside their class or module:\n" + "\n".join(found)


def test_no_module_over_the_size_limit() -> None:
    big = [f"{_rel(p)}: {n} lines" for p in _modules() if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES]
    assert not big, f"modules over {MAX_LINES} lines:\n" + "\n".join(big)


def test_argparse_lives_in_the_cli_package() -> None:
    outside = []
    for path in _modules():
        if _rel(path).startswith("cli/"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, (ast.Import, ast.ImportFrom)) else []
            module = node.module if isinstance(node, ast.ImportFrom) else None
            if "argparse" in names or module == "argparse":
                outside.append(f"{_rel(path)}:{node.lineno}")
    assert not outside, "argparse imported outside capjudge/cli/:\n" + "\n".join(outside)


def test_import_contracts_hold() -> None:
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    if exe is None:
        pytest.skip("import-linter is not installed (pip install -e '.[dev]')")
    done = subprocess.run([exe, "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
