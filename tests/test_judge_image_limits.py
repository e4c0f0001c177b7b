"""``Judge(image_limits=ImageLimits(...))``: the image policy as one object; the four old keywords
(``max_image_pixels``, ``oversize_images``, ``max_image_bytes``, ``image_timeout``) work for one
release with a DeprecationWarning naming the new form; a judge built without them does not warn."""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path

import pytest
from PIL import Image

from capjudge import Judge, Sample
from capjudge.backends.scripted import ScriptedBackend
from capjudge.cli.common import image_options
from capjudge.core.errors import UsageError
from capjudge.data.images import DEFAULT_LIMITS, ImageLimits


def test_image_limits_is_the_judges_policy_and_the_default_does_not_warn(tmp_path: Path) -> None:
    Image.new("RGB", (400, 300), "red").save(tmp_path / "big.png")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert Judge("vanilla", ScriptedBackend("7")).image_limits == DEFAULT_LIMITS
        limits = ImageLimits(max_pixels=10_000, oversize="refuse", max_download_bytes=5_000, download_timeout=2.5)
        judge = Judge("vanilla", ScriptedBackend("7"), images_root=tmp_path, image_limits=limits)
    assert judge.image_limits is limits
    (result,) = judge.score_many([Sample("big.png", "a red picture", id="big")])
    assert result.status == "error" and "big" in (result.error or ""), result


def test_the_old_keywords_warn_once_and_give_the_same_policy() -> None:
    with pytest.warns(DeprecationWarning, match=r"max_image_pixels=, image_timeout=\) is deprecated: pass image_limits=ImageLimits\(max_pixels=\.\.\., download_timeout=\.\.\.\)") as caught:
        judge = Judge("vanilla", ScriptedBackend("7"), max_image_pixels=1234, image_timeout=3.0)
    assert len(caught) == 1 and caught[0].filename == __file__  # points at the caller
    assert judge.image_limits == ImageLimits(max_pixels=1234, download_timeout=3.0)
    with pytest.warns(DeprecationWarning):
        assert Judge("vanilla", ScriptedBackend("7"), oversize_images="refuse", max_image_bytes=99).image_limits == ImageLimits(oversize="refuse", max_download_bytes=99)


def test_both_forms_together_or_a_wrong_type_is_refused() -> None:
    with pytest.raises(ValueError, match="not both"):
        Judge("vanilla", ScriptedBackend("7"), image_limits=ImageLimits(), max_image_pixels=10)
    with pytest.raises(TypeError, match="ImageLimits"):
        Judge("vanilla", ScriptedBackend("7"), image_limits={"max_pixels": 10})  # type: ignore[arg-type]


def test_the_command_line_passes_one_image_limits() -> None:
    args = argparse.Namespace(allow_outside_images=True, max_image_pixels=0, oversize_images=None, max_image_bytes=1000, image_timeout=None)
    assert image_options(args) == {"allow_outside_images": True, "image_limits": ImageLimits(max_pixels=0, max_download_bytes=1000)}
    assert image_options(argparse.Namespace(allow_outside_images=None)) == {}
    with pytest.raises(UsageError, match="image_timeout"):
        image_options(argparse.Namespace(image_timeout=-1.0))
