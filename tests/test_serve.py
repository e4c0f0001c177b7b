"""capjudge serve through real HTTP on 127.0.0.1: token, caps, bad input, queue, batching, metrics."""

from __future__ import annotations

import base64
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from capjudge.cli import main
from serve_helpers import ANSWER, IMAGES, Gate, auth, b64, serving

TOKEN = "serve-test-token-0123456789"


def _sample(i: int, image: str = "cats.jpg", **extra: Any) -> dict[str, Any]:
    return {"id": f"s{i}", "image": image, "caption": f"caption number {i}", **extra}


def _queued(srv: Any) -> float:
    return float(srv.app.state.metrics.registry.get_sample_value("capjudge_queue_depth") or 0)


def test_health_is_open_and_every_other_route_needs_the_token() -> None:
    with serving(token=TOKEN) as srv:
        assert httpx.get(f"{srv.url}/health").json() == {"status": "ok"}
        for method, route in (("GET", "/v1/info"), ("GET", "/metrics"), ("POST", "/v1/score"), ("POST", "/v1/compare"), ("POST", "/v1/reward")):
            for headers in ({}, auth("wrong-token-wrong-token"), {"Authorization": TOKEN}):
                r = httpx.request(method, f"{srv.url}{route}", headers=headers, json={"samples": [_sample(0)]})
                assert r.status_code == 401, (route, headers)
                assert r.headers["www-authenticate"] == "Bearer"
                assert TOKEN not in r.text
        r = httpx.post(f"{srv.url}/v1/score", headers=auth(TOKEN), json={"samples": [_sample(0)]})
        assert r.status_code == 200
        (rec,) = r.json()["results"]
        assert (rec["status"], rec["score"], rec["id"], rec["image"]) == ("ok", 85.0, "s0", "cats.jpg")
        info = httpx.get(f"{srv.url}/v1/info", headers=auth(TOKEN)).json()
        assert info["method"]["name"] == "vanilla" and info["backend"] == srv.judge.backend_spec


def test_images_as_path_base64_and_data_url_give_the_same_record_and_bad_ones_name_the_item(corrupt_image: Any) -> None:
    data_url = "data:image/jpeg;base64," + b64(IMAGES / "cats.jpg")
    rows = [
        _sample(0),  # a path under the server's --images
        {**_sample(1), "image_b64": b64(IMAGES / "cats.jpg")},  # bytes sent, named cats.jpg
        _sample(2, image=data_url),
        {**_sample(3, image="broken.jpg"), "image_b64": base64.b64encode(corrupt_image.read_bytes()).decode()},
        {**_sample(4, image="notb64.jpg"), "image_b64": "!!! not base64 !!!"},
        _sample(5, image="../../pyproject.toml"),  # leaves --images
        _sample(6, image="missing.jpg"),
        {"id": "s7", "image": "cats.jpg"},  # no caption
        "not an object",
        {**_sample(9, image="client.jpg"), "image_error": "image 'client.jpg' not found (looked for 'x/client.jpg')"},
    ]
    with serving() as srv:
        r = httpx.post(f"{srv.url}/v1/score", json={"samples": rows})
    assert r.status_code == 200
    recs = r.json()["results"]
    assert len(recs) == len(rows)
    assert [rec["status"] for rec in recs[:3]] == ["ok", "ok", "ok"]
    assert recs[0]["image"] == recs[1]["image"] == "cats.jpg"
    assert {k: v for k, v in recs[0].items() if k not in ("id", "caption")} == {k: v for k, v in recs[1].items() if k not in ("id", "caption")}
    errors = {rec["id"]: rec["error"] for rec in recs if rec["status"] == "error"}
    assert "could not be decoded" in errors["s3"] and "'broken.jpg'" in errors["s3"] and errors["s3"].startswith("sample s3:")
    assert "not valid base64" in errors["s4"] and "notb64.jpg" in errors["s4"]
    assert "outside the images folder" in errors["s5"]
    assert "not found" in errors["s6"]
    assert any("missing field 'caption'" in e for e in errors.values())
    assert any("not a Sample or a dict" in e for e in errors.values())
    assert errors["s9"] == "sample s9: image 'client.jpg' not found (looked for 'x/client.jpg')"


def test_body_cap_is_413_and_image_cap_is_that_items_error() -> None:
    big = b64(IMAGES / "cats.jpg")
    with serving(max_body_bytes=4096) as srv:
        r = httpx.post(f"{srv.url}/v1/score", json={"samples": [{**_sample(0), "image_b64": big}]})
        assert r.status_code == 413 and "cap of 4,096 bytes" in r.json()["error"]
        assert httpx.post(f"{srv.url}/v1/score", json={"samples": [_sample(0)]}).status_code == 200
    with serving(max_image_bytes=1000) as srv:
        r = httpx.post(f"{srv.url}/v1/score", json={"samples": [{**_sample(0), "image_b64": big}, _sample(1)]})
    assert r.status_code == 200
    first, second = r.json()["results"]
    assert first["status"] == "error" and "size cap of 1,000 bytes" in first["error"] and "cats.jpg" in first["error"]
    assert second["status"] == "ok"


@pytest.mark.parametrize(
    ("body", "status", "says"),
    [(b"{not json", 400, "not JSON"), (b"[1, 2]", 400, "JSON object"), (b'{"samples": "x"}', 400, "'samples'"), (b'{"rows": []}', 400, "'samples'")],
)
def test_a_body_that_is_not_what_the_route_takes_is_a_400_naming_it(body: bytes, status: int, says: str) -> None:
    with serving() as srv:
        r = httpx.post(f"{srv.url}/v1/score", content=body, headers={"content-type": "application/json"})
    assert r.status_code == status and says in r.json()["error"]


def test_a_full_queue_answers_429_with_retry_after_and_the_queued_requests_are_still_answered() -> None:
    gate = Gate()
    with serving(gate, max_queue=2, max_wait_ms=0) as srv, ThreadPoolExecutor(4) as pool:
        first = pool.submit(httpx.post, f"{srv.url}/v1/score", json={"samples": [_sample(0)]}, timeout=60)
        assert gate.entered.wait(30)  # the worker holds the first request
        queued = pool.submit(httpx.post, f"{srv.url}/v1/score", json={"samples": [_sample(1), _sample(2)]}, timeout=60)
        while _queued(srv) < 2:
            threading.Event().wait(0.01)
        refused = httpx.post(f"{srv.url}/v1/score", json={"samples": [_sample(3)]})
        assert refused.status_code == 429
        assert int(refused.headers["retry-after"]) >= 1
        assert "queue is full" in refused.json()["error"]
        too_many = httpx.post(f"{srv.url}/v1/score", json={"samples": [_sample(k) for k in range(3)]})
        assert too_many.status_code == 413 and "--max-queue" in too_many.json()["error"]
        gate.open()
        assert first.result().status_code == 200 and queued.result().status_code == 200
        assert [r["id"] for r in queued.result().json()["results"]] == ["s1", "s2"]


def test_concurrent_requests_go_to_the_backend_together_grouped_by_image() -> None:
    gate = Gate()
    with serving(gate, max_batch=64, max_wait_ms=0) as srv, ThreadPoolExecutor(8) as pool:
        first = pool.submit(httpx.post, f"{srv.url}/v1/score", json={"samples": [_sample(0)]}, timeout=60)
        assert gate.entered.wait(30)
        # While the worker is busy, six clients send rows of two images, interleaved.
        later = [
            pool.submit(httpx.post, f"{srv.url}/v1/score", json={"samples": [_sample(10 + k, image="cats.jpg" if k % 2 else "dog.jpg"), {**_sample(20 + k, image="cats.jpg" if k % 2 == 0 else "dog.jpg")}]}, timeout=60)
            for k in range(6)
        ]
        while _queued(srv) < 12:
            threading.Event().wait(0.01)
        gate.open()
        assert first.result().status_code == 200
        results = [f.result().json()["results"] for f in later]
        metrics = httpx.get(f"{srv.url}/metrics").text
    assert all(r["status"] == "ok" for rows in results for r in rows)
    assert srv.backend.batches == [1, 12]  # the twelve queued rows in one backend call
    labels = [req.images[0].label for req in srv.backend.calls[1:]]
    assert labels == sorted(labels, key=labels.index)  # whole image groups: each image's rows together
    assert len({(a, b) for a, b in zip(labels, labels[1:]) if a != b}) == 1
    families = {f.name: f for f in text_string_to_metric_families(metrics)}
    sizes = {s.labels.get("le"): s.value for s in families["capjudge_batch_size"].samples if s.name.endswith("_bucket")}
    assert sizes["1.0"] == 1 and sizes["16.0"] == 2
    requests = {(s.labels["route"], s.labels["status"]): s.value for s in families["capjudge_requests"].samples if s.name == "capjudge_requests_total"}
    assert requests[("/v1/score", "200")] == 7
    assert "capjudge_request_seconds" in families and "capjudge_queue_depth" in families


def test_an_images_queued_rows_stay_in_one_batch_past_max_batch_as_a_local_run_packs_them() -> None:
    gate = Gate()
    with serving(gate, max_batch=4, max_wait_ms=0) as srv, ThreadPoolExecutor(10) as pool:
        first = pool.submit(httpx.post, f"{srv.url}/v1/score", json={"samples": [_sample(0, image="dog.jpg")]}, timeout=60)
        assert gate.entered.wait(30)
        # Queued while the worker is busy: six one-row requests of cats.jpg, two of dog.jpg, interleaved.
        images = ["cats.jpg", "dog.jpg", "cats.jpg", "cats.jpg", "dog.jpg", "cats.jpg", "cats.jpg", "cats.jpg"]
        later = []
        for k, image in enumerate(images):
            later.append(pool.submit(httpx.post, f"{srv.url}/v1/score", json={"samples": [_sample(10 + k, image=image)]}, timeout=60))
            while _queued(srv) < k + 1:
                threading.Event().wait(0.01)
        gate.open()
        assert first.result().status_code == 200
        assert all(f.result().status_code == 200 for f in later)
    # The oldest queued request is of cats.jpg: its six rows go together (one prefix), past
    # max_batch = 4, as Judge(batch_size=4).score_many packs a group of six; then dog.jpg's two.
    assert srv.backend.batches == [1, 6, 2]
    assert [req.images[0].label for req in srv.backend.calls[1:7]] == ["cats.jpg"] * 6


def test_compare_and_reward_routes() -> None:
    pairs = [{"id": "p1", "image": "cats.jpg", "caption_a": "two cats", "caption_b": "a dog"}, {"id": "p2", "image": "dog.jpg", "caption_a": "a dog", "caption_b": "a cat"}]
    with serving("Caption A is better. [[A]]", method="gpt4v-pairwise") as srv:
        r = httpx.post(f"{srv.url}/v1/compare", json={"pairs": pairs})
        assert r.status_code == 200
        recs = r.json()["results"]
        assert [x["id"] for x in recs] == ["p1", "p2"] and all(x["mode"] == "pairwise" for x in recs)
        bad = httpx.post(f"{srv.url}/v1/compare", json={"pairs": pairs, "mode": "grading"})
        assert bad.status_code == 400 and "grading" in bad.json()["error"]
    with serving() as srv:
        r = httpx.post(f"{srv.url}/v1/reward", json={"completions": ["two cats", "a dog", ""], "images": ["cats.jpg", {"image": "dog.jpg", "image_b64": b64(IMAGES / "dog.jpg")}, "cats.jpg"]})
        assert r.status_code == 200
        body = r.json()
        assert body["rewards"] == [85.0, 85.0, None]
        assert "empty caption" in body["results"][2]["error"]
        mismatch = httpx.post(f"{srv.url}/v1/reward", json={"completions": ["a"], "images": []})
        assert mismatch.status_code == 400


def test_serve_refuses_to_listen_beyond_loopback_without_a_token(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("CAPJUDGE_TOKEN", raising=False)
    code = main(["serve", "--method", "vanilla", "--backend", f"scripted:{ANSWER}", "--host", "0.0.0.0", "--port", "0"])
    assert code == 2
    assert "give a token" in capsys.readouterr().err
    monkeypatch.setenv("CAPJUDGE_TOKEN", "  ")
    assert main(["serve", "--method", "vanilla", "--backend", f"scripted:{ANSWER}", "--port", "0"]) == 2


def test_info_shows_the_backend_as_records_do_with_credentials_masked() -> None:
    from capjudge.serve.served import ServedJudge

    judge = ServedJudge("vanilla", "openai-compatible:http://user:secretpw123456@127.0.0.1:9/v1#m")
    with serving(judge=judge, token=TOKEN) as srv:
        r = httpx.get(f"{srv.url}/v1/info", headers=auth(TOKEN))
    assert r.status_code == 200
    assert r.json()["backend"] == "openai-compatible:http://***@127.0.0.1:9/v1#m"
    assert "secretpw123456" not in r.text
