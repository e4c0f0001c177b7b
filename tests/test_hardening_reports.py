"""Issue 20, item 9 for the report outputs: ``probe --out-json/--markdown/--plot``, ``choose-one
--out-json/--markdown``, ``meta-eval``/``run-benchmark --plot`` and ``report --markdown`` replace
only a report capjudge wrote (also one from an earlier version, without a marker), never a user's
file and never an input of the run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from capjudge.cli import main
from capjudge.data.types import ScoreResult
from capjudge.run.outguard import MARKDOWN_MARKER, replace_refusal

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
IMAGES = EXAMPLES / "images"
CAPTIONS = EXAMPLES / "captions.jsonl"
HUMAN = Path(__file__).parent / "data" / "metaeval" / "flickr8k_tiny.json"

NOTES_MD = "# My notes\n\n| a | b |\n|---|---|\n| 1 | 2 |\n"
NOTES_JSON = json.dumps({"todo": ["buy milk"], "method": "mine"}) + "\n"


def photo_png(path: Path) -> bytes:
    """A PNG that is not a plot (as a camera or an image editor writes one)."""
    from PIL import Image
    from PIL.PngImagePlugin import PngInfo

    info = PngInfo()
    info.add_text("Software", "GIMP 2.10")
    Image.new("RGB", (4, 4), "red").save(path, pnginfo=info)
    return path.read_bytes()


def probe(*extra: str) -> list[str]:
    return ["probe", "--backend", "scripted:0.5", "--method", "fleur", "--captions", str(CAPTIONS), "--images", str(IMAGES),
            "--no-cache", "--quiet", "--kinds", "fluency", *extra]  # fmt: skip


def choose_one(*extra: str) -> list[str]:
    return ["choose-one", "--backend", "scripted:{1: 0.5}", "--captions", str(CAPTIONS), "--images", str(IMAGES), "--no-cache", "--quiet", *extra]


def flickr_results(path: Path) -> Path:
    rows = {"A dog runs on the grass .": ("img1.jpg", 0.9), "A cat sleeps on a sofa .": ("img1.jpg", 0.1),
            "Kids playing in water .": ("img2.jpg", 0.7), "A man rides a horse .": ("img2.jpg", 0.3)}  # fmt: skip
    with path.open("w") as f:
        for caption, (image, score) in rows.items():
            r = ScoreResult(image=image, caption=caption, score=score, method="fleur", backend="hf:a", model="m", template_hash="h",
                            raw=str(score), status="ok", error=None, scale=(0.0, 1.0))  # fmt: skip
            f.write(json.dumps(r.to_dict()) + "\n")
    return path


def meta_eval(scores: Path, *extra: str) -> list[str]:
    return ["meta-eval", "--dataset", "flickr8k-expert", "--human", str(HUMAN), "--scores", str(scores), "--quiet", *extra]


def report(scores: Path, *extra: str) -> list[str]:
    return ["report", "--dataset", "flickr8k-expert", "--human", str(HUMAN), "--scores", str(scores), "--bootstrap", "0", "--quiet", *extra]


def refused(argv: list[str], path: Path, before: bytes, flag: str, capsys) -> None:
    """The command exits 2 naming ``flag`` and ``path``, and ``path`` is left byte-identical."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert flag in err and path.name in err and "the run would replace it" in err, err
    assert path.read_bytes() == before


# -- an unrelated file at a report's path is refused and kept ------------------------------------------
@pytest.mark.parametrize(
    ("flag", "name"),
    [("--out-json", "notes.json"), ("--markdown", "notes.md"), ("--plot", "photo.png")],
)
def test_probe_report_over_an_unrelated_file_is_refused(tmp_path: Path, capsys, flag: str, name: str) -> None:
    path = tmp_path / name
    before = photo_png(path) if name.endswith(".png") else (path.write_text(NOTES_JSON if name.endswith(".json") else NOTES_MD) and path.read_bytes())
    refused(probe(flag, str(path)), path, before, flag, capsys)


def test_probe_second_plot_over_an_unrelated_file_is_refused(tmp_path: Path, capsys) -> None:
    # --compare-method writes a second chart beside --plot: <stem>-<method>.png
    photo = tmp_path / "p-fleur-hardened.png"
    before = photo_png(photo)
    refused(probe("--compare-method", "fleur-hardened", "--plot", str(tmp_path / "p.png")), photo, before, "--plot", capsys)
    assert not (tmp_path / "p.png").exists()


@pytest.mark.parametrize(("flag", "name"), [("--out-json", "notes.json"), ("--markdown", "notes.md")])
def test_choose_one_report_over_an_unrelated_file_is_refused(tmp_path: Path, capsys, flag: str, name: str) -> None:
    path = tmp_path / name
    path.write_text(NOTES_JSON if name.endswith(".json") else NOTES_MD)
    refused(choose_one(flag, str(path)), path, path.read_bytes(), flag, capsys)


def test_choose_one_json_does_not_replace_a_probe_report(tmp_path: Path, capsys) -> None:
    path = tmp_path / "r.json"
    assert main(probe("--out-json", str(path))) == 0
    refused(choose_one("--out-json", str(path)), path, path.read_bytes(), "--out-json", capsys)


def test_meta_eval_plot_over_an_unrelated_file_is_refused(tmp_path: Path, capsys) -> None:
    scores = flickr_results(tmp_path / "r.jsonl")
    photo = tmp_path / "photo.png"
    refused(meta_eval(scores, "--plot", str(photo)), photo, photo_png(photo), "--plot", capsys)


def test_report_markdown_over_an_unrelated_file_is_refused(tmp_path: Path, capsys) -> None:
    scores = flickr_results(tmp_path / "r.jsonl")
    notes = tmp_path / "notes.md"
    notes.write_text(NOTES_MD)
    refused(report(scores, "--markdown", str(notes)), notes, notes.read_bytes(), "--markdown", capsys)


def test_run_benchmark_plot_over_an_unrelated_file_is_refused(tmp_path: Path, capsys) -> None:
    (tmp_path / "images" / "Flickr8k_Dataset").mkdir(parents=True)
    photo = tmp_path / "photo.png"
    argv = ["run-benchmark", "--dataset", "flickr8k-expert", "--human", str(HUMAN), "--images", str(tmp_path / "images"), "--method", "vanilla",
            "--backend", "scripted:0.5", "--no-cache", "--out", str(tmp_path / "o.jsonl"), "--plot", str(photo)]  # fmt: skip
    refused(argv, photo, photo_png(photo), "--plot", capsys)
    assert not (tmp_path / "o.jsonl").exists()  # refused before any sample was judged


def test_meta_eval_plot_or_markdown_that_is_an_input_is_refused(tmp_path: Path, capsys) -> None:
    scores = flickr_results(tmp_path / "r.jsonl")
    before = scores.read_bytes()
    for argv in (meta_eval(scores, "--plot", str(scores)), report(scores, "--markdown", str(scores))):
        assert main(argv) == 2
        assert "is the input file" in capsys.readouterr().err
        assert scores.read_bytes() == before


def test_probe_reports_that_are_inputs_are_refused(tmp_path: Path, capsys) -> None:
    captions = tmp_path / "captions.jsonl"
    captions.write_bytes(CAPTIONS.read_bytes())
    for flag in ("--out-json", "--markdown", "--plot"):
        argv = ["probe", "--backend", "scripted:0.5", "--method", "fleur", "--captions", str(captions), "--images", str(IMAGES), "--no-cache", "--quiet", flag, str(captions)]
        assert main(argv) == 2
        assert "is the input file" in capsys.readouterr().err
        assert captions.read_bytes() == CAPTIONS.read_bytes()


# -- re-running on its own outputs keeps working -----------------------------------------------------
def test_probe_and_choose_one_rerun_on_their_own_reports(tmp_path: Path) -> None:
    outs = {"--out-json": tmp_path / "r.json", "--markdown": tmp_path / "r.md", "--plot": tmp_path / "r.png"}
    argv = probe(*[a for flag, path in outs.items() for a in (flag, str(path))])
    assert main(argv) == 0
    assert outs["--markdown"].read_text().splitlines()[0] == MARKDOWN_MARKER
    assert main(argv) == 0
    c = {"--out-json": tmp_path / "c.json", "--markdown": tmp_path / "c.md"}
    argv = choose_one(*[a for flag, path in c.items() for a in (flag, str(path))])
    assert main(argv) == 0 and main(argv) == 0
    assert json.loads(c["--out-json"].read_text())["n_groups"] > 0


def test_meta_eval_and_report_rerun_on_their_own_outputs(tmp_path: Path) -> None:
    scores = flickr_results(tmp_path / "r.jsonl")
    png, md = tmp_path / "heat.png", tmp_path / "t.md"
    for _ in range(2):
        assert main(meta_eval(scores, "--plot", str(png))) == 0
        assert main(report(scores, "--markdown", str(md))) == 0
    assert md.read_text().startswith(MARKDOWN_MARKER + "\n### ")
    assert b"capjudge" in png.read_bytes()[:4096]


def test_reports_of_earlier_versions_without_a_marker_may_be_replaced(tmp_path: Path) -> None:
    from matplotlib.figure import Figure

    # Markdown as earlier versions wrote it: heading, then a table within the first lines.
    old_md = tmp_path / "old.md"
    old_md.write_text("### Probe: `fleur` on `scripted:0.5`\n\n5 captions, seed 0.\n\n| kind | family |\n|---|---|\n| `truncate` | fluency |\n")
    old_report = tmp_path / "old-report.md"
    old_report.write_text("### flickr8k-expert\n\n| judge | tau-c |\n|---|---:|\n| fleur | 50.0 |\n")
    # A plot earlier versions wrote: plain matplotlib savefig (its Software text chunk).
    old_png = tmp_path / "old.png"
    fig = Figure()
    fig.add_subplot(1, 1, 1).plot([0, 1])
    fig.savefig(old_png)
    old_json = tmp_path / "old.json"
    old_json.write_text(json.dumps({"method": "fleur", "backend": "scripted:0.5", "kinds": ["truncate"], "summaries": []}))
    assert replace_refusal(old_md, "markdown") is None and replace_refusal(old_report, "markdown") is None
    assert replace_refusal(old_png, "plot") is None
    assert replace_refusal(old_json, "probe-json") is None
    assert main(probe("--markdown", str(old_md), "--plot", str(old_png), "--out-json", str(old_json))) == 0
    assert old_md.read_text().startswith(MARKDOWN_MARKER)


def test_replace_refusal_rules_for_reports(tmp_path: Path) -> None:
    f = tmp_path / "f"
    cases = [
        (NOTES_MD, "markdown", "no capjudge generator comment"),
        ("### Title\n\njust prose, no table\n", "markdown", "no capjudge generator comment"),
        ("[1, 2]", "probe-json", "not a JSON object"),
        ("not json", "choose-one-json", "not JSON"),
        (json.dumps({"method": "fleur", "mode": "listwise"}), "choose-one-json", "no key(s) backend, n_groups, accuracy"),
        ("just text", "plot", "not a PNG written by matplotlib"),
    ]
    for text, kind, why in cases:
        f.write_text(text)
        assert why in (replace_refusal(f, kind) or ""), (text, kind)
    photo = tmp_path / "photo.png"
    photo_png(photo)
    assert replace_refusal(photo, "plot") == "it is not a PNG written by matplotlib"
    svg = tmp_path / "chart.svg"
    svg.write_text('<?xml version="1.0"?>\n<!-- Created with matplotlib (https://matplotlib.org/) -->\n<svg></svg>\n')
    assert replace_refusal(svg, "plot") is None
    svg.write_text('<?xml version="1.0"?>\n<svg><!-- drawn by hand --></svg>\n')
    assert replace_refusal(svg, "plot") == "it was not written by matplotlib"


def test_a_jpeg_plot_is_marked_and_replaced_on_a_rerun_while_a_photo_is_refused(tmp_path: Path) -> None:
    from PIL import Image

    scores = flickr_results(tmp_path / "r.jsonl")
    jpg = tmp_path / "heat.jpg"
    for _ in range(2):  # the second run replaces the first run's plot
        assert main(meta_eval(scores, "--plot", str(jpg))) == 0
    assert b"capjudge" in jpg.read_bytes()[:4096]
    photo = tmp_path / "photo.jpg"
    Image.new("RGB", (32, 32), (10, 200, 30)).save(photo)
    before = photo.read_bytes()
    assert replace_refusal(photo, "plot") == "it was not written by matplotlib"
    assert main(meta_eval(scores, "--plot", str(photo))) == 2
    assert photo.read_bytes() == before
