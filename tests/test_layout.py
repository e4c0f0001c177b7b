"""The package layout (docs/architecture.md, "Layout"): the modules that sat loose at the top of
``capjudge`` live in packages named for what they are (``core``, ``data``, ``run``); each old path
keeps working for one release, giving the same objects with a DeprecationWarning naming the new path."""

from __future__ import annotations

import ast
import importlib
import re
import sys
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "capjudge"

# Old module path -> new module path (the mapping of the move; the shims at the old paths).
MOVED = {
    "capjudge.errors": "capjudge.core.errors",
    "capjudge.redact": "capjudge.core.redact",
    "capjudge.lazyexport": "capjudge.core.lazyexport",
    "capjudge.types": "capjudge.data.types",
    "capjudge.rowtext": "capjudge.data.rowtext",
    "capjudge.io": "capjudge.data.io",
    "capjudge.images": "capjudge.data.images",
    "capjudge.imagesources": "capjudge.data.imagesources",
    "capjudge.frames": "capjudge.data.frames",
    "capjudge.recordcheck": "capjudge.data.recordcheck",
    "capjudge.runner": "capjudge.run.runner",
    "capjudge.summary": "capjudge.run.summary",
    "capjudge.preflight": "capjudge.run.preflight",
    "capjudge.inputcheck": "capjudge.run.inputcheck",
    "capjudge.outlock": "capjudge.run.outlock",
    "capjudge.outfile": "capjudge.run.outfile",
    "capjudge.outguard": "capjudge.run.outguard",
    "capjudge.usage": "capjudge.backends.usage",
    "capjudge.demo": "capjudge.cli.demo_run",
}


def _public_names(module: str) -> list[str]:
    mod = importlib.import_module(module)
    names = getattr(mod, "__all__", None) or [n for n in vars(mod) if not n.startswith("_")]
    return [n for n in names if not n.startswith("_")]


def _fresh(old: str) -> object:
    sys.modules.pop(old, None)  # a name warns once per module object: start from a new one
    return importlib.import_module(old)


@pytest.mark.parametrize("old,new", sorted(MOVED.items()))
def test_an_old_module_path_gives_the_same_objects_and_names_the_new_path(old: str, new: str) -> None:
    names = _public_names(new)
    assert names, new
    shim = _fresh(old)
    target = importlib.import_module(new)
    for name in names:
        with pytest.warns(DeprecationWarning) as caught:
            value = getattr(shim, name)
        assert value is getattr(target, name), f"{old}.{name}"
        assert f"import {name} from {new}" in str(caught[0].message), str(caught[0].message)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        getattr(shim, names[0])  # warned once
    with pytest.raises(AttributeError):
        shim.no_such_name  # type: ignore[attr-defined]  # noqa: B018


def test_from_import_of_an_old_path_works() -> None:
    _fresh("capjudge.io")
    _fresh("capjudge.errors")
    with pytest.warns(DeprecationWarning, match=r"import read_samples from capjudge\.data\.io"):
        from capjudge.io import read_samples
    from capjudge.data.io import read_samples as new

    assert read_samples is new
    with pytest.warns(DeprecationWarning, match=r"import UsageError from capjudge\.core\.errors"):
        from capjudge.errors import UsageError
    from capjudge.core.errors import UsageError as new_error

    assert UsageError is new_error


def test_the_top_level_holds_only_the_package_its_version_and_old_paths() -> None:
    loose = {p.stem for p in SRC.glob("*.py")}
    old = {m.rsplit(".", 1)[1] for m in MOVED}
    assert loose == {"__init__", "_version", "cli_errors"} | old
    for name in old:  # a shim is thin: its docstring and the forwarding __getattr__, nothing else
        tree = ast.parse((SRC / f"{name}.py").read_text(encoding="utf-8"))
        assert len(tree.body) == 3, name


def test_src_and_tests_import_the_new_paths() -> None:
    old = set(MOVED) | {"capjudge.cli_errors"}
    found = []
    for path in [*SRC.rglob("*.py"), *(ROOT / "tests").glob("*.py")]:
        if path.parent == SRC or path.name == "test_layout.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            modules = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            found += [f"{path.relative_to(ROOT)}:{node.lineno}: {m}" for m in modules if m in old]
    assert not found, "old module paths imported:\n" + "\n".join(found)


def test_the_version_stays_where_pyproject_reads_it() -> None:
    found = re.search(r'^version = \{attr = "([\w.]+)"\}', (ROOT / "pyproject.toml").read_text(encoding="utf-8"), re.M)
    assert found, "pyproject.toml: [tool.setuptools.dynamic] version"
    attr = found.group(1)
    module, _, name = attr.rpartition(".")
    import capjudge

    assert getattr(importlib.import_module(module), name) == capjudge.__version__
