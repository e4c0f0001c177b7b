"""Follow-ups of the serve hardening (issue 30): what a client sends and what a route means.

- ``RemoteJudge`` sends encoded bytes and PIL images inline (a decoded ``datasets`` image column
  through ``make_reward(remote=)``), each read and encoded once per request.
- URL images are fetched by the client (its user's own policy) and sent inline, so that a server
  that fetches no URLs (its default) judges them; a failed fetch is that row's error record.
- A row the server's door would refuse (a caption that is not a string, ...) is that row's own
  (non-resumable) error record on the client; the others are judged.
- ``compare --remote --order single`` sends each pair's shown-first caption (``--seed``, the pairs
  file's ``shown_first`` column): the records of a local run.
- ``/v1/reward`` takes ``normalize`` (default false: the method's scale, as before).
- CapMAS coverage on a served inline image finds its questions by the client's image name.
"""

from __future__ import annotations

import contextlib
import io
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from capjudge.backends.scripted import ScriptedBackend
from capjudge.cli import main
from capjudge.data.types import Sample
from capjudge.judges.judge import Judge
from capjudge.serve import RemoteJudge
from capjudge.serve.served import ServedJudge
from serve_helpers import ANSWER, EXAMPLES, IMAGES, serving

CATS = (IMAGES / "cats.jpg").read_bytes()


def local_records(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records a local judge of the served judge (vanilla, scripted ANSWER) makes of ``rows``."""
    with Judge("vanilla", ScriptedBackend(ANSWER)) as judge:
        return [r.to_dict() for r in judge.score_many(rows)]


# -- item 1: bytes and PIL images ------------------------------------------------------------------------
def test_bytes_and_pil_images_are_sent_inline_once_each(monkeypatch: pytest.MonkeyPatch) -> None:
    from PIL import Image

    import capjudge.serve.wire as wire

    pil = Image.open(io.BytesIO(CATS))
    pil.load()
    rows = [
        {"id": "b1", "image": CATS, "caption": "two cats"},
        {"id": "b2", "image": CATS, "caption": "a cat"},
        {"id": "p1", "image": pil, "caption": "two cats"},
        {"id": "p2", "image": pil, "caption": "cats"},
    ]
    loads: list[str] = []
    real = wire.load_image

    def counting(image: Any, **kwargs: Any) -> Any:
        loads.append(type(image).__name__)
        return real(image, **kwargs)

    monkeypatch.setattr(wire, "load_image", counting)
    with serving(images=None) as srv, RemoteJudge(srv.url) as judge:
        got = [r.to_dict() for r in judge.score_many(rows)]
    assert [r["status"] for r in got] == ["ok"] * 4, got
    assert got == local_records(rows)  # named as a local run names them: "<N bytes>", "<PIL image WxH>"
    assert got[0]["image"] == f"<{len(CATS)} bytes>" and got[2]["image"].startswith("<PIL image ")
    assert len(loads) == 2  # one read and encoding per distinct image of the request
    with serving(images=None) as srv, RemoteJudge(srv.url) as judge:
        (empty,) = judge.score_many([{"id": "e", "image": b"", "caption": "cats"}])
    assert empty.status == "error" and "'<0 bytes>' is empty" in (empty.error or "") and empty.image == "<0 bytes>"


def test_make_reward_remote_takes_decoded_image_columns() -> None:
    from PIL import Image

    from capjudge.reward import make_reward

    pil = Image.open(io.BytesIO(CATS))
    call = {"prompts": ["Describe."] * 3, "completions": ["two cats", "a cat", "cats"], "image": [pil, {"bytes": CATS, "path": None}, CATS]}
    with serving(images=None) as srv:
        reward = make_reward(remote=srv.url)
        try:
            assert reward(**call) == [0.85, 0.85, 0.85]
        finally:
            reward.close()


# -- item 2: URL images fetched by the client -----------------------------------------------------------
class _Images(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if self.path == "/cats.jpg":
            self.send_response(200)
            self.send_header("Content-Type", "image/jpeg")
            self.send_header("Content-Length", str(len(CATS)))
            self.end_headers()
            self.wfile.write(CATS)
        else:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - silence stderr
        pass


@contextlib.contextmanager
def image_host() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Images)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def test_url_images_are_fetched_by_the_client_and_judged_by_a_default_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CAPJUDGE_TOKEN", raising=False)
    with image_host() as host, serving(images=None) as srv:  # a default server: it fetches no URL
        good, missing = f"{host}/cats.jpg", f"{host}/missing.jpg"
        rows = [{"id": "u1", "image": good, "caption": "two cats"}, {"id": "u2", "image": missing, "caption": "cats"}, {"id": "u3", "image": good, "caption": "a cat"}]
        with RemoteJudge(srv.url) as judge:
            got = list(judge.score_many(rows))
        inp, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
        inp.write_text("".join(json.dumps(r) + "\n" for r in rows))
        rc = main(["score", "--remote", srv.url, "--input", str(inp), "--out", str(out), "--quiet"])
    assert [r.status for r in got] == ["ok", "error", "ok"], got
    assert got[0].image == good and got[0].score == 85.0  # named by its URL, as a local run names it
    assert "could not be downloaded" in (got[1].error or "") and "allow-url-images" not in (got[1].error or "")
    assert not got[1].details.get("resumable")  # the image's error, as a local run's record
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["status"] for r in recs] == ["ok", "error", "ok"] and rc == 0  # a failed image is its own record, as in a local run


# -- item 3: rows the server would refuse ---------------------------------------------------------------
def test_a_row_the_server_would_refuse_is_its_own_error_record() -> None:
    rows: list[Any] = [
        {"id": "g1", "image": "cats.jpg", "caption": "two cats"},
        {"id": "n1", "image": "cats.jpg", "caption": 5},
        {"id": "r1", "image": "cats.jpg", "caption": "cats", "references": "not a list"},
        {"id": "i1", "image": 7, "caption": "cats"},
        Sample("cats.jpg", "a cat", id="g2"),
    ]
    with serving() as srv, RemoteJudge(srv.url, images_root=IMAGES, batch_size=len(rows)) as judge:
        got = list(judge.score_many(rows))
        only_bad = list(judge.score_many(rows[1:3]))  # a request with no row to send
    assert [r.status for r in got] == ["ok", "error", "error", "error", "ok"], got
    assert [r.id for r in got] == ["g1", "n1", "r1", "i1", "g2"]
    assert "sample n1: 'caption' must be a string, got int" in (got[1].error or "")
    assert "'references' must be a list of strings" in (got[2].error or "")
    assert "'image' must be a string" in (got[3].error or "")
    for r in got[1:4] + only_bad:
        assert r.status == "error" and not r.details.get("resumable"), r  # asking again gives the same answer
    assert [r.status for r in only_bad] == ["error", "error"]


# -- item 4: compare --remote --order single ------------------------------------------------------------
def test_compare_remote_single_order_follows_seed_and_shown_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CAPJUDGE_TOKEN", raising=False)
    spec = "scripted:Caption A is better. [[A]]"  # the caption shown first always wins: the order decides the verdict
    base = [json.loads(line) for line in (EXAMPLES / "pairs.jsonl").read_text().splitlines() if line.strip()]
    pairs = []
    for k in range(12):
        row = {**base[k % len(base)], "id": f"p{k}", "caption_a": f"{base[k % len(base)]['caption_a']} ({k})"}
        if k % 3 == 1:
            row["shown_first"] = "B"
        elif k % 3 == 2:
            row["shown_first"] = "A"
        pairs.append(row)
    inp = tmp_path / "pairs.jsonl"
    inp.write_text("".join(json.dumps(p) + "\n" for p in pairs))
    common = ["--images", str(IMAGES), "--input", str(inp), "--order", "single", "--seed", "7", "--quiet"]
    local, remote = tmp_path / "local.jsonl", tmp_path / "remote.jsonl"
    assert main(["compare", "--backend", spec, "--no-cache", "--out", str(local), *common]) == 0
    with serving(judge=ServedJudge("gpt4v-pairwise", spec, images_root=IMAGES)) as srv:
        assert main(["compare", "--remote", srv.url, "--out", str(remote), *common]) == 0
    assert remote.read_bytes() == local.read_bytes()
    firsts = [json.loads(line)["details"]["shown_first"] for line in remote.read_text().splitlines()]
    assert [firsts[k] for k in range(1, 12, 3)] == ["B"] * 4 and [firsts[k] for k in range(2, 12, 3)] == ["A"] * 4


def test_the_server_refuses_a_shown_first_that_is_not_a_or_b() -> None:
    with serving() as srv:
        r = httpx.post(f"{srv.url}/v1/compare", json={"pairs": [{"id": "x", "image": "cats.jpg", "caption_a": "a", "caption_b": "b", "shown_first": "C"}]})
    assert r.status_code == 400 and "shown_first" in r.json()["error"]


# -- item 5: /v1/reward's normalize ---------------------------------------------------------------------
def test_reward_route_normalizes_when_asked() -> None:
    body: dict[str, Any] = {"completions": ["two cats", "cats"], "images": ["cats.jpg", "missing.jpg"]}
    with serving() as srv:
        plain = httpx.post(f"{srv.url}/v1/reward", json=body).json()
        unit = httpx.post(f"{srv.url}/v1/reward", json={**body, "normalize": True}).json()
        scale = httpx.post(f"{srv.url}/v1/reward", json={**body, "normalize": False}).json()
        bad = httpx.post(f"{srv.url}/v1/reward", json={**body, "normalize": "yes"})
    assert plain["rewards"] == [85, None] and scale["rewards"] == plain["rewards"]  # the wire's meaning kept by default
    assert unit["rewards"] == [0.85, None]
    assert bad.status_code == 400 and "normalize" in bad.json()["error"]


# -- item 6: CapMAS coverage on a served inline image ---------------------------------------------------
def test_capmas_coverage_on_a_served_inline_image_reads_the_clients_names_questions(tmp_path: Path) -> None:
    vqa = tmp_path / "vqa"
    vqa.mkdir()
    (vqa / "cats.json").write_text(json.dumps({"questions": ["How many cats?\nA) One\nB) Two"], "answers": ["B"]}))
    backend = ScriptedBackend("0. B) Two")
    judge = ServedJudge("capmas-coverage", backend, method_options={"vqa_dir": str(vqa)})
    with serving(judge=judge) as srv, RemoteJudge(srv.url, images_root=IMAGES) as remote:
        (got,) = remote.score_many([{"id": "c", "image": "cats.jpg", "caption": "Two cats lie on a blanket."}])
    assert got.ok and got.score == 1.0, got.error
    assert got.image == "cats.jpg"
