"""A thinking model's reasoning where results are read (issue 22): the HTML report shows a record's
``details.reasoning`` folded (escaped, as stored: truncated where the record truncated it) and its
``reasoning_tokens``; ``capjudge.results_frame`` has a ``reasoning_tokens`` column (NaN where absent)."""

from __future__ import annotations

import json
import math
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

from capjudge import results_frame
from capjudge.cli import main
from capjudge.judges.reasoning import REASONING_CHARS, TRUNCATED

ROOT = Path(__file__).resolve().parents[1]
IMAGES = ROOT / "examples" / "images"
EVIL = '<script>alert("think")</script> & <b>bold</b>'


def rec(i: int, score: float, **details: Any) -> dict[str, Any]:
    return {"id": f"s{i}", "image": "cats.jpg", "caption": f"caption {i}", "score": score, "raw_score": score, "smoothed": False,
            "scale": [0.0, 100.0], "status": "ok", "error": None, "raw": f"Score: {score:g}", "method": "vanilla",
            "backend": "scripted:x", "model": "scripted", "template_hash": "abc", "references": [], "context": None,
            "explanation": None, "details": {"cached": False, **details}}


def write(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


class _Text(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.text = ""

    def handle_data(self, data: str) -> None:
        self.text += data


def page_of(tmp_path: Path, *files: Path) -> str:
    out = tmp_path / "report.html"
    assert main(["html", *map(str, files), "-o", str(out), "--images", str(IMAGES), "--thumb-size", "0"]) == 0
    return out.read_text(encoding="utf-8")


def test_html_shows_the_reasoning_folded_escaped_and_its_tokens(tmp_path: Path) -> None:
    long = "x" * (REASONING_CHARS - len(TRUNCATED)) + TRUNCATED  # as reasoning_details stores a long one
    results = write(tmp_path / "res.jsonl", [
        rec(1, 85, reasoning=f"Is it 85? {EVIL}", reasoning_tokens=412),
        rec(2, 40, reasoning=long, reasoning_chars=50_000, usage={"prompt_tokens": 10, "completion_tokens": 900, "reasoning_tokens": 870}),
        rec(3, 70),
    ])
    page = page_of(tmp_path, results)
    assert '<th data-key="reasoning"' in page and '<th data-key="reasoning_tokens"' in page
    folded = re.findall(r'<details class="folded"><summary>(\d+) characters</summary><div class="long">(.*?)</div></details>', page, re.S)
    assert [int(n) for n, _ in folded] == [len(f"Is it 85? {EVIL}"), len(long)]
    assert "<script>alert(" not in page and "&lt;script&gt;alert(&#34;think&#34;)&lt;/script&gt;" in page
    parser = _Text()
    parser.feed(page)
    assert f"Is it 85? {EVIL}" in parser.text and long in parser.text  # read back as the very text, cut as stored
    assert 'data-v="412"' in page and 'data-v="870"' in page


def test_html_without_reasoning_has_no_reasoning_columns(tmp_path: Path) -> None:
    page = page_of(tmp_path, write(tmp_path / "plain.jsonl", [rec(1, 85), rec(2, 40)]))
    assert 'data-key="reasoning' not in page and "folded" not in page.split("</style>")[-1]


def test_html_pair_records_show_both_orders_reasoning(tmp_path: Path) -> None:
    pairs = write(tmp_path / "pairs.jsonl", [
        {"id": "p1", "image": "cats.jpg", "caption_a": "two cats", "caption_b": "a dog", "verdict": "A", "votes": ["A", "A"], "mode": "pairwise",
         "raw": ["Answer 1", "Answer 2"], "status": "ok", "error": None, "method": "gpt4v-pairwise", "backend": "scripted:x",
         "details": {"reasoning": ["first order thoughts", "second order thoughts"], "reasoning_tokens": [30, 12]}},
    ])
    page = page_of(tmp_path, pairs)
    assert "first order thoughts" in page and "second order thoughts" in page and 'data-v="42"' in page


def test_results_frame_reasoning_tokens_column(tmp_path: Path) -> None:
    path = write(tmp_path / "res.jsonl", [
        rec(1, 85, reasoning="r", reasoning_tokens=412),
        rec(2, 40, usage={"prompt_tokens": 10, "completion_tokens": 900, "reasoning_tokens": 870}),
        rec(3, 70, usage={"prompt_tokens": 10, "completion_tokens": 5}),
    ])
    df = results_frame(path)
    got = list(df["reasoning_tokens"])
    assert got[:2] == [412, 870] and math.isnan(got[2])
    for column in ("prompt_tokens", "completion_tokens", "cached", "scale_low", "scale_high", "details"):
        assert column in df.columns  # the existing columns stay
