"""``capjudge serve`` under hostile input, attacked over HTTP on 127.0.0.1 (issue #30, the HTTP
layer): browser reach (media type, Host, CORS), one client's bad row, bodies built to stall the
parser, half-open connections and uploads, characters JSON cannot carry in UTF-8.

Every loop here is bounded in count and time; raw sockets have timeouts.
"""

from __future__ import annotations

import json
import signal
import socket
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from capjudge.serve.body import BodyError, check_shape
from capjudge.serve.hosts import host_rule
from capjudge.serve.served import ServedJudge
from serve_helpers import ANSWER, IMAGES, Gate, ServeProcess, serving


def _sample(i: int, **extra: Any) -> dict[str, Any]:
    return {"id": f"s{i}", "image": "cats.jpg", "caption": f"caption number {i}", **extra}


def _raw(port: int, data: bytes, *, wait: float = 15.0) -> bytes:
    """Send ``data`` on a fresh connection and read until the server closes it (or ``wait`` s)."""
    with socket.create_connection(("127.0.0.1", port), timeout=wait) as sock:
        sock.sendall(data)
        return _read_to_close(sock, wait)


def _read_to_close(sock: socket.socket, wait: float) -> bytes:
    got, deadline = b"", time.monotonic() + wait
    while time.monotonic() < deadline:
        sock.settimeout(max(0.1, deadline - time.monotonic()))
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            raise AssertionError(f"the server kept the connection open over {wait} s (got {got[:200]!r})") from None
        except ConnectionResetError:
            return got
        if not chunk:
            return got
        got += chunk
    raise AssertionError(f"the server kept the connection open over {wait} s (got {got[:200]!r})")


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    server = ServeProcess(tmp_path_factory.mktemp("serve"), "--images", str(IMAGES), "--allowed-host", "judge.lab.example", "--header-timeout", "1", "--body-timeout", "2")
    try:
        yield server
    finally:
        server.stop(kill=True)


# ------------------------------------------------------------------ 3. browser reach
def test_a_body_not_sent_as_application_json_is_415_and_no_cors_header_is_ever_sent(served: ServeProcess) -> None:
    body = json.dumps({"samples": [_sample(0)]})
    # A web page's "simple" cross-origin POST (no preflight) can only send text/plain, form types.
    for ctype in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", None):
        headers = {"Origin": "http://evil.example"} | ({"Content-Type": ctype} if ctype else {})
        r = httpx.post(f"{served.url}/v1/score", content=body, headers=headers)
        assert r.status_code == 415, (ctype, r.status_code)
        assert "application/json" in r.json()["error"]
        assert not any(k.lower().startswith("access-control-") for k in r.headers)
    ok = httpx.post(f"{served.url}/v1/score", content=body, headers={"Content-Type": "application/json; charset=utf-8", "Origin": "http://evil.example"})
    assert ok.status_code == 200 and ok.json()["results"][0]["status"] == "ok"
    assert not any(k.lower().startswith("access-control-") for k in ok.headers)
    preflight = httpx.options(f"{served.url}/v1/score", headers={"Origin": "http://evil.example", "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "content-type"})
    assert preflight.status_code >= 400 and not any(k.lower().startswith("access-control-") for k in preflight.headers)


def test_a_host_the_server_does_not_answer_to_is_421_before_any_route(served: ServeProcess) -> None:
    # DNS rebinding: the attacker's name resolves to 127.0.0.1, the browser sends it as Host.
    for host in (f"evil.example:{served.port}", "evil.example", f"127.0.0.1.evil.example:{served.port}", "judge.lab.example.evil"):
        for method, route in (("GET", "/health"), ("GET", "/v1/info"), ("POST", "/v1/score"), ("GET", "/no-such-route")):
            r = httpx.request(method, f"{served.url}{route}", headers={"Host": host}, json={"samples": [_sample(0)]})
            assert r.status_code == 421, (host, route, r.status_code)
            assert "--allowed-host" in r.json()["error"]
    for host in (f"127.0.0.1:{served.port}", f"localhost:{served.port}", "LOCALHOST", "judge.lab.example", "judge.lab.example:443"):
        r = httpx.post(f"{served.url}/v1/score", headers={"Host": host}, json={"samples": [_sample(0)]})
        assert r.status_code == 200, (host, r.status_code)


def test_the_host_rule_follows_the_listening_address() -> None:
    loopback = host_rule("127.0.0.1")
    assert loopback.allows("127.0.0.1:8000") and loopback.allows("[::1]:8000") and loopback.allows("localhost.")
    assert not loopback.allows("10.1.2.3:8000") and not loopback.allows("evil.example")
    everywhere = host_rule("0.0.0.0", ["judge.lab"])
    assert everywhere.allows("10.1.2.3:8000") and everywhere.allows("[fe80::1]:80") and everywhere.allows("judge.lab:8443")
    assert not everywhere.allows("evil.example:8000")
    one = host_rule("10.1.2.3")
    assert one.allows("10.1.2.3") and not one.allows("10.1.2.4") and not one.allows("evil.example")


def test_an_allowed_host_that_is_not_a_host_name_is_a_usage_error(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from capjudge.cli import main

    monkeypatch.delenv("CAPJUDGE_TOKEN", raising=False)
    for bad in ("http://judge.lab", "*.lab", "judge.lab/v1"):
        assert main(["serve", "--method", "vanilla", "--backend", f"scripted:{ANSWER}", "--port", "0", "--allowed-host", bad]) == 2
        assert f"--allowed-host {bad!r}: give a host name" in capsys.readouterr().err


# ------------------------------------------------------------------ 4. one client's bad row
@pytest.mark.parametrize(
    ("row", "says"),
    [
        ({"caption_a": 5}, "'caption_a' must be a string, got int"),
        ({"caption_b": ["a"]}, "'caption_b' must be a string, got list"),
        ({"image": {"path": "cats.jpg"}}, "'image' must be a string"),
        ({"references": "a cat"}, "'references' must be a list of strings"),
        ({"references": ["a cat", 3]}, "'references[1]' must be a string"),
        ({"id": {"x": 1}, "caption_a": "x" * 200_001}, "'caption_a' is 200,001 characters long"),
    ],
)
def test_a_row_with_a_field_of_the_wrong_type_or_length_is_a_400_naming_the_row(row: dict[str, Any], says: str) -> None:
    pairs = [{"id": "p1", "image": "cats.jpg", "caption_a": "two cats", "caption_b": "a dog"}, {"id": "p2", "image": "dog.jpg", "caption_a": "a dog", "caption_b": "a cat", **row}]
    with serving("Caption A is better. [[A]]", method="gpt4v-pairwise") as srv:
        r = httpx.post(f"{srv.url}/v1/compare", json={"pairs": pairs, "mode": "single"})
        assert r.status_code == 400, r.text
        error = r.json()["error"]
        assert error.startswith("pairs[1]") and says in error
        assert ("(id 'p2')" in error) == isinstance(row.get("id", "p2"), str)
        # The good row alone, and the server, are fine.
        assert httpx.post(f"{srv.url}/v1/compare", json={"pairs": pairs[:1], "mode": "single"}).status_code == 200


def test_a_reward_completion_that_is_not_text_is_a_400_naming_it() -> None:
    with serving() as srv:
        r = httpx.post(f"{srv.url}/v1/reward", json={"completions": ["two cats", {"role": "assistant"}], "images": ["cats.jpg", "cats.jpg"]})
    assert r.status_code == 400 and r.json()["error"].startswith("completions[1] (id '1'): 'caption' must be a string, got dict")


class FragileJudge(ServedJudge):
    """A judge with a bug: a batch holding a row captioned "boom" raises."""

    def score_stream(self, samples: Any) -> Any:
        rows = list(samples)
        if any(isinstance(s, dict) and s.get("caption") == "boom" for s in rows):
            raise RuntimeError("the judge broke on this batch")
        return super().score_stream(rows)


def test_a_judge_failure_in_a_shared_batch_costs_only_the_request_that_causes_it() -> None:
    gate = Gate()
    from capjudge.backends.scripted import ScriptedBackend

    judge = FragileJudge("vanilla", ScriptedBackend(gate), images_root=IMAGES)
    with serving(judge=judge, max_wait_ms=0) as srv, ThreadPoolExecutor(4) as pool:
        first = pool.submit(httpx.post, f"{srv.url}/v1/score", json={"samples": [_sample(0)]}, timeout=60)
        assert gate.entered.wait(30)  # the worker is busy: the next requests queue and go in one batch
        good = pool.submit(httpx.post, f"{srv.url}/v1/score", json={"samples": [_sample(1), _sample(2)]}, timeout=60)
        bad = pool.submit(httpx.post, f"{srv.url}/v1/score", json={"samples": [_sample(3, caption="boom")]}, timeout=60)
        good2 = pool.submit(httpx.post, f"{srv.url}/v1/score", json={"samples": [_sample(4)]}, timeout=60)
        deadline = time.monotonic() + 30
        while (srv.app.state.metrics.registry.get_sample_value("capjudge_queue_depth") or 0) < 4 and time.monotonic() < deadline:
            time.sleep(0.01)
        gate.open()
        assert first.result().status_code == 200
        assert good.result().status_code == 200 and [r["status"] for r in good.result().json()["results"]] == ["ok", "ok"]
        assert good2.result().status_code == 200
        assert bad.result().status_code == 500 and "the judge broke" in bad.result().json()["error"]


# ------------------------------------------------------------------ 6. bodies built to stall the parser
@pytest.mark.parametrize(
    ("body", "status", "says"),
    [
        (b'{"samples": [], "x": [' + b"[]," * 400_000 + b"[]]}", 413, "arrays and objects"),  # millions of empty lists, scaled down
        (b'{"samples": [], "x": [' + b"0," * 400_000 + b"0]}", 413, "values"),
        (b'{"samples": [], "x": ' + b"[" * 5000 + b"]" * 5000 + b"}", 400, "nested over"),
        (b'{"samples": [], "x": "' + b'\\"[' * 200_000 + b'"}', 200, ""),  # brackets inside a string are text
    ],
)
def test_a_body_shaped_to_stall_the_parser_is_refused_before_it_is_built(body: bytes, status: int, says: str) -> None:
    with serving() as srv:
        r = httpx.post(f"{srv.url}/v1/score", content=body, headers={"Content-Type": "application/json"}, timeout=60)
        assert r.status_code == status, r.text[:300]
        assert r.headers["content-type"] == "application/json"
        assert says in r.json().get("error", "")
        assert httpx.get(f"{srv.url}/health").status_code == 200


def test_the_shape_scan_reads_escapes_as_json_does() -> None:
    check_shape(b'{"a": "\\\\", "b": ["\\\\\\"]"]}', 1)  # an escaped backslash ends before the quote
    with pytest.raises(BodyError, match="more closing"):
        check_shape(b"]" * 5000, 1)
    rows = [_sample(k, references=["a cat", "a \"quoted\" [cat]"]) for k in range(64)]
    check_shape(json.dumps({"samples": rows}).encode(), 64)
    with pytest.raises(BodyError):
        check_shape(json.dumps({"samples": rows}).encode(), 4)


# ------------------------------------------------------------------ 7. connections
def test_a_half_open_connection_is_closed_after_the_header_timeout(served: ServeProcess) -> None:
    for head in (b"", b"POST /v1/score HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"):
        t0 = time.monotonic()
        assert _raw(served.port, head, wait=15) == b""
        assert time.monotonic() - t0 < 15
    assert httpx.get(f"{served.url}/health").status_code == 200


def test_a_body_that_stops_arriving_is_408_after_the_body_timeout(served: ServeProcess) -> None:
    head = f"POST /v1/score HTTP/1.1\r\nHost: 127.0.0.1:{served.port}\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n".encode()
    answer = _raw(served.port, head + b'{"samples": [', wait=20)
    assert answer.startswith(b"HTTP/1.1 408") and b"--body-timeout" in answer


def test_connections_beyond_the_limit_are_refused_and_closed(tmp_path: Path) -> None:
    server = ServeProcess(tmp_path, "--images", str(IMAGES), "--max-connections", "4")
    held: list[socket.socket] = []
    try:
        for _ in range(4):  # idle connections (no request head yet), up to the limit
            held.append(socket.create_connection(("127.0.0.1", server.port), timeout=10))
        time.sleep(0.2)
        refused = _raw(server.port, b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", wait=10)
        assert refused.startswith(b"HTTP/1.1 503") and b"--max-connections" in refused
        for sock in held:
            sock.close()
        deadline = time.monotonic() + 10
        while True:  # the held ones gone, the server takes connections again
            try:
                if httpx.get(f"{server.url}/health", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "the server did not take connections again"
            time.sleep(0.1)
    finally:
        for sock in held:
            sock.close()
        server.stop(kill=True)


def test_sigterm_drops_a_half_sent_upload_after_the_grace_period_and_exits(tmp_path: Path) -> None:
    server = ServeProcess(tmp_path, "--images", str(IMAGES), "--graceful-seconds", "1")
    try:
        sock = socket.create_connection(("127.0.0.1", server.port), timeout=30)
        head = f"POST /v1/score HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n".encode()
        sock.sendall(head + b'{"samples": [')
        time.sleep(0.5)  # the request is under way, its body half sent
        server.proc.send_signal(signal.SIGTERM)
        assert server.proc.wait(30) == 0
        assert _read_to_close(sock, 5).startswith(b"HTTP/1.1 408")
        sock.close()
    finally:
        server.stop(kill=True)


# ------------------------------------------------------------------ 12. errors are JSON, rows escaped
def test_a_lone_surrogate_is_escaped_in_its_row_and_the_other_rows_kept() -> None:
    body = b'{"samples": [{"id": "s0", "image": "cats.jpg", "caption": "a \\ud800 cat"}, {"id": "s1", "image": "cats.jpg", "caption": "two cats"}]}'
    with serving() as srv:
        r = httpx.post(f"{srv.url}/v1/score", content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    first, second = r.json()["results"]
    assert first["caption"] == "a \ud800 cat" and second["caption"] == "two cats"
    # the row with the lone surrogate is its own error record (no tokenizer or server reads one), the other is judged
    assert [first["status"], second["status"]] == ["error", "ok"] and "lone surrogate" in first["error"]


def test_every_error_is_json() -> None:
    with serving() as srv:
        for method, route, status in (("GET", "/no-such-route", 404), ("DELETE", "/v1/score", 405), ("GET", "/v1/score", 405)):
            r = httpx.request(method, f"{srv.url}{route}")
            assert r.status_code == status and r.headers["content-type"] == "application/json", (route, r.text)
            assert r.json()["error"]
        deep = b'{"samples": ' + b"[" * 5000 + b"]" * 5000 + b"}"
        r = httpx.post(f"{srv.url}/v1/score", content=deep, headers={"Content-Type": "application/json"})
        assert r.status_code == 400 and "nested" in r.json()["error"] and "Traceback" not in r.text

