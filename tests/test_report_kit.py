"""The report kit knows no feature: its modules import neither metaeval nor the features, the
features' pages live with them, and the old names still work (with a DeprecationWarning)."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from capjudge.metaeval.agree_page import agree_lead
from capjudge.report.pages import results_page


def _write(path: Path, scores: list[float]) -> Path:
    rows = [{"id": f"s{i}", "image": "cats.jpg", "caption": f"caption {i}", "score": s, "scale": [0.0, 1.0], "status": "ok", "method": "fleur", "backend": "scripted:x"} for i, s in enumerate(scores)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_the_kit_imports_no_feature() -> None:
    code = (
        "import sys\n"
        "import capjudge.report.pages, capjudge.report.html, capjudge.report.figures, capjudge.report.records, capjudge.report.numbers\n"
        "print(sorted(m for m in sys.modules if m.split('.')[1:2] and m.split('.')[1] in ('metaeval', 'probes', 'arena', 'parity', 'distributed', 'cli')))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("old", "name", "new"),
    [
        ("capjudge.report.pages", "agree_page", "capjudge.metaeval.agree_page"),
        ("capjudge.report.pages", "metaeval_page", "capjudge.metaeval.pages"),
        ("capjudge.report.pages", "probe_page", "capjudge.probes.page"),
        ("capjudge.report.figures", "heatmap", "capjudge.metaeval.pages"),
        ("capjudge.report.figures", "agree_scatter", "capjudge.metaeval.agree_page"),
        ("capjudge.report.figures", "probe_bars", "capjudge.probes.page"),
    ],
)
def test_moved_names_still_import_and_warn(old: str, name: str, new: str) -> None:
    import importlib

    module = importlib.import_module(old)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        value = getattr(module, name)
    assert value is getattr(importlib.import_module(new), name)
    assert any(issubclass(w.category, DeprecationWarning) and new in str(w.message) and name in str(w.message) for w in caught)
    with pytest.raises(AttributeError):
        module.no_such_name  # noqa: B018 - the attribute access is the test


def _body(html: str) -> str:
    return "\n".join(line for line in html.splitlines() if "UTC" not in line)  # the generation time


def test_lead_sections_come_before_the_files(tmp_path: Path) -> None:
    a = _write(tmp_path / "a.jsonl", [i / 10 for i in range(10)])
    b = _write(tmp_path / "b.jsonl", [((i * 7) % 10) / 10 for i in range(10)])
    page = results_page([a, b], lead=agree_lead([a, b]))
    assert [s.title for s in page.sections][:2] == ["judges compared", "agreement: a vs b"]
    assert [s.title for s in page.sections][2:] == ["a.jsonl", "b.jsonl"]
    assert [s.title for s in results_page([a], lead=agree_lead([a])).sections] == ["a.jsonl"]  # one file: nothing to compare
