"""Hardening of prompts: user templates that load files or never end are refused or bounded
(``--template-file``), and text from a caption, reference or context never becomes a special
token on a local backend."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from capjudge.cli import main

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
N_ROWS = sum(1 for line in (EXAMPLES / "captions.jsonl").read_text().splitlines() if line.strip())


def _score(tmp_path: Path, template: str, out: Path) -> int:
    tpl = tmp_path / "mine.j2"
    tpl.write_text(template)
    return main([
        "score", "--method", "vanilla", "--template-file", str(tpl), "--backend", "scripted:Rating: 70",
        "--images", str(EXAMPLES / "images"), "--input", str(EXAMPLES / "captions.jsonl"), "--out", str(out), "--no-cache", "--quiet",
    ])


# ---------------------------------------------------------------------------------------------
# Item 14: --template-file constructs refused before the run, rendering bounded during it.

REFUSED = {
    "include": ('Rate "{{ caption }}".\n{% include "other.j2" %}', "{% include %} on line 2"),
    "import": ('{% import "macros.j2" as m %}Rate "{{ caption }}".', "{% import %} on line 1"),
    "from-import": ('{% from "macros.j2" import rate %}Rate "{{ caption }}".', "{% from ... import %} on line 1"),
    "extends": ('{% extends "base.j2" %}', "{% extends %} on line 1"),
    "big-range": ('Rate "{{ caption }}".\n\n{% for i in range(10**6) %}.{% endfor %}', "range() with 1000000 items on line 3"),
    "deep-loops": (
        "{% for a in caption %}{% for b in caption %}\n{% for c in caption %}{% for d in caption %}{% endfor %}{% endfor %}{% endfor %}{% endfor %}",
        "nests {% for %} loops 4 deep on line 2",
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_template_file_construct_is_refused_before_the_run(tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str) -> None:
    template, said = REFUSED[case]
    out = tmp_path / "res.jsonl"
    assert _score(tmp_path, template, out) == 2
    err = capsys.readouterr().err
    assert "is refused" in err and said in err and "mine.j2" in err
    assert "internal error" not in err
    assert not out.exists()  # --out untouched: nothing created


@pytest.mark.parametrize(
    ("template", "said"),
    [
        ("{% for i in range(9000) %}{% for j in range(9000) %}{% endfor %}{% endfor %}{{ caption }}", "loop iterations and calls"),
        ("{% for i in range(9000) %}{% for j in range(9000) %}xxxxxxxxxxxxxxxxxxxx{% endfor %}{% endfor %}{{ caption }}", "more than 1000000 characters"),
        ('{% set ns = namespace(s=caption) %}{% for i in range(60) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}', "joined with ~"),
        ('{{ caption * 10**8 }}', "the result of *"),
        ('{{ caption|center(10**9) }}', "filter 'center'"),
        ('{{ "{:999999999}".format(caption) }}', "str.format"),
        ("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "recursed too deeply"),
    ],
)
def test_template_over_a_render_bound_is_each_rows_error(tmp_path: Path, template: str, said: str) -> None:
    out = tmp_path / "res.jsonl"
    assert _score(tmp_path, template, out) in (0, 1)  # the run ends; each row says why it failed
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == N_ROWS
    for row in rows:
        assert row["status"] == "error" and "went over a render limit" in row["error"] and said in row["error"], row["error"]


def test_template_runtime_failure_is_a_row_error_not_an_internal_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "res.jsonl"
    assert _score(tmp_path, "{{ caption }} {{ 1 / 0 }}", out) in (0, 1)
    assert "internal error" not in capsys.readouterr().err
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == N_ROWS and all("ZeroDivisionError" in r["error"] for r in rows)


def test_legitimate_template_with_loops_filters_and_ranges_still_works(tmp_path: Path) -> None:
    out = tmp_path / "res.jsonl"
    template = (
        '{% for n in range(3) %}{{ loop.index }}{% endfor %} Rate "{{ caption|trim }}" from 0 to {{ 10 * 10 }}.\n'
        "{% for r in references %}{% for w in r.split()[:2] %}{{ w ~ '.' }}{% endfor %}{% endfor %}{{ '%s!'|format('go') }}"
    )
    assert _score(tmp_path, template, out) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["status"] for r in rows] == ["ok"] * N_ROWS and all(r["score"] == 70.0 for r in rows)


def test_register_template_refuses_and_bounds_in_the_library() -> None:
    from capjudge.prompts.registry import TemplateError, register_template

    with pytest.raises(TemplateError, match=r"include %\} on line 1"):
        register_template("hardening-include", '{% include "x" %}', overwrite=True)
    tpl = register_template("hardening-loop", "{% for a in range(5000) %}{% for b in range(5000) %}{% endfor %}{% endfor %}", overwrite=True)
    with pytest.raises(TemplateError, match="render limit"):
        tpl.render()
    # Packaged templates are not sandboxed and render as before.
    from capjudge.prompts.registry import get_template

    assert "two cats" in get_template("vanilla").render(caption="two cats", references=[], context="")
