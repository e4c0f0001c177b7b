"""Hostile input rows through the CLI: a bad byte, a lone surrogate or a caption that is not text
costs its row only (an error record naming the line and the cause); a byte-order mark is a BOM;
a file with no rows or a repeated id is refused before the run (exit 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from capjudge.cli import main

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
IMAGES = str(EXAMPLES / "images")


def rows() -> list[dict]:
    return [json.loads(x) for x in (EXAMPLES / "captions.jsonl").read_text(encoding="utf-8").splitlines() if x.strip()]


def records(path: Path) -> list[dict]:
    # Strict UTF-8 and strict JSON: a surrogate written raw, or a NaN, fails here.
    text = path.read_bytes().decode("utf-8")
    return [json.loads(line, parse_constant=lambda c: pytest.fail(f"{c} in the results file")) for line in text.splitlines() if line.strip()]


def score(inp: Path, out: Path, *extra: str) -> int:
    return main(["score", "--method", "vanilla", "--backend", "scripted:The score is 73 out of 100.", "--images", IMAGES, "--input", str(inp), "--out", str(out), "--no-cache", "--quiet", *extra])


def compare(inp: Path, out: Path, *extra: str) -> int:
    return main(["compare", "--backend", "scripted:Answer 1", "--images", IMAGES, "--input", str(inp), "--out", str(out), "--no-cache", "--quiet", *extra])


def test_a_bad_byte_in_one_jsonl_line_costs_that_row_only(tmp_path: Path, capsys) -> None:
    lines = [json.dumps(r).encode() for r in rows()]
    lines[2] = lines[2].replace(b"a cat a cat", b"a cat \xff a cat", 1)
    inp = tmp_path / "in.jsonl"
    inp.write_bytes(b"\n".join(lines) + b"\n")
    out = tmp_path / "res.jsonl"
    assert score(inp, out) == 0
    res = records(out)
    assert [r["status"] for r in res] == ["ok", "ok", "error", "ok", "ok", "ok"]
    assert "line 3" in res[2]["error"] and "not valid UTF-8" in res[2]["error"] and "0xff" in res[2]["error"]
    assert res[2]["id"] == "ex3"  # the id could still be read: the record carries it
    assert [r["id"] for r in res] == ["ex1", "ex2", "ex3", "ex4", "ex5", "ex6"]
    # Re-running resumes: the scored rows are kept, the bad row is reported again, nothing crashes.
    assert score(inp, out) == 0
    assert records(out) == res


def test_a_bad_byte_in_one_csv_row_costs_that_row_only(tmp_path: Path) -> None:
    text = (EXAMPLES / "captions.csv").read_bytes()
    head, *body = text.split(b"\n")
    body[1] = body[1].replace(b"calico", b"cal\xe9ico", 1)  # Latin-1 "é" in a UTF-8 file
    inp = tmp_path / "in.csv"
    inp.write_bytes(b"\n".join([head, *body]))
    out = tmp_path / "res.jsonl"
    assert score(inp, out) == 0
    res = records(out)
    assert [r["status"] for r in res] == ["ok", "error", "ok"]
    assert "line 3" in res[1]["error"] and "'caption'" in res[1]["error"] and "0xe9" in res[1]["error"]
    assert [r["id"] for r in res] == ["csv1", "csv2", "csv3"]  # the id cell could be read: the record carries it
    assert score(inp, out) == 0 and records(out) == res


def test_a_lone_surrogate_is_an_error_record_and_every_rerun_survives(tmp_path: Path) -> None:
    data = rows()
    data[1]["caption"] = "a \ud800 cat"
    data[3]["references"] = ["fine", "bad \udfff reference"]
    inp = tmp_path / "in.jsonl"
    inp.write_text("".join(json.dumps(r) + "\n" for r in data), encoding="ascii")  # "\ud800" as a JSON escape
    out = tmp_path / "res.jsonl"
    for _ in range(3):  # the first run, then re-runs of the same --out
        assert score(inp, out) == 0
        res = records(out)
        assert [r["status"] for r in res] == ["ok", "error", "ok", "error", "ok", "ok"]
        assert "line 2: field 'caption' holds a lone surrogate" in res[1]["error"] and "surrogate" in res[1]["error"]
        assert "line 4: field 'references[1]'" in res[3]["error"]
        assert res[1]["id"] == "ex2" and res[3]["id"] == "ex4"
    assert score(inp, out, "--retry-errors") == 0
    assert [r["status"] for r in records(out)] == ["ok", "error", "ok", "error", "ok", "ok"]


def test_a_lone_surrogate_in_a_pair_is_an_error_record(tmp_path: Path) -> None:
    pairs = [json.loads(x) for x in (EXAMPLES / "pairs.jsonl").read_text().splitlines() if x.strip()]
    pairs[0]["caption_b"] = "x \ud83d"
    inp = tmp_path / "pairs.jsonl"
    inp.write_text("".join(json.dumps(p) + "\n" for p in pairs))
    out = tmp_path / "res.jsonl"
    assert compare(inp, out) == 0
    res = records(out)
    assert [r["status"] for r in res] == ["error", "ok"]
    assert "line 1" in res[0]["error"] and "caption_b" in res[0]["error"]
    assert compare(inp, out) == 0


@pytest.mark.parametrize("first", ["id", "image"])
def test_a_byte_order_mark_is_read_as_one_in_csv(tmp_path: Path, first: str) -> None:
    cols = ["id", "image", "caption"] if first == "id" else ["image", "caption", "id"]
    values = {"id": ["a1", "a2"], "image": ["cats.jpg", "dog.jpg"], "caption": ["two cats", "a dog"]}
    lines = [",".join(cols)] + [",".join(values[c][i] for c in cols) for i in range(2)]
    inp = tmp_path / "excel.csv"
    inp.write_bytes("\r\n".join(lines).encode("utf-8-sig") + b"\r\n")
    out = tmp_path / "res.jsonl"
    assert score(inp, out) == 0
    res = records(out)
    assert [r["status"] for r in res] == ["ok", "ok"]
    assert [r["id"] for r in res] == ["a1", "a2"]  # not row numbers


def test_a_byte_order_mark_is_read_as_one_in_jsonl(tmp_path: Path) -> None:
    inp = tmp_path / "in.jsonl"
    inp.write_bytes("".join(json.dumps(r) + "\n" for r in rows()[:2]).encode("utf-8-sig"))
    out = tmp_path / "res.jsonl"
    assert score(inp, out) == 0
    assert [(r["status"], r["id"]) for r in records(out)] == [("ok", "ex1"), ("ok", "ex2")]


@pytest.mark.parametrize(
    ("field", "value", "shown"),
    [
        ("caption", float("nan"), "NaN"),
        ("caption", float("inf"), "Infinity"),
        ("caption", True, "a boolean (true)"),
        ("caption", {"text": "a cat"}, "an object"),
        ("caption", ["a cat"], "a list"),
        ("caption", 7, "a number (7)"),
        ("references", [float("nan")], "NaN"),
        ("references", {"a": 1}, "an object"),
        ("image", False, "a boolean (false)"),
        ("id", float("nan"), "NaN"),
    ],
)
def test_a_field_that_is_not_text_is_an_error_naming_it(tmp_path: Path, field: str, value: object, shown: str) -> None:
    data = rows()[:3]
    data[1][field] = value
    inp = tmp_path / "in.jsonl"
    inp.write_text("".join(json.dumps(r) + "\n" for r in data))  # NaN / Infinity as Python's json writes them
    out = tmp_path / "res.jsonl"
    assert score(inp, out) == 0
    res = records(out)
    assert [r["status"] for r in res] == ["ok", "error", "ok"]
    name = "references[0]" if field == "references" and isinstance(value, list) else field
    assert f"field {name!r} is {shown}, not text" in res[1]["error"]
    assert "row 2" in res[1]["error"]
    assert all(r["caption"] not in ("nan", "True", "inf") for r in res)


def test_caption_fields_of_pairs_must_be_text(tmp_path: Path) -> None:
    pairs = [json.loads(x) for x in (EXAMPLES / "pairs.jsonl").read_text().splitlines() if x.strip()]
    pairs[1]["caption_a"] = float("nan")
    inp = tmp_path / "pairs.jsonl"
    inp.write_text("".join(json.dumps(p) + "\n" for p in pairs))
    out = tmp_path / "res.jsonl"
    assert compare(inp, out) == 0
    res = records(out)
    assert [r["status"] for r in res] == ["ok", "error"]
    assert "field 'caption_a' is NaN, not text" in res[1]["error"] and res[1]["id"] == "p2"


def test_numbers_stay_accepted_for_ids_and_images(tmp_path: Path) -> None:
    inp = tmp_path / "in.jsonl"
    inp.write_text(json.dumps({"id": 17, "image": "cats.jpg", "caption": "two cats"}) + "\n")
    out = tmp_path / "res.jsonl"
    assert score(inp, out) == 0
    assert [(r["status"], r["id"]) for r in records(out)] == [("ok", "17")]


def test_repeated_ids_are_refused_before_the_run(tmp_path: Path, capsys) -> None:
    data = rows()
    data[3]["id"] = "ex1"
    data[5]["id"] = "ex2"
    inp = tmp_path / "in.jsonl"
    inp.write_text("".join(json.dumps(r) + "\n" for r in data))
    out = tmp_path / "res.jsonl"
    assert score(inp, out) == 2
    err = capsys.readouterr().err
    assert "same id more than once" in err and "'ex1' (lines 1, 4)" in err and "'ex2' (lines 2, 6)" in err
    assert not out.exists()  # refused before anything was written


def test_repeated_ids_in_a_csv_name_their_lines(tmp_path: Path, capsys) -> None:
    inp = tmp_path / "in.csv"
    inp.write_text("id,image,caption\nx,cats.jpg,one\ny,cats.jpg,two\nx,dog.jpg,three\n")
    assert score(inp, tmp_path / "res.jsonl") == 2
    assert "'x' (lines 2, 4)" in capsys.readouterr().err


def test_repeated_ids_in_a_pairs_file_are_refused(tmp_path: Path, capsys) -> None:
    pairs = [json.loads(x) for x in (EXAMPLES / "pairs.jsonl").read_text().splitlines() if x.strip()]
    pairs[1]["id"] = pairs[0]["id"]
    inp = tmp_path / "pairs.jsonl"
    inp.write_text("".join(json.dumps(p) + "\n" for p in pairs))
    assert compare(inp, tmp_path / "res.jsonl") == 2
    assert "'p1' (lines 1, 2)" in capsys.readouterr().err


def test_the_refusal_lists_the_first_few_repeated_ids(tmp_path: Path, capsys) -> None:
    inp = tmp_path / "in.jsonl"
    inp.write_text("".join(json.dumps({"id": f"d{i % 8}", "image": "cats.jpg", "caption": f"c{i}"}) + "\n" for i in range(16)))
    assert score(inp, tmp_path / "res.jsonl") == 2
    err = capsys.readouterr().err
    assert "'d0' (lines 1, 9)" in err and "'d4'" in err and "'d5'" not in err and "and 3 more" in err


@pytest.mark.parametrize(("name", "content"), [("empty.jsonl", b""), ("blank.jsonl", b"\n  \n\t\n"), ("bom.jsonl", b"\xef\xbb\xbf\n"), ("header.csv", b"id,image,caption\n"), ("empty.csv", b"")])
def test_an_input_with_no_rows_exits_2(tmp_path: Path, capsys, name: str, content: bytes) -> None:
    inp = tmp_path / name
    inp.write_bytes(content)
    out = tmp_path / "res.jsonl"
    assert score(inp, out) == 2
    assert "no rows" in capsys.readouterr().err
    assert not out.exists()


def test_a_pairs_file_with_no_rows_exits_2(tmp_path: Path, capsys) -> None:
    inp = tmp_path / "pairs.jsonl"
    inp.write_text("\n\n")
    assert compare(inp, tmp_path / "res.jsonl") == 2
    assert "no rows" in capsys.readouterr().err


def test_explain_reads_the_same_rows(tmp_path: Path, capsys) -> None:
    lines = [json.dumps(r).encode() for r in rows()[:3]]
    lines[1] = lines[1].replace(b"calico", b"cal\x80ico")
    inp = tmp_path / "in.jsonl"
    inp.write_bytes(b"\n".join(lines))
    out = tmp_path / "res.jsonl"
    rc = main(["explain", "--backend", "scripted:0.6", "--images", IMAGES, "--input", str(inp), "--out", str(out), "--no-cache", "--json"])
    assert rc == 0
    res = records(out)
    assert [r["status"] for r in res] == ["ok", "error", "ok"] and "line 2" in res[1]["error"]
    capsys.readouterr()
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    assert main(["explain", "--backend", "scripted:0.6", "--input", str(empty), "--no-cache"]) == 2
    assert "no rows" in capsys.readouterr().err


def test_parity_skips_the_unreadable_row_and_names_it(tmp_path: Path, capsys) -> None:
    lines = [json.dumps(r).encode() for r in rows()[:3]]
    lines[2] = lines[2].replace(b"cat", b"c\xffat", 1)
    inp = tmp_path / "in.jsonl"
    inp.write_bytes(b"\n".join(lines))
    rc = main(["parity", "--a", "scripted:0.5", "--b", "scripted:0.5", "--method", "fleur", "--images", IMAGES, "--input", str(inp), "--format", "json"])
    assert rc == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert any("line 3" in n and "not valid UTF-8" in n for n in report["notes"])


def test_arena_reads_the_same_rows(tmp_path: Path, capsys) -> None:
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_bytes(
        b"\xef\xbb\xbf"
        + json.dumps({"id": "1", "image": "cats.jpg", "caption": "two cats"}).encode() + b"\n"
        + json.dumps({"id": "2", "image": "dog.jpg", "caption": "a dog"}).encode().replace(b"dog\"}", b"d\xffog\"}") + b"\n"
        + json.dumps({"id": "3", "image": "dog.jpg", "caption": float("nan")}).encode() + b"\n"
    )  # fmt: skip
    b.write_text("".join(json.dumps({"id": str(i), "image": img, "caption": c}) + "\n" for i, img, c in [(1, "cats.jpg", "cats"), (2, "dog.jpg", "dog"), (3, "dog.jpg", "a dog")]))
    out = tmp_path / "battles.jsonl"
    rc = main(["arena", "--models", f"a={a}", f"b={b}", "--round-robin", "--backend", "scripted:Answer 1", "--images", IMAGES, "--out", str(out), "--no-cache", "--quiet", "--format", "json"])
    assert rc == 0
    printed = capsys.readouterr().out.strip().splitlines()[-1]
    assert f"{a}:2: line 2 is not valid UTF-8" in printed  # the bad byte: named, left out
    assert f"{a}:3: field 'caption' is NaN, not text" in printed
    assert [r["image"] for r in records(out)] == ["cats.jpg"]  # the row both models captioned was judged


def test_choose_one_groups_that_are_not_text_are_named_not_crashed(tmp_path: Path) -> None:
    good = {"id": "g1", "image": "cats.jpg", "true": ["two cats lying together"], "flawed": ["two cats cats cats", "a dog on a"]}
    lines = [
        json.dumps(good).encode(),
        json.dumps({"id": "g2", "image": "dog.jpg", "true": ["a dog"], "flawed": 5}).encode(),  # a number, not a list
        json.dumps({"id": "g3", "image": "dog.jpg", "true": ["a dog"], "flawed": [float("nan")]}).encode(),
        json.dumps({"id": "g4", "image": "dog.jpg", "true": ["a dog"], "flawed": ["a cat"]}).encode().replace(b"a cat", b"a \xffcat"),
    ]
    groups = tmp_path / "groups.jsonl"
    groups.write_bytes(b"\n".join(lines) + b"\n")
    out = tmp_path / "g.json"
    rc = main(["choose-one", "--backend", "scripted:0.5", "--method", "fleur", "--input", str(groups), "--images", IMAGES, "--no-cache", "--quiet", "--out-json", str(out)])
    assert rc == 0
    data = json.loads(out.read_text())
    assert data["n_groups"] == 1
    assert data["bad_rows"][0] == "row 2: field 'flawed' is a number (5), not text: write it as a JSON string"
    assert data["bad_rows"][1] == "row 3: field 'flawed[0]' is NaN, not text"
    assert data["bad_rows"][2].startswith("line 4 is not valid UTF-8")


def test_a_csv_row_the_csv_module_cannot_parse_costs_that_row_only(tmp_path: Path) -> None:
    inp = tmp_path / "in.csv"
    inp.write_text("id,image,caption\na,cats.jpg,two cats\nb,cats.jpg," + "x" * 200_000 + "\nc,dog.jpg,a dog\n")
    out = tmp_path / "res.jsonl"
    assert score(inp, out) == 0
    res = records(out)
    assert [(r["status"], r["id"]) for r in res] == [("ok", "a"), ("error", "2"), ("ok", "c")]
    assert "line 3" in res[1]["error"] and "field limit" in res[1]["error"]


def test_jsonl_lines_still_end_at_a_lone_carriage_return(tmp_path: Path) -> None:
    inp = tmp_path / "in.jsonl"
    inp.write_bytes(b"\r".join(json.dumps(r).encode() for r in rows()[:2]) + b"\r\n" + json.dumps(rows()[2]).encode().replace(b"cat", b"c\xffat", 1))
    out = tmp_path / "res.jsonl"
    assert score(inp, out) == 0
    res = records(out)
    assert [r["status"] for r in res] == ["ok", "ok", "error"] and "line 3" in res[2]["error"]
