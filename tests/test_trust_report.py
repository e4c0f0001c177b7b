"""The trust tools' HTML report (`capjudge calibrate --html`, `capjudge cascade --html`): the
reliability diagram, the three kinds of intervals of a mean, the cascade's coverage-risk curve;
self-contained, escaped, drawn in a real headless browser where chromium is installed (and always
in CI). The curves' data (capjudge.trust.curves) against brute force."""

from __future__ import annotations

import base64
import io
import json
import re
import shutil
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from capjudge.cli.app import main
from capjudge.trust import curves
from capjudge.trust.run import cascade_report
from test_html_report import _column, _dump, browser  # noqa: F401 - browser is a fixture

EX = Path(__file__).resolve().parents[1] / "examples" / "trust"
CASCADE = ["cascade", "--human", str(EX / "human_pairs.jsonl"), "--judge", str(EX / "judge_cheap.jsonl"), "--judge", str(EX / "judge_strong.jsonl"), "--risk", "0.15", "--delta", "0.1"]
CALIBRATE_SCORES = ["calibrate", str(EX / "judge_scores.jsonl"), "--human", str(EX / "human_scores.jsonl"), "--human-scale", "1", "5"]
CALIBRATE_PAIRS = ["calibrate", str(EX / "judge_cheap.jsonl"), "--human", str(EX / "human_pairs.jsonl")]


class _Page(HTMLParser):
    """Every URL the page could load, its images, its stat tables (title -> rows of cell texts),
    the status of each sample row, and the text."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []
        self.images: list[tuple[str, str]] = []  # (src, alt)
        self.stats: dict[str, list[list[str]]] = {}
        self.statuses: list[str] = []
        self.text = ""
        self._h3: str = ""
        self._in_h3 = False
        self._table: list[list[str]] | None = None
        self._cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        d = dict(attrs)
        for key in ("src", "href", "srcset", "poster", "data", "action"):
            if d.get(key):
                self.urls.append(d[key])
        if tag == "img":
            self.images.append((d.get("src") or "", d.get("alt") or ""))
        elif tag == "h3":
            self._in_h3, self._h3 = True, ""
        elif tag == "table" and d.get("class") == "stat":
            self._table = self.stats.setdefault(self._h3.strip(), [])
        elif tag == "tr" and "data-status" in d:
            self.statuses.append(d["data-status"] or "")
        elif self._table is not None and tag == "tr":
            self._table.append([])
        elif self._table is not None and tag == "td":
            self._cell = []

    def handle_endtag(self, tag):
        if tag == "h3":
            self._in_h3 = False
        elif tag == "table" and self._table is not None:
            self._table[:] = [r for r in self._table if r]  # the header row has no <td>
            self._table = None
        elif tag == "td" and self._table is not None and self._cell is not None:
            self._table[-1].append("".join(self._cell).strip())
            self._cell = None

    def handle_data(self, data):
        self.text += data
        if self._in_h3:
            self._h3 += data
        if self._cell is not None:
            self._cell.append(data)


def _run(argv: list[str], tmp_path: Path, capsys, name: str = "report.html") -> tuple[dict, _Page, str]:
    """Run a command with --html and --format json: its JSON, the parsed page, the page's text."""
    out = tmp_path / name
    assert main([*argv, "--format", "json", "--html", str(out)]) == 0
    captured = capsys.readouterr()
    assert f"HTML report written to {out}" in captured.err
    html = out.read_text(encoding="utf-8")
    page = _Page()
    page.feed(html)
    return json.loads(captured.out.strip().splitlines()[-1]), page, html


def _assert_self_contained(page: _Page, html: str) -> None:
    assert all(u.startswith(("data:", "#")) for u in page.urls), [u[:60] for u in page.urls if not u.startswith(("data:", "#"))]
    assert not re.search(r"url\((?!data:)", html) and "@import" not in html
    assert "<script src" not in html


def _assert_figures(page: _Page, alts: list[str]) -> None:
    """The page's figures, by the start of their alt text, each a PNG that decodes."""
    assert len(page.images) == len(alts) and all(alt.startswith(want) for (_, alt), want in zip(page.images, alts)), [a for _, a in page.images]
    for src, alt in page.images:
        assert src.startswith("data:image/png;base64,"), alt
        img = Image.open(io.BytesIO(base64.b64decode(src.split(",", 1)[1])))
        assert img.format == "PNG" and img.size[0] > 300 and img.size[1] > 200, (alt, img.size)
    assert "could not be drawn" not in page.text


# ------------------------------------------------------------------------------ curves' data
def test_selective_curve_is_the_brute_force_one_at_each_distinct_confidence() -> None:
    rng = np.random.default_rng(3)
    conf = rng.choice(np.linspace(0.5, 1.0, 11), size=200)  # many ties
    correct = rng.random(200) < conf
    c = curves.selective_curve(conf, correct)
    levels = sorted(set(conf.tolist()), reverse=True)
    assert c.threshold == levels
    for t, cov, risk in zip(c.threshold, c.coverage, c.risk):
        kept = conf >= t
        assert cov == pytest.approx(kept.mean(), abs=1e-12)
        assert risk == pytest.approx((~correct[kept]).mean(), abs=1e-12)
    assert c.coverage[-1] == 1.0
    with pytest.raises(ValueError, match="one length"):
        curves.selective_curve([0.5, 0.6], [True])


def test_cascade_curve_holds_the_plan_at_its_own_target_and_each_bound_under_its_target() -> None:
    report = cascade_report([str(EX / "judge_cheap.jsonl"), str(EX / "judge_strong.jsonl")], str(EX / "human_pairs.jsonl"), alpha=0.15, delta=0.1)
    d = report.data
    points = d["coverage_risk"]
    assert [p["alpha"] for p in points] == sorted({*curves.DEFAULT_TARGETS, 0.15})
    mine = next(p for p in points if p["alpha"] == 0.15)
    c = d["calibration"]
    assert mine["thresholds"] == [j["threshold"] for j in d["judges"]]
    assert mine["coverage"] == c["coverage"] and mine["risk"] == pytest.approx(1 - c["selective_accuracy"], abs=1e-12)
    assert mine["risk_bound"] == d["guaranteed_risk"] and mine["cost_per_1000"] == c["cost_per_1000"]
    for p in points:
        assert p["risk_bound"] is None or p["risk_bound"] <= p["alpha"]
        assert (p["risk"] is None) == (p["coverage"] == 0)
    # a stricter target never keeps more of the cheap judge than a looser one (fixed-sequence testing)
    cheap = [p["thresholds"][0] for p in points]
    assert all((a is None) or (b is not None and b <= a) for a, b in zip(cheap, cheap[1:]))
    # the page's own data: each judge alone over the same labelled pairs, and one row per id
    assert set(report.detail["judge_curves"]) == {"judge_cheap", "judge_strong"}
    assert len(report.detail["rows"]) == d["calibration_n"] + d["unlabelled"]["n"]


# ----------------------------------------------------------------------------- the pages
def test_calibrate_scores_html_has_the_reliability_diagram_and_the_three_intervals(tmp_path, capsys) -> None:
    d, page, html = _run(CALIBRATE_SCORES, tmp_path, capsys)
    _assert_self_contained(page, html)
    _assert_figures(page, ["reliability diagram", "mean human score"])
    bins = page.stats["reliability bins"]
    assert [int(r[1]) for r in bins] == [b["count"] for b in d["reliability"]]
    assert f"{d['ece']:.4f}" in page.text and f"{d['after_calibration']['brier']:.4f}" in page.text
    est = page.stats["the estimates"]
    names = {"judge only": "naive", "human only": "classical", "PPI": "ppi", "PPI++": "ppi++"}
    assert [r[0] for r in est] == list(names)
    for row in est:
        e = d["mean_human_score"][names[row[0]]]
        assert row[1] == f"{e['estimate']:.3f}" and row[2] == f"[{e['low']:.3f}, {e['high']:.3f}]"
        assert row[6] == str(e["n"])
    # what the labels are worth with the judge: n * (se of the labels alone / se of PPI++)^2
    cl, pp = d["mean_human_score"]["classical"], d["mean_human_score"]["ppi++"]
    assert est[3][8] == f"{cl['n'] * (cl['se'] / pp['se']) ** 2:.0f}" and int(est[3][8]) > cl["n"]
    assert est[0][8] == "-" and est[1][8] == "-"
    assert page.statuses == ["ok"] * d["labelled"]


def test_calibrate_pairs_html_has_the_reliability_of_the_confidence(tmp_path, capsys) -> None:
    d, page, html = _run(CALIBRATE_PAIRS, tmp_path, capsys)
    _assert_self_contained(page, html)
    _assert_figures(page, ["reliability diagram"])
    assert "mean human score" not in page.text  # no mean of verdicts
    assert page.statuses.count("agrees") == round(d["agreement"] * d["labelled"])
    assert len(page.statuses) == d["labelled"]
    assert "<th>share agreeing</th>" in html and "confidence rule" in page.text


def test_cascade_html_has_the_judges_the_coverage_risk_curve_and_every_pair(tmp_path, capsys) -> None:
    d, page, html = _run(CASCADE, tmp_path, capsys)
    _assert_self_contained(page, html)
    _assert_figures(page, ["coverage against disagreement", "the cascade's coverage and cost"])
    judges = page.stats["the judges"]
    assert [r[0] for r in judges] == ["judge_cheap", "judge_strong"]
    assert [r[2] for r in judges] == [f"{j['threshold']:.4f}" for j in d["judges"]]
    targets = page.stats["the cascade at each risk target"]
    assert "0.15" in [r[0] for r in targets] or any(r[0].startswith("0.15 to") or r[0].endswith("to 0.15") for r in targets)
    assert targets[-1][0].endswith("to 0.5")  # the loosest targets give one cascade: one row
    c, u = d["calibration"], d["unlabelled"]
    assert len(page.statuses) == d["calibration_n"] + u["n"]
    decided = c["decided"]
    assert page.statuses.count("agrees") == round(c["selective_accuracy"] * decided)
    assert page.statuses.count("agrees") + page.statuses.count("disagrees") == decided
    assert page.statuses.count("abstained") == (c["n"] - c["decided"]) + (u["n"] - u["decided"])
    assert page.statuses.count("unlabelled") == u["decided"]


def test_untrusted_names_are_escaped(tmp_path, capsys) -> None:
    evil = tmp_path / "<img src=x onerror=alert(1)>.jsonl"
    shutil.copy(EX / "judge_cheap.jsonl", evil)
    argv = [a if a != str(EX / "judge_cheap.jsonl") else str(evil) for a in CASCADE]
    _, page, html = _run(argv, tmp_path, capsys)
    assert "<img src=x" not in html and "&lt;img src=x onerror=alert(1)&gt;" in html
    assert "<img src=x onerror=alert(1)> verdict" in page.text  # the name, as text, in the pairs table
    _assert_self_contained(page, html)


def test_a_figure_that_fails_is_said_in_its_place_and_the_rest_written(tmp_path, capsys, monkeypatch) -> None:
    import capjudge.trust.page as trust_page

    def broken(*_args, **_kw):
        raise RuntimeError("no canvas")

    monkeypatch.setattr(trust_page, "new_figure", broken)
    d, page, _ = _run(CASCADE, tmp_path, capsys)
    assert page.images == [] and page.text.count("the plot could not be drawn: RuntimeError: no canvas") == 2
    assert len(page.statuses) == d["calibration_n"] + d["unlabelled"]["n"]


@pytest.mark.parametrize("target", ["input", "save", "notes"])
def test_html_never_replaces_an_input_the_plan_or_a_file_capjudge_did_not_write(tmp_path, capsys, target) -> None:
    human = tmp_path / "human.jsonl"
    shutil.copy(EX / "human_pairs.jsonl", human)
    plan, notes = tmp_path / "plan.json", tmp_path / "notes.html"
    notes.write_text("<p>my notes</p>")
    html = {"input": human, "save": plan, "notes": notes}[target]
    argv = ["cascade", "--human", str(human), "--judge", str(EX / "judge_cheap.jsonl"), "--risk", "0.15", "--save", str(plan), "--html", str(html)]
    assert main(argv) == 2
    assert "--html" in capsys.readouterr().err
    assert human.read_text() == (EX / "human_pairs.jsonl").read_text() and notes.read_text() == "<p>my notes</p>"
    assert not plan.exists()  # refused before anything was written


def test_html_replaces_its_own_report(tmp_path, capsys) -> None:
    _run(CALIBRATE_PAIRS, tmp_path, capsys)
    _, page, _ = _run(CALIBRATE_SCORES, tmp_path, capsys)
    assert "mean human score" in page.text


# ----------------------------------------------------------------------- a real browser
_IMAGE_CHECK = """<script>
window.addEventListener("load", function () {
  var state = Array.prototype.map.call(document.images, function (i) { return i.complete && i.naturalWidth > 0 ? "ok" : "broken"; });
  document.documentElement.setAttribute("data-images", state.join(","));
});
</script></body>"""


def test_browser_draws_the_figures_sorts_and_filters_without_errors(browser: str, tmp_path: Path, capsys) -> None:  # noqa: F811
    d, _, html = _run(CASCADE, tmp_path, capsys, "cascade.html")
    out = tmp_path / "cascade.html"
    out.write_text(html.replace("</body>", _IMAGE_CHECK), encoding="utf-8")
    url = out.resolve().as_uri()
    dom = _dump(browser, tmp_path, url)
    assert 'data-ready="1"' in dom and '<pre id="js-errors" hidden=""></pre>' in dom
    assert 'data-images="ok,ok"' in dom, "both figures decoded and drawn"
    n = d["calibration_n"] + d["unlabelled"]["n"]
    assert f"{n} of {n} rows shown" in dom
    conf_col = 3  # id, image, judge_cheap verdict, judge_cheap confidence
    dom = _dump(browser, tmp_path, url + "#table=pairs&click=confidence0,confidence0")
    assert '<pre id="js-errors" hidden=""></pre>' in dom
    shown = [float(v) for v in _column(dom, "pairs", conf_col)]
    assert shown == sorted(shown, reverse=True) and len(shown) == n
    disagree = round((1 - d["calibration"]["selective_accuracy"]) * d["calibration"]["decided"])
    dom = _dump(browser, tmp_path, url + "#table=pairs&status=disagrees")
    assert f"{disagree} of {n} rows shown" in dom

    _, _, html = _run(CALIBRATE_SCORES, tmp_path, capsys, "calibrate.html")
    out = tmp_path / "calibrate.html"
    out.write_text(html.replace("</body>", _IMAGE_CHECK), encoding="utf-8")
    dom = _dump(browser, tmp_path, out.resolve().as_uri() + "#table=labelled&sort=gap&dir=desc")
    assert 'data-ready="1"' in dom and '<pre id="js-errors" hidden=""></pre>' in dom
    assert 'data-images="ok,ok"' in dom, "the reliability diagram and the intervals decoded and drawn"
    gaps = [float(v) for v in _column(dom, "labelled", 6)]
    assert gaps == sorted(gaps, reverse=True) and len(gaps) == 120


def test_images_folder_gives_thumbnails_from_inside_it_only(tmp_path, capsys) -> None:
    images = tmp_path / "imgs"
    images.mkdir()
    shutil.copy(Path(__file__).resolve().parents[1] / "examples" / "images" / "cats.jpg", images / "img000.jpg")
    _, page, html = _run([*CALIBRATE_PAIRS, "--images", str(images)], tmp_path, capsys)
    assert html.count("background-image: url(data:image/jpeg;base64,") == 1  # img000.jpg, embedded once
    rows_of_img000 = html.count('<span class="thumb t0"')
    assert rows_of_img000 == 4 and "file not found" in page.text  # the other images are not there
    # without --images the column holds the names: nothing is looked up
    _, page, html = _run(CALIBRATE_PAIRS, tmp_path, capsys, "plain.html")
    assert "data:image/jpeg" not in html and "file not found" not in page.text and "img000.jpg" in page.text
    assert main([*CALIBRATE_PAIRS, "--html", str(tmp_path / "x.html"), "--images", str(tmp_path / "nowhere")]) == 2
    assert "is not a folder" in capsys.readouterr().err


def test_every_record_labelled_says_the_judge_has_nothing_to_add(tmp_path, capsys) -> None:
    labelled = {json.loads(line)["id"] for line in (EX / "human_scores.jsonl").read_text().splitlines()}
    results = tmp_path / "labelled.jsonl"
    results.write_text("".join(line + "\n" for line in (EX / "judge_scores.jsonl").read_text().splitlines() if json.loads(line)["id"] in labelled))
    d, page, _ = _run(["calibrate", str(results), "--human", str(EX / "human_scores.jsonl"), "--human-scale", "1", "5"], tmp_path, capsys)
    assert d["unlabelled"] == 0 and "mean_human_score" not in d
    _assert_figures(page, ["reliability diagram"])
    assert "every record has a human label" in page.text and "the estimates" not in page.stats


def test_the_interval_parts_take_several_groups_for_other_pages() -> None:
    """intervals_figure / intervals_table are plain-dict parts (an arena's captioners, a score
    summary's): several groups in one figure, what the labels are worth from the estimates."""
    from capjudge.trust.page import effective_labels, intervals_figure, intervals_table
    from capjudge.trust.ppi import estimate_all

    rng = np.random.default_rng(5)
    groups = {}
    for name, bias in (("model-a", 0.3), ("model-b", -0.2)):
        truth = rng.normal(3, 1, 600)
        judge = truth + bias + rng.normal(0, 0.4, 600)
        est = estimate_all(truth[:100], judge[:100], judge[100:], alpha=0.1)
        groups[name] = {k: v.to_dict() for k, v in est.items()}
    fig = intervals_figure(groups, title="mean score by captioner", xlabel="score")
    assert fig.error is None and fig.uri is not None
    img = Image.open(io.BytesIO(base64.b64decode(fig.uri.split(",", 1)[1])))
    assert img.size[1] > 8 * 30  # eight rows drawn
    e = groups["model-a"]
    worth = effective_labels(e["ppi++"], e["classical"])
    assert worth == pytest.approx(100 * (e["classical"]["se"] / e["ppi++"]["se"]) ** 2, rel=1e-12) and worth > 100
    assert effective_labels(e["naive"], e["classical"]) is None and effective_labels(e["ppi"], None) is None
    table = intervals_table(e, title="model-a")
    assert [r[0] for r in table.rows] == ["judge only", "human only", "PPI", "PPI++"]
    assert table.rows[3][8] == f"{worth:.0f}" and table.rows[2][7] == "600" and table.rows[1][7] == "0"
