"""``capjudge demo``: the whole pipeline on the bundled example images.

With ``--backend`` it uses that model. Without one it builds the tiny random LLaVA of
:mod:`capjudge.testing.tiny_llava` offline (seconds) and says loudly that its scores mean nothing:
the point is to show that everything runs (FLEUR with smoothing, VisCE2 in two steps, dual-sided
pairwise comparison, explanations, error records) on a machine with no model and no network.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from capjudge.parsing.text import shorten

T = TypeVar("T")

_TINY_WARNING = (
    "NO REAL MODEL GIVEN: this demo runs a TINY RANDOM-WEIGHT LLaVA built offline.\n"
    "Its scores are MEANINGLESS. They only show that the pipeline runs end to end.\n"
    "For real judging:  capjudge demo --backend hf:llava-hf/llava-1.5-7b-hf"
)


def examples_dir() -> Path:
    """The repository's ``examples/`` folder (next to ``src/``), else ``./examples``."""
    here = Path(__file__).resolve().parents[2] / "examples"
    return here if here.is_dir() else Path.cwd() / "examples"


def tiny_model_dir() -> Path:
    """Where the demo keeps its tiny model: ``hf:tiny-llava``'s folder, built once per version of the builder."""
    from capjudge.testing.tiny_models import tiny_path

    return tiny_path("tiny-llava")


def _ensure_tiny_model() -> Path:
    from capjudge.testing.tiny_models import ensure_tiny

    return ensure_tiny("tiny-llava")


def run_demo(backend: str | None = None, out_dir: Path = Path("out/demo"), cache_dir: str | None = None) -> int:
    """Run the demo; returns the exit code."""
    from rich.console import Console
    from rich.panel import Panel
    from rich.table import Table

    from capjudge.backends.registry import load_backend
    from capjudge.data.io import read_pairs, read_samples, write_results
    from capjudge.judges.judge import Judge

    con = Console(highlight=False)
    ex = examples_dir()
    if not (ex / "captions.jsonl").is_file():
        con.print(f"[red]examples not found at {ex}[/red]")
        return 2
    tiny = backend is None
    if tiny:
        con.print(Panel(_TINY_WARNING, title="capjudge demo", style="bold yellow"))
        with con.status("building the tiny random model (once; seconds)"):
            backend = f"hf:{_ensure_tiny_model()}"
    out_dir.mkdir(parents=True, exist_ok=True)
    samples: list[Any] = [s for s in read_samples(ex / "captions.jsonl") if isinstance(s, dict)]
    # One sample that cannot work, to show the error record: an image that is not there.
    samples.append({"id": "missing", "image": "no-such-image.jpg", "caption": "a cat.", "references": []})
    pairs = [p for p in read_pairs(ex / "pairs.jsonl") if isinstance(p, dict)]
    assert backend is not None
    con.print(f"backend: {backend}")
    with con.status(f"loading {backend}"):
        model = load_backend(backend)

    summary = Table(title="capjudge demo results" + ("  (TINY RANDOM MODEL: MEANINGLESS SCORES)" if tiny else ""))
    for col in ("method", "image", "caption", "score", "how", "status"):
        summary.add_column(col, overflow="fold")
    for method in ("fleur", "visce2", "ref-fleur"):
        judge = Judge(method, model, images_root=ex / "images", cache_dir=cache_dir)
        results = list(_counted(con, judge.score_many(samples), len(samples), f"{method}: scoring"))
        write_results(out_dir / f"{method}.jsonl", results)
        for r in results:
            how = "smoothed" if r.smoothed else ("raw" if r.ok else "-")
            summary.add_row(method, Path(r.image).name, shorten(r.caption, 48), f"{r.score:.4f}" if r.score is not None else "-", how, r.status if r.ok else f"error: {r.error}")
    con.print(summary)

    judge = Judge("gpt4v-pairwise", model, images_root=ex / "images", cache_dir=cache_dir)
    pair_results = list(_counted(con, judge.compare_many(pairs), len(pairs), "gpt4v-pairwise: comparing"))
    fleur = Judge("fleur", model, images_root=ex / "images", cache_dir=cache_dir)
    graded = list(_counted(con, fleur.compare_many(pairs, mode="grading"), len(pairs), "fleur: grading pairs"))
    # One file per comparison mode: both use the pairs' ids, and one results file holds one run.
    write_results(out_dir / "pairs.jsonl", pair_results)
    write_results(out_dir / "pairs-grading.jsonl", graded)
    table = Table(title="pairwise A/B")
    for col in ("pair", "mode", "verdict", "votes / scores", "status"):
        table.add_column(col, overflow="fold")
    for pr in pair_results + graded:
        detail = json.dumps(pr.votes) if pr.mode == "pairwise" else json.dumps([round(s, 4) if s is not None else None for s in (pr.scores or ())])
        table.add_row(str(pr.id), pr.mode, str(pr.verdict), detail, pr.status if pr.ok else f"error: {pr.error}")
    con.print(table)

    with con.status("fleur: asking the judge why (explain)"):
        explained = fleur.explain(samples[0])
    score = f"{explained.score:.4f}" if explained.score is not None else "-"
    con.print(f"[bold]explain[/bold] {samples[0]['caption']!r}: score {score}, why: {explained.explanation!r}")
    names = ["fleur.jsonl", "visce2.jsonl", "ref-fleur.jsonl", "pairs.jsonl", "pairs-grading.jsonl"]
    report = _write_report(out_dir, names, ex / "images")
    con.print(f"results written to {out_dir}/ ({', '.join(names)}); report: {report}")
    if tiny:
        con.print("[bold yellow]Reminder: tiny random model, meaningless scores. See docs/cli.md for real-model commands.[/bold yellow]")
    model.close()
    return 0


def _counted(con: Any, items: Iterable[T], total: int, label: str) -> Iterator[T]:
    """``items`` with a progress bar (label, bar, done/total, elapsed) on ``con``."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=con) as bar:
        yield from bar.track(items, total=total, description=label)


def _write_report(out_dir: Path, names: list[str], images: Path) -> Path:
    """The demo's HTML report (``report.html``): a tiny random model's results say so at the top
    (:mod:`capjudge.report.random_model`)."""
    from capjudge.report.html import write_html
    from capjudge.report.pages import results_page

    page = results_page([out_dir / n for n in names], images=images, title="capjudge demo", command="capjudge demo")
    return write_html(page, out_dir / "report.html")
