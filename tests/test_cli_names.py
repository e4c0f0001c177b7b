"""One option name per concept across commands (issue 29, item 12): ``--input``, ``--images``,
``--format``, ``--html``; the old names (``probe --captions``, ``--json``, ``--html-images``,
``html --out``) still work for a release, hidden from ``--help``, with a note on stderr."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import pytest

from capjudge.cli import main
from capjudge.cli.app import build_parser

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
IMAGES = EXAMPLES / "images"
CAPTIONS = EXAMPLES / "captions.jsonl"


def _sub(*path: str) -> argparse.ArgumentParser:
    parser = build_parser()
    for name in path:
        action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = action.choices[name]
    return parser


def _help(*path: str) -> str:
    return _sub(*path).format_help()


def _options(text: str) -> set[str]:
    return set(re.findall(r"(?<![\w-])(--?[a-z][\w-]*)", text))


# (command path, canonical option, old name)
RENAMED = [
    (("probe",), "--input", "--captions"),
    (("choose-one",), "--input", "--captions"),
    (("explain",), "--format", "--json"),
    (("methods",), "--format", "--json"),
    (("judges",), "--format", "--json"),
    (("cache", "stats"), "--format", "--json"),
    (("batch", "status"), "--format", "--json"),
    (("agree",), "--images", "--html-images"),
    (("meta-eval",), "--images", "--html-images"),
    (("report",), "--images", "--html-images"),
    (("html",), "--html", "--out"),
]


@pytest.mark.parametrize(("path", "new", "old"), RENAMED, ids=["-".join(p) + old for p, _, old in RENAMED])
def test_help_shows_the_canonical_name_only(path: tuple[str, ...], new: str, old: str) -> None:
    opts = _options(_help(*path))
    assert new in opts
    assert old not in opts


def test_the_same_concept_has_the_same_name_on_every_command() -> None:
    """Every command that reads rows takes --input; every command that prints JSON takes --format;
    every command with an HTML report of images takes --images; no --json, --captions or
    --html-images anywhere in --help."""
    parser = build_parser()
    subs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, sub in subs.choices.items():
        text = sub.format_help()
        nested = [a for a in sub._actions if isinstance(a, argparse._SubParsersAction)]
        texts = [text] + [p.format_help() for a in nested for p in a.choices.values()]
        for t in texts:
            opts = _options(t)
            assert not opts & {"--json", "--captions", "--html-images"}, (name, opts & {"--json", "--captions", "--html-images"})
            if "--html" in opts and name != "html":
                assert "--images" in opts, name


def test_html_o_is_short_for_html_and_out_is_a_hidden_alias() -> None:
    help_text = _help("html")
    assert re.search(r"-o REPORT\.html, --html REPORT\.html", help_text)
    for flag in ("-o", "--html", "--out"):
        args = build_parser().parse_args(["html", "r.jsonl", flag, "x.html"])
        assert args.html == "x.html"


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (["probe", "--backend", "scripted:1", "--method", "vanilla", "--captions", "c.jsonl"], ["probe", "--backend", "scripted:1", "--method", "vanilla", "--input", "c.jsonl"]),
        (["choose-one", "--backend", "scripted:1", "--captions", "c.jsonl"], ["choose-one", "--backend", "scripted:1", "--input", "c.jsonl"]),
        (["explain", "--backend", "scripted:1", "--json"], ["explain", "--backend", "scripted:1", "--format", "json"]),
        (["methods", "--json"], ["methods", "--format", "json"]),
        (["cache", "stats", "--json"], ["cache", "stats", "--format", "json"]),
        (["agree", "a.jsonl", "b.jsonl", "--html-images", "imgs"], ["agree", "a.jsonl", "b.jsonl", "--images", "imgs"]),
        (["meta-eval", "--dataset", "foil", "--human", "h", "--scores", "s", "--html-images", "imgs"], ["meta-eval", "--dataset", "foil", "--human", "h", "--scores", "s", "--images", "imgs"]),
        (["html", "r.jsonl", "--out", "x.html"], ["html", "r.jsonl", "-o", "x.html"]),
    ],
)
def test_an_old_name_parses_as_the_new_one_and_says_so(old: list[str], new: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    from capjudge.cli import aliases

    aliases._NOTED.clear()
    parsed_old = vars(build_parser().parse_args(old))
    err = capsys.readouterr().err
    assert vars(build_parser().parse_args(new)) == parsed_old
    assert "is deprecated, use" in err and old[[i for i, a in enumerate(old) if a.startswith("-") and a not in new][0]] in err


def test_a_required_option_asks_for_its_new_name(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["probe", "--backend", "scripted:1", "--method", "vanilla"])
    err = capsys.readouterr().err
    assert "--input" in err and "--captions" not in err


def test_old_and_new_names_give_the_same_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = ["explain", "--backend", "scripted:0.7", "--images", str(IMAGES), "--image", "cats.jpg", "--caption", "two cats", "--no-cache"]
    assert main([*base, "--json"]) == 0
    old = capsys.readouterr().out
    assert main([*base, "--format", "json"]) == 0
    assert capsys.readouterr().out == old and json.loads(old)["score"] == 0.7


def test_probe_takes_input_and_prints_its_report_in_the_format_asked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = ["probe", "--backend", "scripted:0.5", "--method", "fleur", "--input", str(CAPTIONS), "--images", str(IMAGES), "--kinds", "truncate", "--no-cache"]
    assert main([*base, "--format", "json", "--out-json", str(tmp_path / "p.json")]) == 0
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert printed == json.loads((tmp_path / "p.json").read_text())
    assert main([*base, "--format", "markdown"]) == 0
    assert "| kind | family |" in capsys.readouterr().out
    assert main(base) == 0  # table: piped here, so the Markdown text, as before
    assert "| kind | family |" in capsys.readouterr().out


def test_choose_one_input_takes_groups_or_captions(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    groups = tmp_path / "groups.jsonl"
    groups.write_text(json.dumps({"id": "g1", "image": "cats.jpg", "true": ["two cats"], "flawed": ["two cats cats", "a dog"]}) + "\n")
    base = ["choose-one", "--backend", "scripted:0.5", "--method", "fleur", "--images", str(IMAGES), "--no-cache", "--format", "json"]
    assert main([*base, "--input", str(groups)]) == 0
    assert json.loads(capsys.readouterr().out)["n_groups"] == 1
    assert main([*base, "--input", str(CAPTIONS)]) == 0  # captions: the flawed ones made from them
    assert json.loads(capsys.readouterr().out)["n_groups"] == 2


def test_agree_images_embeds_thumbnails(tmp_path: Path) -> None:
    rows = [{"id": str(i), "image": "cats.jpg", "caption": f"c{i}", "score": i / 10, "status": "ok", "method": "vanilla", "backend": "scripted:x", "scale": [0, 1]} for i in range(5)]
    for name, sign in (("a", 1), ("b", -1)):
        (tmp_path / f"{name}.jsonl").write_text("\n".join(json.dumps({**r, "score": (sign * r["score"]) % 1}) for r in rows) + "\n")
    out = tmp_path / "agree.html"
    assert main(["agree", str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl"), "--bootstrap", "0", "--html", str(out), "--images", str(IMAGES)]) == 0
    assert "data:image/jpeg;base64," in out.read_text()
