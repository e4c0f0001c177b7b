"""HTML reports (`capjudge html`, `--html` on agree / meta-eval / report / probe): self-contained,
escaped, every record shown, thumbnails embedded; and, where chromium is installed, a real headless
browser renders the page, runs its script without errors and sorts the table on a header click."""

from __future__ import annotations

import base64
import io
import json
import os
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest
from PIL import Image

from capjudge.cli import main

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
IMAGES = EXAMPLES / "images"
EVIL = '<script>alert("pwned")</script> & <img src=x onerror=alert(1)>'


def rec(i: int, score: float | None, *, image: str = "cats.jpg", caption: str | None = None, **kw) -> dict:
    r = {"id": f"s{i}", "image": image, "caption": caption or f"caption number {i}", "score": score, "raw_score": score,
         "smoothed": False, "scale": [0.0, 1.0], "status": "ok" if score is not None else "error",
         "error": None if score is not None else "no number in the answer", "raw": f"answer {i}",
         "method": "fleur", "backend": "scripted:x", "model": "scripted", "template_hash": "abc", "references": [],
         "context": None, "explanation": None, "details": {}}
    r.update(kw)
    return r


def write(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def scores_file(tmp_path: Path, name: str = "res.jsonl") -> Path:
    records = [
        rec(1, 0.25, explanation="the cats are there"),
        rec(2, 0.9, image="dog.jpg"),
        rec(3, None, raw=EVIL),
        rec(4, 0.5, caption=EVIL, image="missing.jpg"),
        rec(5, 0.05, caption="see https://example.com/a for more", image="dog.jpg"),
        rec(6, 10.0 / 3, image="corrupt.jpg"),
    ]
    (tmp_path / "corrupt.jpg").write_bytes(b"\xff\xd8\xff\xe0 not really a jpeg" + bytes(range(40)))
    return write(tmp_path / name, records)


class _Loads(HTMLParser):
    """Every src/href attribute and every <script> tag's attributes."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[tuple[str, str, str]] = []
        self.scripts: list[dict] = []
        self.text = ""

    def handle_starttag(self, tag, attrs):
        d = dict(attrs)
        if tag == "script":
            self.scripts.append(d)
        for key in ("src", "href", "srcset", "poster", "data"):
            if d.get(key):
                self.urls.append((tag, key, d[key]))

    def handle_data(self, data):
        self.text += data


def build(tmp_path: Path, *extra: str, results: list[Path] | None = None) -> tuple[int, str, Path]:
    out = tmp_path / "report.html"
    files = [str(p) for p in (results or [scores_file(tmp_path)])]
    rc = main(["html", *files, "-o", str(out), "--images", str(IMAGES), *extra])
    return rc, out.read_text(encoding="utf-8") if out.exists() else "", out


# --------------------------------------------------------------------------------- the page
def test_page_is_self_contained_and_escaped(tmp_path: Path) -> None:
    rc, page, _ = build(tmp_path)
    assert rc == 0
    p = _Loads()
    p.feed(page)
    assert not [s for s in p.scripts if "src" in s], "no external script"
    external = [u for u in p.urls if not u[2].startswith(("data:", "#"))]
    assert not external, external
    assert not re.search(r"url\((?!data:)", page), "CSS loads only data: URIs"
    assert "@import" not in page
    # the untrusted caption and raw answer are text, never markup
    assert "<script>alert" not in page and "<img src=x" not in page
    assert "&lt;script&gt;alert(&#34;pwned&#34;)&lt;/script&gt;" in page
    assert EVIL in p.text  # ... and read back as the very text
    # a URL in a caption stays plain text
    assert "see https://example.com/a for more" in p.text
    assert not any("example.com" in u[2] for u in p.urls)


def test_every_record_appears_with_its_fields(tmp_path: Path) -> None:
    rc, page, _ = build(tmp_path)
    assert rc == 0
    rows = re.findall(r'<tr data-status="(ok|error)"', page)
    assert rows == ["ok", "ok", "error", "ok", "ok", "ok"]
    for i in range(1, 7):
        assert f"<td>s{i}</td>" in page
    assert "caption number 1" in page and "the cats are there" in page and "no number in the answer" in page
    assert 'data-v="3.3333333333333335"' in page and ">3.333<" in page  # full precision to sort, 4 digits shown
    # summary header
    for fact in ("fleur", "scripted:x", "mean score (scale 0-1)", "smoothed / raw scores", "failed"):
        assert fact in page
    # sort / filter machinery
    assert 'class="samples"' in page and 'data-type="num"' in page
    assert "input.filter" in page and "select.status" in page and "function sortTable" in page


def test_thumbnails_embedded_and_unreadable_images_shown_with_the_reason(tmp_path: Path) -> None:
    # corrupt.jpg lies beside the results file, outside --images: embedded only when allowed (issue 20)
    rc, page, _ = build(tmp_path, "--allow-outside-images")
    assert rc == 0
    uris = re.findall(r"\.(t\d+) \{ background-image: url\(data:image/jpeg;base64,([A-Za-z0-9+/=]+)\); \}", page)
    assert len(uris) == 2  # cats.jpg and dog.jpg, each embedded once however many rows show it
    for _, b64 in uris:
        img = Image.open(io.BytesIO(base64.b64decode(b64)))
        assert img.format == "JPEG" and max(img.size) <= 160
        assert len(b64) < 20_000
    assert page.count('class="thumb missing"') == 2
    assert "missing.jpg" in page and "file not found" in page
    assert "corrupt.jpg" in page and "could not be decoded" in page


def test_thumbnails_turned_off_and_rows_capped(tmp_path: Path) -> None:
    rc, page, _ = build(tmp_path, "--thumb-size", "0", "--max-rows", "2")
    assert rc == 0
    assert "data:image/jpeg" not in page
    assert len(re.findall(r'<tr data-status="', page)) == 2
    assert "the first 2 of 6 records are shown" in page


def test_pairs_file_and_several_files(tmp_path: Path) -> None:
    pairs = write(tmp_path / "pairs.jsonl", [
        {"id": "p1", "image": "cats.jpg", "caption_a": "two cats", "caption_b": "a dog", "verdict": "A", "votes": ["A", "A"], "mode": "pairwise", "raw": ["Answer 1", "Answer 2"], "status": "ok", "error": None, "method": "gpt4v-pairwise", "backend": "scripted:x"},
        {"id": "p2", "image": "dog.jpg", "caption_a": "a cat", "caption_b": "a dog", "verdict": None, "votes": [], "mode": "pairwise", "raw": [], "status": "error", "error": "no verdict", "method": "gpt4v-pairwise", "backend": "scripted:x"},
    ])
    rc, page, _ = build(tmp_path, "--names", "scores", "pairs", results=[scores_file(tmp_path), pairs])
    assert rc == 0
    assert "A better / B better / tie" in page and "1 / 0 / 0" in page
    assert 'id="f2-pairs"' in page and 'id="f1-scores"' in page
    assert "Answer 2" in page and "no verdict" in page


def test_agree_option_adds_scatter_and_disagreements(tmp_path: Path) -> None:
    a = write(tmp_path / "a.jsonl", [rec(i, i / 20, image=["cats.jpg", "dog.jpg"][i % 2]) for i in range(20)])
    b = write(tmp_path / "b.jsonl", [rec(i, ((i * 7) % 20) / 20, image=["cats.jpg", "dog.jpg"][i % 2]) for i in range(20)])
    rc, page, _ = build(tmp_path, "--agree", results=[a, b])
    assert rc == 0
    assert "agreement: a vs b" in page and "Kendall tau-b (x100)" in page
    assert "largest disagreements" in page and 'id="agree1"' in page
    assert page.count("data:image/png;base64,") >= 3  # scatter + one histogram per file
    assert 'class="thumb t' in page.split('id="agree1"')[1].split("</table>")[0]  # disagreements show their images


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "not found"),
        ("image,caption\ncats.jpg,a cat\n", "holds no result records"),
        ('{"image": "cats.jpg", "caption": "an input row"}\n', "not a result record"),
        ("", "the file is empty"),
    ],
)
def test_bad_input_is_a_usage_error_naming_the_file(tmp_path: Path, capsys, content: str | None, message: str) -> None:
    path = tmp_path / "bad.jsonl"
    if content is not None:
        path.write_text(content, encoding="utf-8")
    rc = main(["html", str(path), "-o", str(tmp_path / "r.html")])
    assert rc == 2
    err = capsys.readouterr().err
    assert str(path) in err and message in err
    assert not (tmp_path / "r.html").exists()


def test_a_few_bad_lines_are_reported_not_fatal(tmp_path: Path) -> None:
    path = scores_file(tmp_path)
    path.write_text(path.read_text() + "{oops\n", encoding="utf-8")
    rc, page, _ = build(tmp_path, results=[path])
    assert rc == 0
    assert "unreadable lines" in page and "line 7: not valid JSON" in page


def test_images_folder_must_exist(tmp_path: Path, capsys) -> None:
    rc = main(["html", str(scores_file(tmp_path)), "-o", str(tmp_path / "r.html"), "--images", str(tmp_path / "nope")])
    assert rc == 2 and "is not a folder" in capsys.readouterr().err


# ------------------------------------------------------------------------ --html on commands
def test_agree_html(tmp_path: Path) -> None:
    a = write(tmp_path / "a.jsonl", [rec(i, i / 10) for i in range(10)])
    b = write(tmp_path / "b.jsonl", [rec(i, 1 - i / 10) for i in range(10)])
    out = tmp_path / "agree.html"
    assert main(["agree", str(a), str(b), "--bootstrap", "0", "--html", str(out), "--html-images", str(IMAGES)]) == 0
    page = out.read_text()
    assert "capjudge agree: a vs b" in page and "scatter plot" in page and "results of a" in page
    assert "data:image/jpeg;base64," in page


def test_meta_eval_and_report_html(tmp_path: Path) -> None:
    human = write(tmp_path / "foil.json", [])
    human.write_text(json.dumps([{"image": "cats.jpg", "original": "two cats", "foil": "two dogs"}, {"image": "dog.jpg", "original": "a dog", "foil": "a cat"}]))
    res = write(tmp_path / "res.jsonl", [rec(1, 0.9, caption="two cats"), rec(2, 0.1, caption="two dogs"), rec(3, 0.2, image="dog.jpg", caption="a dog"), rec(4, 0.7, image="dog.jpg", caption="a cat")])
    out = tmp_path / "me.html"
    assert main(["meta-eval", "--dataset", "foil", "--human", str(human), "--scores", str(res), "--html", str(out), "--html-images", str(IMAGES)]) == 0
    page = out.read_text()
    assert "capjudge meta-evaluation: foil" in page and "heatmap" in page and "data:image/png;base64," in page
    assert page.count('<tr data-status="ok"') == 4
    out2 = tmp_path / "rep.html"
    assert main(["report", "--dataset", "foil", "--human", str(human), "--scores", str(res), str(res), "--names", "x", "y", "--bootstrap", "0", "--quiet", "--html", str(out2)]) == 0
    page2 = out2.read_text()
    assert "all judges" in page2 and "results of x" in page2 and "results of y" in page2


def test_probe_html(tmp_path: Path) -> None:
    out = tmp_path / "probe.html"
    rc = main(["probe", "--method", "vanilla", "--backend", "scripted:70", "--captions", str(EXAMPLES / "captions.jsonl"), "--images", str(IMAGES),
               "--kinds", "repeat_word,inject_score", "--no-cache", "--quiet", "--html", str(out)])
    assert rc == 0
    page = out.read_text()
    assert "capjudge probe: vanilla" in page and "per perturbation kind" in page and "data:image/png;base64," in page
    assert 'id="probe1"' in page and "data:image/jpeg;base64," in page
    assert page.count("<tr data-status=") == 12  # 6 captions x 2 kinds


def test_html_path_checked_before_the_run(tmp_path: Path, capsys) -> None:
    a = write(tmp_path / "a.jsonl", [rec(i, i / 10) for i in range(4)])
    rc = main(["agree", str(a), str(a), "--bootstrap", "0", "--html", str(a)])
    assert rc == 2 and "--html" in capsys.readouterr().err
    assert a.read_text().count("\n") == 4  # the input was not overwritten


# ----------------------------------------------------------------------- a real browser
def _browser() -> str | None:
    return next((shutil.which(n) for n in ("chromium", "chromium-browser") if shutil.which(n)), None)


@pytest.fixture(scope="module")
def browser() -> str:
    exe = _browser()
    if exe is None:
        if os.environ.get("CI"):
            pytest.fail("CI is set but no chromium is on PATH: the HTML report's browser test must run in CI (.ci/run installs chromium)")
        pytest.skip("no chromium or chromium-browser on PATH (apt-get install chromium to run the browser test)")
    return exe


def _chromium(exe: str, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    profile = tmp_path / "profile"
    cmd = [exe, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions",
           "--disable-dev-shm-usage", f"--user-data-dir={profile}", "--hide-scrollbars", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=90)


def _dump(exe: str, tmp_path: Path, url: str) -> str:
    proc = _chromium(exe, tmp_path, "--virtual-time-budget=3000", "--dump-dom", url)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


class _Rows(HTMLParser):
    """The body rows of one table: per row, per cell its ``data-v`` (else its text)."""

    def __init__(self, table_id: str) -> None:
        super().__init__()
        self.table_id, self.inside, self.in_body = table_id, False, False
        self.rows: list[list[str]] = []
        self.cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        d = dict(attrs)
        if tag == "table":
            self.inside = d.get("id") == self.table_id
        elif self.inside and tag == "tbody":
            self.in_body = True
        elif self.in_body and tag == "tr":
            self.rows.append([])
        elif self.in_body and tag == "td":
            self.cell = [d["data-v"]] if "data-v" in d else []
            self.rows[-1].append("")

    def handle_data(self, data):
        if self.cell is not None:
            self.cell.append(data)

    def handle_endtag(self, tag):
        if tag == "td" and self.cell is not None:
            self.rows[-1][-1] = self.cell[0] if self.cell and self.cell[0] is not None else "".join(self.cell).strip()
            self.cell = None
        elif tag == "table":
            self.inside = self.in_body = False


def _column(dom: str, table: str, col: int) -> list[str]:
    p = _Rows(table)
    p.feed(dom)
    return [r[col] for r in p.rows]


def test_browser_renders_sorts_and_filters_without_errors(browser: str, tmp_path: Path) -> None:
    rc, _, out = build(tmp_path)
    assert rc == 0
    url = out.resolve().as_uri()

    shot = tmp_path / "shot.png"
    proc = _chromium(browser, tmp_path, f"--screenshot={shot}", "--window-size=1280,900", url)
    assert proc.returncode == 0 and shot.is_file(), proc.stderr[-2000:]
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000  # a page was drawn, not a blank canvas

    dom = _dump(browser, tmp_path, url)
    assert 'data-ready="1"' in dom, "the script ran to its end"
    assert '<pre id="js-errors" hidden=""></pre>' in dom, "no script or console error"
    assert "6 of 6 rows shown" in dom
    score_col = 4  # #, id, image, caption, score ...
    assert _column(dom, "f1-scores", score_col)[0] == "0.25"  # file order

    # two clicks on the score header: ascending, then descending (missing scores last both times)
    dom = _dump(browser, tmp_path, url + "#click=score,score")
    assert '<pre id="js-errors" hidden=""></pre>' in dom
    assert re.search(r'<th data-key="score"[^>]*aria-sort="descending"', dom)
    assert _column(dom, "f1-scores", score_col) == ["3.3333333333333335", "0.9", "0.5", "0.25", "0.05", ""]
    dom = _dump(browser, tmp_path, url + "#click=score")
    assert _column(dom, "f1-scores", score_col) == ["0.05", "0.25", "0.5", "0.9", "3.3333333333333335", ""]
    # text sort on the caption column, and the filters
    dom = _dump(browser, tmp_path, url + "#sort=id&dir=desc&status=error")
    assert "1 of 6 rows shown" in dom
    dom = _dump(browser, tmp_path, url + "#filter=dog.jpg")
    assert "2 of 6 rows shown" in dom


def test_browser_error_hook_catches_script_errors(browser: str, tmp_path: Path) -> None:
    """The check above is not vacuous: a page whose script fails shows it in #js-errors."""
    rc, page, out = build(tmp_path)
    assert rc == 0
    out.write_text(page.replace("</body>", "<script>undefinedFunction();</script></body>"), encoding="utf-8")
    dom = _dump(browser, tmp_path, out.resolve().as_uri())
    assert re.search(r'<pre id="js-errors">[^<]*undefinedFunction', dom)


def test_score_and_compare_html(tmp_path: Path) -> None:
    out, html = tmp_path / "fleur.jsonl", tmp_path / "fleur.html"
    base = ["--images", str(IMAGES), "--no-cache", "--quiet"]
    assert main(["score", "--method", "fleur", "--backend", "scripted:0.8", "--input", str(EXAMPLES / "captions.jsonl"), "--out", str(out), "--html", str(html), *base]) == 0
    page = html.read_text()
    assert page.count('<tr data-status="ok"') == 6 and page.count("background-image: url(data:image/jpeg") == 2
    assert "smoothed / raw scores" in page and "0 / 6" in page  # the scripted backend gives no log-probabilities
    pairs, phtml = tmp_path / "pairs.jsonl", tmp_path / "pairs.html"
    assert main(["compare", "--backend", "scripted:Answer 1", "--input", str(EXAMPLES / "pairs.jsonl"), "--out", str(pairs), "--html", str(phtml), *base]) == 0
    page = phtml.read_text()
    assert page.count("<tr data-status=") == 2 and "A better / B better / tie" in page


def test_score_html_is_not_the_out_file(tmp_path: Path, capsys) -> None:
    out = tmp_path / "r.jsonl"
    rc = main(["score", "--method", "fleur", "--backend", "scripted:0.8", "--images", str(IMAGES), "--input", str(EXAMPLES / "captions.jsonl"), "--out", str(out), "--html", str(out), "--no-cache", "--quiet"])
    assert rc == 2 and "--html" in capsys.readouterr().err and not out.exists()
