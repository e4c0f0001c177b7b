"""The prefix path's interface to the HF backend: import graph, per-architecture support table,
attention layouts (no model needed)."""

from __future__ import annotations

import ast
from pathlib import Path
from types import SimpleNamespace

import pytest

from capjudge.backends.hf.adapters import (
    ADAPTERS,
    MRopeAdapter,
    adapter_for,
    attention_layout,
    prefix_reuse_support,
)

HF = Path(__file__).resolve().parents[1] / "src" / "capjudge" / "backends" / "hf"
PACKAGE = "capjudge.backends.hf"

# The architectures of the verified matrix (docs/backends.md "Verified judges").
MATRIX = ["llava", "llava_next", "llava_onevision", "qwen2_vl", "qwen2_5_vl", "qwen3_vl", "gemma3", "idefics3", "smolvlm", "internvl", "mistral3", "paligemma"]


def _imports(path: Path) -> set[str]:
    """Every capjudge.backends.hf module a file imports, wherever the import statement is
    (module level, functions, ``if TYPE_CHECKING:`` blocks)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against the package
                base = PACKAGE.rsplit(".", node.level - 1)[0] if node.level > 1 else PACKAGE
                mod = f"{base}.{node.module}" if node.module else base
            else:
                mod = node.module or ""
            names = [mod] + [f"{mod}.{a.name}" for a in node.names]
        for name in names:
            if name == PACKAGE or name.startswith(PACKAGE + "."):
                parts = name.split(".")
                found.add(".".join(parts[:4]) if len(parts) > 3 and (HF / f"{parts[3]}.py").exists() else PACKAGE)
    return found


def _graph() -> dict[str, set[str]]:
    graph = {}
    for f in sorted(HF.glob("*.py")):
        mod = PACKAGE if f.stem == "__init__" else f"{PACKAGE}.{f.stem}"
        graph[mod] = _imports(f) - {mod}
    return graph


def test_the_prefix_path_does_not_import_the_backend() -> None:
    graph = _graph()
    for mod in ("prefix", "adapters", "kv"):
        deps = graph[f"{PACKAGE}.{mod}"]
        # the package itself re-exports the backend: importing it would import backend.py
        assert f"{PACKAGE}.backend" not in deps and PACKAGE not in deps, (mod, deps)
    assert f"{PACKAGE}.prefix" in graph[f"{PACKAGE}.backend"]  # the one direction that exists


def test_the_hf_package_has_no_import_cycle() -> None:
    graph = _graph()
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for dep in graph.get(node, ()):
            if state.get(dep) == 1:
                raise AssertionError("import cycle: " + " -> ".join([*path, node, dep]))
            if dep not in state:
                visit(dep, [*path, node])
        state[node] = 2

    for mod in graph:
        if mod not in state:
            visit(mod, [])


def test_the_import_graph_check_sees_type_checking_imports(tmp_path: Path) -> None:
    """The check above would catch the cycle the package used to have."""
    f = tmp_path / "x.py"
    f.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from capjudge.backends.hf import HFBackend\ndef g():\n    from capjudge.backends.hf.backend import HFBackend\n")
    assert _imports(f) == {PACKAGE, f"{PACKAGE}.backend"}


def test_every_matrix_architecture_has_a_support_entry() -> None:
    table = prefix_reuse_support()
    assert isinstance(table, dict) and list(table) == list(ADAPTERS)
    assert set(MATRIX) <= set(table)
    supported = {m for m, s in table.items() if s.supported}
    assert supported == set(MATRIX) - {"paligemma"}
    pali = table["paligemma"]
    assert not pali.supported and "prefix-LM" in pali.reason and pali.status.startswith("fallback: ")
    assert table["qwen2_5_vl"].status == "yes" and isinstance(ADAPTERS["qwen2_5_vl"], MRopeAdapter)
    unknown = prefix_reuse_support("florence2")
    assert not isinstance(unknown, dict) and not unknown.supported and "florence2" in unknown.reason
    assert adapter_for(SimpleNamespace(model_type="florence2")).unsupported == unknown.reason


def test_gemma3_embedding_style_bidirectional_text_is_refused() -> None:
    cfg = SimpleNamespace(model_type="gemma3", text_config=SimpleNamespace(use_bidirectional_attention=True))
    assert "bidirectional" in (adapter_for(cfg).why_not(cfg) or "")
    cfg.text_config.use_bidirectional_attention = False
    assert adapter_for(cfg).why_not(cfg) is None


@pytest.mark.parametrize(
    ("config", "windows"),
    [
        (SimpleNamespace(), {"full_attention": None}),  # Llama: no window
        (SimpleNamespace(sliding_window=4096), {"sliding_attention": 4096}),  # Mistral: every layer
        (SimpleNamespace(sliding_window=4096, use_sliding_window=False, layer_types=["full_attention"] * 4), {"full_attention": None}),  # Qwen2
        (SimpleNamespace(sliding_window=512, layer_types=["sliding_attention"] * 5 + ["full_attention"]), {"sliding_attention": 512, "full_attention": None}),  # Gemma 3
    ],
)
def test_attention_layout(config: SimpleNamespace, windows: dict[str, int | None]) -> None:
    layout = attention_layout(config)
    assert layout.windows == windows
    assert layout.mapping == (len(windows) > 1)
