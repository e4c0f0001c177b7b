"""Issue 20, items 4 and 5: images cost a bounded amount of memory and time, and come only from
where the user said.

- Decoded pixels have a budget: a picture above ``--max-image-pixels`` is downscaled at load (the
  record says from what size) or refused (``--oversize-images refuse``: an error record naming the
  row); the image memo and the prefetch are bounded by bytes.
- A remote image is downloaded with a size cap and an overall deadline (a local HTTP server on
  127.0.0.1 sends a huge body, a trickle, a silent stall).
- With ``--images DIR`` a path that leaves DIR (``../``, absolute, a symlink pointing out) is an
  error record unless ``--allow-outside-images``; ``capjudge html`` embeds only images from the
  folder it is given.

The images are real PNGs and JPEGs made here (small: the 65000x2700 run is
``benchmarks/bench_image_memory.py``).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from capjudge import Judge, Sample
from capjudge.backends.base import Capabilities
from capjudge.backends.scripted import ScriptedBackend
from capjudge.cli import main
from capjudge.core.errors import EXIT_ALL_FAILED
from capjudge.data.images import ImageError, ImageLimits, download, load_image
from capjudge.judges import scoring
from capjudge.judges.dispatch import WindowExecutor
from capjudge.judges.scoring import ImageMemo, ScoringRun


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def png(path: Path, size: tuple[int, int], mode: str = "RGB", color: Any = (40, 120, 200)) -> Path:
    Image.new(mode, size, color).save(path)
    return path


def score(tmp_path: Path, rows: list[dict[str, Any]], *extra: str, images: Path | None = None, name: str = "out.jsonl") -> tuple[int, list[dict[str, Any]]]:
    inp = write_jsonl(tmp_path / f"in-{name}", rows)
    out = tmp_path / name
    args = ["score", "--method", "fleur", "--backend", "scripted:0.8", "--input", str(inp), "--out", str(out), "--no-cache", "--quiet", *extra]
    if images is not None:
        args += ["--images", str(images)]
    rc = run_cli(args)
    return rc, (read_jsonl(out) if out.exists() else [])


def run_cli(args: list[str]) -> int:
    """``main``'s exit code, argparse's own usage errors (SystemExit 2) included."""
    try:
        return main(args)
    except SystemExit as exc:
        return int(exc.code or 0)


# ------------------------------------------------------------------------------- pixel budget
def test_an_image_above_the_pixel_limit_is_downscaled_at_load_and_the_record_says_so(tmp_path: Path) -> None:
    png(tmp_path / "wide.png", (3000, 1000))
    png(tmp_path / "small.png", (300, 200))
    rows = [{"image": "wide.png", "caption": "a blue band", "id": "w"}, {"image": "small.png", "caption": "a blue square", "id": "s"}]
    rc, recs = score(tmp_path, rows, "--max-image-pixels", "1000000", "--batch-size", "1", images=tmp_path)
    assert rc == 0
    by_id = {r["id"]: r for r in recs}
    assert [r["status"] for r in recs] == ["ok", "ok"]
    note = by_id["w"]["details"]["image_downscaled"]
    assert note["from"] == [3000, 1000] and note["max_pixels"] == 1_000_000
    w, h = note["to"]
    assert w * h <= 1_000_000 and abs(w / h - 3.0) < 0.01  # same shape, within the budget
    assert "image_downscaled" not in by_id["s"]["details"]


def test_the_default_pixel_limit_downscales_a_bomb_sized_png(tmp_path: Path) -> None:
    # 6700 x 6100 = 40.9 Mpx, just over the 40 Mpx default; bilevel: ~10 KB on disk.
    img = Image.new("1", (6700, 6100), 1)
    img.paste(0, (0, 0, 100, 100))
    img.save(tmp_path / "bomb.png", optimize=True)
    loaded = load_image("bomb.png", root=tmp_path)
    assert loaded.original_size == (6700, 6100)
    assert loaded.pil().size == (3350, 3050) and loaded.pil().mode == "RGB"  # halved: each pixel a 2x2 mean
    # Every backend gets the smaller picture: API backends send ``data``, and it hashes as what is sent.
    again = Image.open(__import__("io").BytesIO(loaded.data))
    assert again.size == (3350, 3050)
    assert loaded.sha256 == __import__("hashlib").sha256(loaded.data).hexdigest()


def test_a_jpeg_above_the_limit_is_decoded_at_a_reduced_size_and_stays_a_jpeg(tmp_path: Path) -> None:
    Image.new("RGB", (4000, 3000), (90, 10, 10)).save(tmp_path / "photo.jpg", quality=90)
    loaded = load_image(tmp_path / "photo.jpg", limits=ImageLimits(max_pixels=1_000_000))
    assert loaded.original_size == (4000, 3000)
    w, h = loaded.pil().size
    assert w * h <= 1_000_000 and (w, h) == (1000, 750)  # the decoder's 1/4 scale
    assert loaded.mime == "image/jpeg" and loaded.data[:2] == b"\xff\xd8"


def test_refuse_makes_an_oversized_image_an_error_record_naming_the_row(tmp_path: Path) -> None:
    png(tmp_path / "huge.png", (2000, 2000))
    png(tmp_path / "fine.png", (100, 100))
    rows = [{"image": "fine.png", "caption": "a square", "id": "a"}, {"image": "huge.png", "caption": "a big square", "id": "b"}, {"image": "fine.png", "caption": "again", "id": "c"}]
    rc, recs = score(tmp_path, rows, "--max-image-pixels", "1000000", "--oversize-images", "refuse", images=tmp_path)
    assert rc == 0
    assert [r["status"] for r in recs] == ["ok", "error", "ok"]
    err = recs[1]["error"]
    assert err.startswith("sample b: ") and "2000x2000" in err and "above the limit of 1,000,000" in err and "refuse" in err


def test_bad_image_limit_options_are_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    png(tmp_path / "a.png", (10, 10))
    rows = [{"image": "a.png", "caption": "x"}]
    assert score(tmp_path, rows, "--max-image-pixels", "-5", images=tmp_path)[0] == 2
    assert score(tmp_path, rows, "--oversize-images", "crop", images=tmp_path)[0] == 2
    assert score(tmp_path, rows, "--image-timeout", "0", images=tmp_path)[0] == 2
    assert score(tmp_path, rows, "--max-image-bytes", "0", images=tmp_path)[0] == 2
    assert "--image-timeout" in capsys.readouterr().err
    rc, recs = score(tmp_path, rows, "--max-image-pixels", "0", "--oversize-images", "refuse", "--max-image-bytes", "1000", "--image-timeout", "2.5", images=tmp_path)
    assert rc == 0 and recs[0]["status"] == "ok"  # 0: no pixel limit


# ------------------------------------------------------------------------------- memo and prefetch
def test_the_image_memo_is_bounded_by_bytes_not_by_count(tmp_path: Path) -> None:
    pictures = [load_image(png(tmp_path / f"{i}.png", (200, 200), color=(i, i, i))) for i in range(6)]
    one = pictures[0].nbytes()
    assert one >= 200 * 200 * 3
    budget = sum(p.nbytes() for p in pictures[3:])  # exactly the last three
    memo = ImageMemo(budget=budget)
    for i, p in enumerate(pictures):
        memo[("path", str(i))] = p
    assert memo.held == budget and len(memo) == 3
    assert list(memo) == [("path", "3"), ("path", "4"), ("path", "5")]  # the newest kept
    small = ImageMemo(budget=10)
    small[("path", "big")] = pictures[0]
    assert len(small) == 1  # the image in use is kept, whatever its size


def test_images_are_loaded_ahead_only_within_the_byte_budget(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    names = [png(tmp_path / f"p{i}.png", (64, 64), color=(10 * i, 0, 0)).name for i in range(8)]
    seen: list[int] = []
    run_box: list[ScoringRun] = []

    def respond(_req: Any) -> str:
        seen.append(len(run_box[0]._loading))  # pictures loading or loaded ahead, not yet used
        return "0.5"

    monkeypatch.setattr(scoring, "PREFETCH_BYTES", 64 * 64 * 3 + 1)  # room for about one picture
    backend = ScriptedBackend(respond, capabilities=Capabilities(concurrency=2))
    judge = Judge("vanilla", backend, images_root=tmp_path)
    run = ScoringRun(judge, WindowExecutor(backend, 2))
    run_box.append(run)
    results = dict(run.run([Sample(n, f"caption {i}") for i, n in enumerate(names)]))
    assert len(results) == 8 and all(r.status == "ok" for r in results.values())
    assert max(seen) <= 1, seen  # before: four images ahead whatever their size


# ------------------------------------------------------------------------------- remote images
class _Server(BaseHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:  # quiet test output
        pass

    def do_GET(self) -> None:  # noqa: N802 - the http.server API
        if self.path == "/huge-declared":  # announces 3 GB
            self.send_response(200)
            self.send_header("Content-Type", "image/png")
            self.send_header("Content-Length", str(3 * 1024**3))
            self.end_headers()
            self._stream(10**9)
        elif self.path == "/huge-undeclared":  # no length: streams until the client hangs up
            self.send_response(200)
            self.send_header("Content-Type", "image/png")
            self.send_header("Connection", "close")
            self.end_headers()
            self._stream(10**9)
        elif self.path == "/trickle":  # a byte every 50 ms, for ever
            self.send_response(200)
            self.send_header("Content-Type", "image/png")
            self.send_header("Content-Length", "100000")
            self.end_headers()
            for _ in range(2000):
                if not self._write(b"x"):
                    return
                time.sleep(0.05)
        elif self.path == "/stall":  # headers, then silence
            self.send_response(200)
            self.send_header("Content-Length", "100")
            self.end_headers()
            self.wfile.flush()
            time.sleep(5)
        else:
            body = _png_bytes()
            self.send_response(200)
            self.send_header("Content-Type", "image/png")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self._write(body)

    def _write(self, data: bytes) -> bool:
        try:
            self.wfile.write(data)
            self.wfile.flush()
        except OSError:
            return False
        return True

    def _stream(self, total: int) -> None:
        chunk = b"\0" * 65536
        sent = 0
        while sent < total and self._write(chunk):
            sent += len(chunk)


def _png_bytes() -> bytes:
    import io

    buf = io.BytesIO()
    Image.new("RGB", (300, 200), (1, 2, 3)).save(buf, format="PNG")
    return buf.getvalue()


@pytest.fixture
def server() -> Iterator[str]:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Server)
    srv.daemon_threads = True
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()


def test_a_remote_body_above_the_size_cap_is_refused(server: str) -> None:
    limits = ImageLimits(max_download_bytes=1_000_000, download_timeout=10)
    with pytest.raises(ImageError, match=r"larger than 1,000,000 bytes \(--max-image-bytes\): the server announces 3,221,225,472"):
        download(server + "/huge-declared", limits)
    t0 = time.monotonic()
    with pytest.raises(ImageError, match=r"larger than 1,000,000 bytes"):
        download(server + "/huge-undeclared", limits)
    assert time.monotonic() - t0 < 20


@pytest.mark.parametrize("path", ["/trickle", "/stall"])
def test_a_slow_remote_image_is_cut_at_the_overall_deadline(server: str, path: str) -> None:
    limits = ImageLimits(download_timeout=0.6)
    t0 = time.monotonic()
    with pytest.raises(ImageError, match=r"not complete within 0.6 s \(--image-timeout\)"):
        download(server + path, limits)
    assert time.monotonic() - t0 < 10  # the whole download, not each read (the trickle never pauses 0.6 s)


def test_a_remote_image_within_the_limits_is_downloaded_and_downscaled(server: str) -> None:
    img = load_image(server + "/ok.png", limits=ImageLimits(max_pixels=10_000))
    assert img.url is not None and img.pil().size == (100, 67)  # 300x200 reduced by 3
    assert img.downscale_details() == {"from": [300, 200], "to": [100, 67], "max_pixels": 10_000}


def test_a_local_backend_downloading_a_remote_image_gets_an_error_record_per_row(server: str) -> None:
    # A local backend (HF, llama.cpp) decodes the picture itself: ``image.pil()`` downloads it.
    def respond(req: Any) -> str:
        (img,) = req.images
        img.pil()
        return "0.7"

    judge = Judge("fleur", ScriptedBackend(respond), image_limits=ImageLimits(max_download_bytes=100_000, download_timeout=0.6))
    samples = [Sample(server + "/ok.png", "fine", id="ok"), Sample(server + "/huge-undeclared", "big", id="big"), Sample(server + "/trickle", "slow", id="slow")]
    t0 = time.monotonic()
    results = {r.id: r for r in judge.score_many(samples)}
    assert time.monotonic() - t0 < 20
    assert results["ok"].status == "ok"
    assert results["big"].status == "error" and "sample big" in results["big"].error and "--max-image-bytes" in results["big"].error
    assert results["slow"].status == "error" and "sample slow" in results["slow"].error and "--image-timeout" in results["slow"].error


# ------------------------------------------------------------------------------- paths
@pytest.fixture
def layout(tmp_path: Path) -> dict[str, Path]:
    """DIR with an image, a symlink pointing out of it; a secret picture beside DIR."""
    images = tmp_path / "images"
    images.mkdir()
    png(images / "inside.png", (20, 20))
    (images / "sub").mkdir()
    png(images / "sub" / "deep.png", (20, 20))
    secret = png(tmp_path / "secret.png", (20, 20), color=(255, 0, 0))
    (images / "link.png").symlink_to(secret)
    return {"images": images, "secret": secret}


def _rows(secret: Path) -> list[dict[str, Any]]:
    return [
        {"image": "inside.png", "caption": "in", "id": "in"},
        {"image": "sub/../sub/deep.png", "caption": "deep", "id": "deep"},
        {"image": "../secret.png", "caption": "dotdot", "id": "dotdot"},
        {"image": str(secret), "caption": "absolute", "id": "abs"},
        {"image": "link.png", "caption": "symlink", "id": "link"},
    ]


def test_images_that_leave_the_images_folder_are_error_records(tmp_path: Path, layout: dict[str, Path]) -> None:
    rc, recs = score(tmp_path, _rows(layout["secret"]), images=layout["images"])
    assert rc == 0
    status = {r["id"]: r["status"] for r in recs}
    assert status == {"in": "ok", "deep": "ok", "dotdot": "error", "abs": "error", "link": "error"}
    for r in recs:
        if r["status"] == "error":
            assert r["error"].startswith(f"sample {r['id']}: image ") and "outside the images folder" in r["error"] and "--allow-outside-images" in r["error"]


def test_allow_outside_images_reads_them(tmp_path: Path, layout: dict[str, Path]) -> None:
    rc, recs = score(tmp_path, _rows(layout["secret"]), "--allow-outside-images", images=layout["images"])
    assert rc == 0 and all(r["status"] == "ok" for r in recs)


def test_without_images_paths_are_read_relative_to_the_current_folder_as_before(tmp_path: Path, layout: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(layout["images"])
    rc, recs = score(tmp_path, _rows(layout["secret"]))
    assert rc == 0 and all(r["status"] == "ok" for r in recs)


def test_compare_refuses_a_pair_whose_image_leaves_the_folder(tmp_path: Path, layout: dict[str, Path]) -> None:
    inp = write_jsonl(tmp_path / "pairs.jsonl", [
        {"image": "inside.png", "caption_a": "a", "caption_b": "b", "id": "p1"},
        {"image": "../secret.png", "caption_a": "a", "caption_b": "b", "id": "p2"},
    ])  # fmt: skip
    out = tmp_path / "pairs-out.jsonl"
    rc = main(["compare", "--backend", "scripted:Answer A", "--images", str(layout["images"]), "--input", str(inp), "--out", str(out), "--no-cache", "--quiet"])
    assert rc == 0
    recs = {r["id"]: r for r in read_jsonl(out)}
    assert recs["p1"]["status"] == "ok"
    assert recs["p2"]["status"] == "error" and "outside the images folder" in recs["p2"]["error"]


def test_explain_refuses_an_image_outside_the_folder(tmp_path: Path, layout: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["explain", "--backend", "scripted:0.7", "--images", str(layout["images"]), "--image", "../secret.png", "--caption", "red", "--json", "--no-cache"])
    assert rc == EXIT_ALL_FAILED  # its one sample failed
    record = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert record["status"] == "error" and "outside the images folder" in record["error"]
    rc = main(["explain", "--backend", "scripted:0.7", "--images", str(layout["images"]), "--image", "../secret.png", "--caption", "red", "--json", "--no-cache", "--allow-outside-images"])
    assert rc == 0 and json.loads(capsys.readouterr().out.strip().splitlines()[-1])["status"] == "ok"


def _results_with(tmp_path: Path, images: list[str]) -> Path:
    res = tmp_path / "someone" / "results.jsonl"
    res.parent.mkdir()
    write_jsonl(res, [{"image": im, "caption": f"c{i}", "score": 0.5, "method": "fleur", "backend": "scripted:0.5", "status": "ok", "id": str(i)} for i, im in enumerate(images)])
    return res


def test_html_embeds_only_images_from_the_folder_it_is_given(tmp_path: Path, layout: dict[str, Path]) -> None:
    res = _results_with(tmp_path, ["inside.png", "../secret.png", str(layout["secret"]), "link.png"])
    out = tmp_path / "report.html"
    assert main(["html", str(res), "-o", str(out), "--images", str(layout["images"])]) == 0
    page = out.read_text()
    assert page.count('<div class="imgerr">not embedded: the file is outside the image folder') == 3
    assert page.count('class="thumb missing"') == 3
    out2 = tmp_path / "report2.html"
    assert main(["html", str(res), "-o", str(out2), "--images", str(layout["images"]), "--allow-outside-images"]) == 0
    assert "not embedded" not in out2.read_text()


def test_html_without_images_embeds_only_from_the_folders_it_searches(tmp_path: Path, layout: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(layout["images"])  # the current folder is searched (and allowed)
    res = _results_with(tmp_path, ["inside.png", str(layout["secret"])])
    out = tmp_path / "report.html"
    assert main(["html", str(res), "-o", str(out)]) == 0
    page = out.read_text()
    assert page.count('<div class="imgerr">not embedded: the file is outside the image folder') == 1


def test_compare_records_say_when_the_image_was_downscaled(tmp_path: Path) -> None:
    png(tmp_path / "wide.png", (3000, 1000))
    inp = write_jsonl(tmp_path / "pairs.jsonl", [{"image": "wide.png", "caption_a": "a band", "caption_b": "a cat", "id": "p"}])
    out = tmp_path / "pairs-out.jsonl"
    rc = main(["compare", "--backend", "scripted:Answer A", "--images", str(tmp_path), "--input", str(inp), "--out", str(out), "--no-cache", "--quiet", "--max-image-pixels", "1000000"])
    assert rc == 0
    (record,) = read_jsonl(out)
    assert record["status"] == "ok" and record["details"]["image_downscaled"]["from"] == [3000, 1000]


def test_a_pil_image_above_the_limit_is_downscaled_too() -> None:
    loaded = load_image(Image.new("RGB", (2000, 1000), (5, 5, 5)), limits=ImageLimits(max_pixels=500_000))
    assert loaded.original_size == (2000, 1000) and loaded.pil().size == (1000, 500)
    with pytest.raises(ImageError, match="above the limit"):
        load_image(Image.new("RGB", (2000, 1000)), limits=ImageLimits(max_pixels=500_000, oversize="refuse"))


def _flickr_file(tmp_path: Path, images: list[str]) -> Path:
    data = {
        f"img{i}": {
            "image_id": f"img{i}",
            "image_path": im,
            "ground_truth": ["a red square ."],
            "human_judgement": [{"image_id": f"img{i}", "image_path": im, "caption": f"a square number {i} .", "rating": 3.0}],
        }
        for i, im in enumerate(images)
    }
    path = tmp_path / "flickr.json"
    path.write_text(json.dumps(data))
    return path


def test_run_benchmark_refuses_annotation_paths_that_leave_the_images_folder(tmp_path: Path, layout: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    human = _flickr_file(tmp_path, ["inside.png", "../secret.png"])
    out = tmp_path / "bench.jsonl"
    base = ["run-benchmark", "--dataset", "flickr8k-expert", "--human", str(human), "--images", str(layout["images"]), "--method", "fleur", "--backend", "scripted:0.5", "--no-cache", "--out", str(out), "--format", "json"]
    run_cli(base)  # exit 1: two captions measure nothing; the records are what this test reads
    recs = {Path(r["image"]).name: r for r in read_jsonl(out)}
    assert recs["inside.png"]["status"] == "ok"
    assert recs["secret.png"]["status"] == "error" and "outside the images folder" in recs["secret.png"]["error"]
    capsys.readouterr()
    run_cli([*base, "--allow-outside-images"])
    assert [r["status"] for r in read_jsonl(out)] == ["ok", "ok"]


def test_a_remote_image_that_failed_is_not_downloaded_again_for_each_caption(server: str) -> None:
    img = load_image(server + "/trickle", limits=ImageLimits(download_timeout=1.5))
    t0 = time.monotonic()
    for _ in range(3):
        with pytest.raises(ImageError, match="--image-timeout"):
            img.pil()
    assert time.monotonic() - t0 < 4.0  # one deadline, not three
