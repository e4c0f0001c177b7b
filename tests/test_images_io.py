"""Image loading (content hashes, clear errors), input reading and the results round trip."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from PIL import Image

from capjudge.data.images import ImageError, load_image, pad_to_square
from capjudge.data.io import BadRow, read_pairs, read_results, read_samples, write_results
from capjudge.data.types import Sample, ScoreResult

EX = Path(__file__).resolve().parents[1] / "examples"


def test_same_image_by_path_bytes_or_data_url_has_one_hash(tmp_path: Path) -> None:
    path = EX / "images" / "cats.jpg"
    data = path.read_bytes()
    copy = tmp_path / "copy.jpg"
    copy.write_bytes(data)
    url = "data:image/jpeg;base64," + base64.b64encode(data).decode()
    hashes = {load_image(x).sha256 for x in (path, str(copy), data, url)}
    assert len(hashes) == 1
    img = load_image(path)
    assert img.mime == "image/jpeg" and img.pil().mode == "RGB"
    assert img.data_url().startswith("data:image/jpeg;base64,")
    assert load_image("cats.jpg", root=EX / "images").sha256 in hashes


def test_pil_and_remote_inputs() -> None:
    pil = Image.new("RGB", (30, 20), (255, 0, 0))
    loaded = load_image(pil)
    assert loaded.pil().size == (30, 20) and loaded.mime == "image/png"
    remote = load_image("https://example.org/cat.jpg")
    assert remote.url == "https://example.org/cat.jpg" and remote.data == b""
    assert remote.data_url() == "https://example.org/cat.jpg"  # passed through to API backends


def test_image_errors_name_the_image(tmp_path: Path) -> None:
    with pytest.raises(ImageError, match="missing.png.*not found"):
        load_image(tmp_path / "missing.png")
    bad = tmp_path / "bad.jpg"
    bad.write_bytes(b"not an image at all")
    with pytest.raises(ImageError, match="bad.jpg.*could not be decoded"):
        load_image(bad)
    empty = tmp_path / "empty.png"
    empty.write_bytes(b"")
    with pytest.raises(ImageError, match="empty"):
        load_image(empty)
    truncated = tmp_path / "truncated.jpg"
    truncated.write_bytes((EX / "images" / "cats.jpg").read_bytes()[:2000])
    with pytest.raises(ImageError, match="truncated.jpg"):
        load_image(truncated)
    with pytest.raises(ImageError, match="no image given"):
        load_image(None)  # type: ignore[arg-type]
    with pytest.raises(ImageError, match="unsupported image of type list"):
        load_image(["cats.jpg"])  # type: ignore[arg-type]
    assert load_image(Image.new("RGB", (4, 3))).label == "<PIL image 4x3>"


def test_pad_to_square_centres_with_fill() -> None:
    img = Image.new("RGB", (40, 10), (0, 0, 255))
    sq = pad_to_square(img, (1, 2, 3))
    assert sq.size == (40, 40)
    assert sq.getpixel((0, 0)) == (1, 2, 3) and sq.getpixel((20, 20)) == (0, 0, 255)
    assert pad_to_square(Image.new("RGB", (5, 5)), (0, 0, 0)).size == (5, 5)


def test_reading_inputs(tmp_path: Path) -> None:
    rows = list(read_samples(EX / "captions.csv"))
    assert all(isinstance(r, dict) for r in rows)
    assert rows[0]["id"] == "csv1" and len(rows[0]["references"]) == 3
    f = tmp_path / "in.jsonl"
    f.write_text('{"image": "a.jpg", "caption": "x", "references": "r1|r2"}\n\n[1, 2]\n{"image": "b.jpg"}\n')
    got = list(read_samples(f))
    assert got[0] == {"image": "a.jpg", "caption": "x", "references": ["r1", "r2"], "id": "1"}
    assert isinstance(got[1], BadRow) and "not a JSON object" in got[1].error
    assert isinstance(got[2], BadRow) and "caption" in got[2].error
    pairs = list(read_pairs(EX / "pairs.jsonl"))
    assert pairs[0]["caption_a"] and pairs[0]["id"] == "p1"


def test_results_round_trip(tmp_path: Path) -> None:
    r = ScoreResult(image="a.jpg", caption="x", score=float("nan"), method="fleur", backend="scripted:x", model="m", template_hash="h", raw="0.5", references=("r",), details={"k": (1, 2)})
    out = tmp_path / "r.jsonl"
    assert write_results(out, [r]) == 1
    rec = json.loads(out.read_text())
    assert rec["score"] is None and rec["details"]["k"] == [1, 2] and rec["references"] == ["r"]
    back = ScoreResult.from_dict({**rec, "extra_field": 3})
    assert back.caption == "x" and back.details["extra_field"] == 3
    assert read_results(out)[0]["method"] == "fleur"


def test_sample_normalises_references() -> None:
    assert Sample("a.jpg", "x", references=["a", "b"]).references == ("a", "b")
    assert Sample("a.jpg", "x", references="only one").references == ("only one",)
