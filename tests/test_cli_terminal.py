"""Names from data never drive the terminal (issue #30, item 17).

A battle file named ``"\\x1b[2J..."`` printed raw cleared the screen. What this proves: the helper
(:func:`capjudge.cli.terminal.visible`) writes control characters (C0 but tab and newline, DEL, C1,
bidirectional overrides) as escapes; the command line's printing paths use it: the CapArena
leaderboard (file names are model names), its errors, error messages (``capjudge: error: ...``),
the summary table of a run, log records, and rich consoles (table cells included).
"""

from __future__ import annotations

import io
import json
import logging
from pathlib import Path

import pytest

from capjudge.cli import main
from capjudge.cli.common import summary_table
from capjudge.cli.terminal import VisibleFormatter, make_console, visible

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
CLEAR = "\x1b[2J\x1b[H"


def test_visible_escapes_control_characters_and_keeps_lines() -> None:
    assert visible(f"a{CLEAR}b\rc\u202ed\x9be\x7f") == "a\\x1b[2J\\x1b[Hb\\x0dc\\u202ed\\x9be\\x7f"
    assert visible("two\tcats\non a bed") == "two\tcats\non a bed"
    assert visible("one\nline", newlines=False) == "one\\x0aline"
    assert visible("caf\u00e9 \u732b") == "caf\u00e9 \u732b"  # printable text is left alone


def battle(model: str) -> dict[str, str]:
    return {"img": "a.jpg", "source1": model, "source2": "GPT-4o-0806", "caption1": "two cats", "caption2": "a cat",
            "ref": "r", "ref_model": "GPT-4o-0806", "judge": "Caption 1 is better."}


def test_a_battle_file_named_with_escapes_is_printed_escaped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = f"{CLEAR}evil"
    (tmp_path / f"{model}.json").write_text(json.dumps([battle(model)]))
    (tmp_path / f"{CLEAR}broken.json").write_text("[{not json")
    assert main(["arena", "--caparena-results", str(tmp_path), "--bootstrap", "0"]) == 2
    out, err = capsys.readouterr()
    assert "\x1b" not in out and "\x1b" not in err
    assert "\\x1b[2J\\x1b[Hevil" in out and "\\x1b[2J\\x1b[Hbroken.json: not a readable JSON file" in err


def test_error_messages_from_data_are_escaped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    panel = tmp_path / f"{CLEAR}panel.json"
    panel.write_text("[{not json")
    rc = main(["score", "--method", "vanilla", "--panel", str(panel), "--input", str(EXAMPLES / "captions.jsonl"), "--out", str(tmp_path / "o.jsonl")])
    err = capsys.readouterr().err
    assert rc == 2 and "\x1b" not in err and "\\x1b[2J\\x1b[Hpanel.json: not a JSON file" in err


def test_the_summary_table_and_rich_consoles_escape_cells(tmp_path: Path) -> None:
    buf = io.StringIO()
    con = make_console(file=buf, width=200)
    con.print(summary_table("run", [(f"out {CLEAR}", f"file {CLEAR}x.jsonl")]))
    con.print(f"note: {CLEAR}")
    text = buf.getvalue()
    assert "\x1b" not in text and text.count("\\x1b[2J") == 3


def test_log_records_are_escaped(capsys: pytest.CaptureFixture[str]) -> None:
    from capjudge.cli.app import setup_logging

    undo = setup_logging(0)
    try:
        logging.getLogger("capjudge.x").warning("model %s answered", f"{CLEAR}m")
    finally:
        undo()
    err = capsys.readouterr().err
    assert "\x1b" not in err and "WARNING capjudge.x: model \\x1b[2J\\x1b[Hm answered" in err
    record = logging.LogRecord("capjudge.x", logging.WARNING, __file__, 1, "model %s answered", (f"{CLEAR}m",), None)
    assert VisibleFormatter("%(message)s").format(record) == "model \\x1b[2J\\x1b[Hm answered"


def test_a_run_with_escapes_in_its_rows_prints_no_control_character(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"id": f"{CLEAR}r1", "image": f"{CLEAR}missing.jpg", "caption": "two cats"}) + "\n")
    out = tmp_path / "out.jsonl"
    rc = main(["score", "--method", "vanilla", "--backend", "scripted:85", "--images", str(EXAMPLES / "images"), "--input", str(rows), "--out", str(out), "--no-cache"])
    captured = capsys.readouterr()
    assert rc == 6 and "\x1b" not in captured.out + captured.err  # 6: no sample succeeded (its cause printed)
    assert json.loads(out.read_text().splitlines()[0])["status"] == "error"
