"""Loaders for the published human-judgment layouts (small hand-made fixtures)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from capjudge.metaeval import DatasetError, load_dataset, normalize_caption, sample_key
from capjudge.metaeval.datasets import canonical_name, resolve_image, thumb_total

DATA = Path(__file__).parent / "data" / "metaeval"


def test_names_and_aliases():
    assert canonical_name("Pascal-50S") == "pascal50s"
    assert canonical_name("flickr8k_expert") == "flickr8k-expert"
    assert canonical_name("THumB 1.0") == "thumb"
    assert canonical_name("crowdflower") == "flickr8k-cf"
    with pytest.raises(DatasetError, match="unknown data set"):
        canonical_name("imagenet")


def test_join_key_uses_file_name_and_normalised_caption():
    assert normalize_caption("  A  dog\truns .\n") == "A dog runs ."
    assert sample_key("/abs/Flickr8k_Dataset/x.jpg", "a  b") == sample_key("Flickr8k_Dataset/x.jpg", " a b ")


def test_flickr8k_rows_skip_nan_and_keep_references():
    bench = load_dataset("flickr8k-expert", DATA / "flickr8k_tiny.json")
    assert bench.kind == "ratings"
    assert len(bench.ratings) == 11 and bench.skipped == 1
    assert any("NaN" in n for n in bench.notes)
    first = bench.ratings[0]
    assert first.key == ("img1.jpg", "A dog runs on the grass .")
    assert first.references == ("a dog runs on grass .", "a brown dog running .")
    samples = bench.samples()
    assert [s.caption for s in samples] == [
        "A dog runs on the grass .",
        "A cat sleeps on a sofa .",
        "Kids playing in water .",
        "A man rides a horse .",
    ]
    assert samples[0].image == "Flickr8k_Dataset/img1.jpg"


def test_cf_uses_the_same_layout():
    assert load_dataset("flickr8k-cf", DATA / "flickr8k_tiny.json").name == "flickr8k-cf"


def test_composite_groups():
    bench = load_dataset("composite", DATA / "composite_tiny.json")
    assert len(bench.ratings) == 5
    assert {r.group for r in bench.ratings} == {"flickr8k", "coco"}
    assert bench.ratings[-1].rating == 1.0


def test_pascal_pairs_and_samples():
    bench = load_dataset("pascal", DATA / "pascal_tiny.json")
    assert bench.kind == "pairs" and len(bench.pairs) == 5
    assert [p.category for p in bench.pairs] == ["HC", "HC", "HI", "HM", "MM"]
    assert bench.pairs[0].label == 1
    assert len(bench.samples()) == 10
    pairs = bench.pair_inputs()
    assert pairs[0]["caption_a"] == "a man on a bike" and pairs[0]["id"] == "HC:0"


def test_thumb_total_and_references():
    bench = load_dataset("thumb", DATA / "mscoco_THumB-1.0.jsonl")
    assert len(bench.ratings) == 5
    r = bench.ratings[4]  # P 5, R 3, Con -0.1
    assert r.rating == pytest.approx(3.9) == thumb_total({"P": 5, "R": 3, "Fl": 0, "Con": -0.1, "Inc": 0})
    assert r.extra == {"P": 5.0, "R": 3.0, "total": pytest.approx(3.9)}
    assert r.group == "VinVL-base"
    assert r.references == ("A kid flies a kite.",)
    assert bench.ratings[2].rating == pytest.approx(1.5)  # fluency penalty


def test_foil_coco_layout_pairs_original_first(tmp_path):
    bench = load_dataset("foil", DATA / "foil_tiny.json")
    assert len(bench.pairs) == 2 and bench.skipped == 1  # id 12 has no foiled caption
    p = bench.pairs[0]
    assert p.captions == ("A dog on a couch.", "A cat on a couch.") and p.label == 0
    assert bench.pairs[1].image == "COCO_val2014_000000000002.jpg"  # not in "images": COCO name
    simple = tmp_path / "foil.json"
    simple.write_text(json.dumps([{"image": "a.jpg", "original": "a dog", "foil": "a cat"}]))
    assert load_dataset("foil", simple).pairs[0].captions == ("a dog", "a cat")


@pytest.mark.parametrize(
    "name, content",
    [
        ("pascal50s", {"XX": []}),
        ("pascal50s", {"HC": [{"image": "a.jpg", "captions": ["one"], "label": 0}]}),
        ("flickr8k-expert", ["not", "a", "dict"]),
        ("composite", {"coco": "nope"}),
    ],
)
def test_bad_layouts_raise_dataset_error(tmp_path, name, content):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(content))
    with pytest.raises(DatasetError):
        load_dataset(name, path)


def test_missing_file_is_a_dataset_error(tmp_path):
    with pytest.raises(DatasetError, match="not found"):
        load_dataset("pascal50s", tmp_path / "nope.json")


def test_images_are_resolved_as_given_by_name_or_recursively(tmp_path):
    (tmp_path / "Flickr8k_Dataset").mkdir()
    (tmp_path / "Flickr8k_Dataset" / "img1.jpg").write_bytes(b"x")
    (tmp_path / "deep" / "er").mkdir(parents=True)
    (tmp_path / "deep" / "er" / "img2.jpg").write_bytes(b"x")
    assert resolve_image(tmp_path, "Flickr8k_Dataset/img1.jpg") == str(tmp_path / "Flickr8k_Dataset" / "img1.jpg")
    assert resolve_image(tmp_path, "other/img2.jpg") == str(tmp_path / "deep" / "er" / "img2.jpg")
    assert resolve_image(tmp_path, "missing.jpg") == str(tmp_path / "missing.jpg")
    bench = load_dataset("flickr8k-expert", DATA / "flickr8k_tiny.json")
    assert bench.samples(tmp_path)[2].image == str(tmp_path / "deep" / "er" / "img2.jpg")
