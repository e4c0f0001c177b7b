"""io.read_jsonl, the one JSONL reader: every line's value or why not, never raising for a line."""

from __future__ import annotations

from pathlib import Path

import pytest

from capjudge.data.io import JsonLine, iter_jsonl, read_jsonl
from capjudge.metaeval.datasets import DatasetError, _read_jsonl


def test_each_line_is_parsed_on_its_own(tmp_path: Path) -> None:
    p = tmp_path / "x.jsonl"
    p.write_bytes(b'\xef\xbb\xbf{"a": 1}\n\n[1\n{"b": "\xff"}\r\n{"c"')
    lines = list(read_jsonl(p))
    assert [ln.number for ln in lines] == [1, 3, 4, 5]
    assert lines[0] == JsonLine(1, '{"a": 1}', {"a": 1})
    assert lines[1].error == "Expecting ',' delimiter" and lines[1].json_error is not None and lines[1].value is None
    assert lines[2].error is not None and lines[2].error.startswith("not valid UTF-8") and lines[2].json_error is None
    assert [ln.complete for ln in lines] == [True, True, True, False]  # the last line has no line end
    assert [t[:3] for t in iter_jsonl(p)] == [(ln.number, ln.value, ln.error) for ln in lines]


def test_a_data_set_file_names_the_bad_line(tmp_path: Path) -> None:
    p = tmp_path / "ann.jsonl"
    p.write_text('{"a": 1}\n{oops\n', encoding="utf-8")
    with pytest.raises(DatasetError, match=r"ann\.jsonl:2: not valid JSON \(Expecting property name"):
        _read_jsonl(p)


# -- a line nested too deeply (issue #30, item 16)


def test_an_input_line_nested_too_deeply_is_that_rows_error(tmp_path: Path) -> None:
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"image": "cats.jpg", "caption": "two cats"}\n{"image": "cats.jpg", "caption": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
    lines = list(read_jsonl(rows))
    assert lines[0].error is None and lines[1].error is not None and "nested too deeply" in lines[1].error

