"""Everything that can be checked is checked before any backend is built: each problem is a usage
error (exit 2) with a message naming the item, and no backend is constructed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import capjudge.judges.judge as judge_module
from capjudge.backends.registry import check_backend
from capjudge.cli import main
from capjudge.run.preflight import PreflightError, check_columns, check_output

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
CAPTIONS = EXAMPLES / "captions.jsonl"


@pytest.fixture
def no_backend(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Fails the test if a Judge (and so a backend) is built; returns the specs it was asked for."""
    built: list[str] = []

    class Forbidden:
        def __init__(self, method: object, backend: str, **_: object) -> None:
            built.append(backend)
            raise AssertionError(f"a backend was built for {backend!r} before the checks")

    monkeypatch.setattr(judge_module, "Judge", Forbidden)
    return built


def score(tmp_path: Path, *extra: str, backend: str = "scripted:50", inp: Path = CAPTIONS, out: Path | None = None) -> list[str]:
    return ["score", "--method", "vanilla", "--backend", backend, "--images", str(EXAMPLES / "images"), "--input", str(inp),
            "--out", str(out or tmp_path / "o.jsonl"), "--no-cache", "--quiet", *extra]


def test_out_in_a_file_instead_of_a_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str], no_backend: list[str]) -> None:
    blocker = tmp_path / "results"
    blocker.write_text("a file")
    assert main(score(tmp_path, out=blocker / "fleur.jsonl")) == 2
    err = capsys.readouterr().err
    assert "--out" in err and "is a file, not a folder" in err and "Traceback" not in err
    assert not no_backend


def test_out_is_a_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str], no_backend: list[str]) -> None:
    assert main(score(tmp_path, out=tmp_path)) == 2
    assert "is a folder, not a file" in capsys.readouterr().err


def test_out_in_an_unwritable_folder(tmp_path: Path) -> None:
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        probe = folder / "probe"
        try:
            probe.write_text("x")  # root ignores permissions: nothing to test then
            pytest.skip("running as a user that can write anywhere")
        except PermissionError:
            pass
        with pytest.raises(PreflightError, match="cannot be written"):
            check_output(folder / "out.jsonl")
    finally:
        folder.chmod(0o700)


def test_out_is_the_input(tmp_path: Path, capsys: pytest.CaptureFixture[str], no_backend: list[str]) -> None:
    inp = tmp_path / "in.jsonl"
    inp.write_text(CAPTIONS.read_text())
    before = inp.read_text()
    assert main(score(tmp_path, inp=inp, out=tmp_path / "." / "in.jsonl")) == 2
    assert "would overwrite its own input" in capsys.readouterr().err
    assert inp.read_text() == before


def test_images_folder_missing(tmp_path: Path, capsys: pytest.CaptureFixture[str], no_backend: list[str]) -> None:
    args = score(tmp_path)
    args[args.index("--images") + 1] = str(tmp_path / "no-such-folder")
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "--images folder" in err and "not found" in err


def test_csv_without_the_columns_lists_the_columns_found(tmp_path: Path, capsys: pytest.CaptureFixture[str], no_backend: list[str]) -> None:
    inp = tmp_path / "in.csv"
    inp.write_text("img,text\ncats.jpg,two cats\n")
    assert main(score(tmp_path, inp=inp)) == 2
    err = capsys.readouterr().err
    assert "no column(s) image, caption" in err and "columns found: img, text" in err


def test_jsonl_where_no_row_has_the_fields(tmp_path: Path, capsys: pytest.CaptureFixture[str], no_backend: list[str]) -> None:
    inp = tmp_path / "in.jsonl"
    inp.write_text(json.dumps({"img": "cats.jpg", "text": "two cats"}) + "\n" + json.dumps({"img": "dog.jpg"}) + "\n")
    assert main(score(tmp_path, inp=inp)) == 2
    assert "fields found: img, text" in capsys.readouterr().err
    # One good row is enough: the others become error records as before.
    inp.write_text(json.dumps({"image": "cats.jpg", "caption": "two cats"}) + "\n" + json.dumps({"img": "dog.jpg"}) + "\n")
    check_columns(inp, ("image", "caption"))


def test_pairs_file_needs_pair_columns(tmp_path: Path, capsys: pytest.CaptureFixture[str], no_backend: list[str]) -> None:
    rc = main(["compare", "--backend", "scripted:Answer 1", "--input", str(CAPTIONS), "--out", str(tmp_path / "p.jsonl"), "--no-cache"])
    assert rc == 2 and "caption_a, caption_b" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("backend", "opts", "message"),
    [
        ("openai-compatible:http://127.0.0.1:9/v1#m", ["--backend-opt", "concurrency=lots"], "concurrency='lots' is not an integer"),
        ("openai-compatible:http://127.0.0.1:9/v1#m", ["--backend-opt", "detial=low"], "unknown openai-compatible option(s): detial"),
        ("openai-compatible:http://127.0.0.1:9/v1", [], "needs base_url#model"),
        ("openai-compatible:127.0.0.1:9/v1#m", [], "is not http(s)://"),
        ("hf:llava-hf/llava-1.5-7b-hf", ["--backend-opt", "dtype=float17"], "dtype='float17'"),
        ("hf:llava-hf/llava-1.5-7b-hf", ["--backend-opt", "batch_size=many"], "batch_size='many'"),
        ("hf:llava-hf/llava-1.5-7b-hf", ["--backend-opt", "devce=cuda"], "unknown hf option(s): devce"),
        ("hf:./no/such/model-folder", [], "model folder './no/such/model-folder' not found"),
        ("llamacpp:/no/such/model.gguf", [], "model file not found"),
        ("gemini:pro", [], "unknown backend kind"),
        ("scripted:1", ["--backend-opt", "novalue"], "KEY=VALUE"),
    ],
)
def test_backend_spec_and_options_are_checked_first(tmp_path: Path, capsys: pytest.CaptureFixture[str], no_backend: list[str], backend: str, opts: list[str], message: str) -> None:
    assert main(score(tmp_path, *opts, backend=backend)) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not no_backend and not (tmp_path / "o.jsonl").exists()


def test_check_backend_builds_nothing(tmp_path: Path) -> None:
    spec = check_backend("openai-compatible:http://127.0.0.1:9/v1#m", concurrency="4", gone_after="3")
    assert spec.kind == "openai-compatible"
    with pytest.raises(ValueError, match="gone_after='x'"):
        check_backend("openai:gpt-4o", gone_after="x")
