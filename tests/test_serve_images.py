"""What a shared judge reads and fetches of the images clients name (issue #30, items 1, 2, 5, 13, 14).

Every attack goes over HTTP to a real server on 127.0.0.1 (uvicorn in a thread, or the
``capjudge serve`` process); the image hosts are servers the tests start on loopback addresses.
Where a test needs a host that counts as public, 127.0.0.2 is made to count as one (the address
check is replaced for that test); everything else on loopback stays private.
"""

from __future__ import annotations

import base64
import contextlib
import logging
import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import httpx
import pytest

from capjudge.backends.scripted import ScriptedBackend
from capjudge.cli import main
from capjudge.data import imagesources
from capjudge.data.images import ImageError, ImageLimits, download, fetch_many
from capjudge.data.imagesources import ImageSources, address_allowed
from capjudge.reward import make_async_reward, make_reward
from capjudge.serve.served import ServedJudge
from capjudge.serve.wire import InlineImage
from serve_helpers import ANSWER, IMAGES, ServeProcess, b64, serving

CATS = IMAGES / "cats.jpg"
NOT_READ = "this judge reads no image paths"
NOT_FETCHED = "this judge fetches no image URLs"
NEUTRAL = "could not be fetched: refused, unreachable, not found, too large or too slow"


# ------------------------------------------------------------------------------- image hosts
class ImageHost:
    """An HTTP server on a loopback address: ``/cats.jpg``, ``/redirect?to=URL`` (302),
    ``/missing`` (404), ``/huge`` (announces 1 GB), ``/text`` (not an image), ``/hold/...`` (the
    picture once :meth:`release` is called, at most 30 s later). ``hits`` records each request's
    path and Host header; ``held`` counts the requests waiting at ``/hold`` at once (its maximum in
    ``most_held``)."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.hits: list[tuple[str, str]] = []
        self.held = 0
        self.most_held = 0
        self.lock = threading.Lock()
        self.released = threading.Event()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802 - the http.server API
                with owner.lock:
                    owner.hits.append((self.path, self.headers.get("Host", "")))
                with contextlib.suppress(OSError):  # the client hung up (a deadline)
                    self._answer()

            def _answer(self) -> None:
                if self.path.startswith("/redirect?to="):
                    self.send_response(302)
                    self.send_header("Location", unquote(self.path.split("=", 1)[1]))
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                elif self.path == "/missing":
                    self.send_error(404)
                elif self.path == "/huge":
                    self.send_response(200)
                    self.send_header("Content-Length", str(10**9))
                    self.end_headers()
                    self.wfile.write(b"\0" * 1024)
                elif self.path == "/text":
                    self._send(b"hello, not a picture", "text/plain")
                else:
                    if self.path.startswith("/hold/"):
                        with owner.lock:
                            owner.held += 1
                            owner.most_held = max(owner.most_held, owner.held)
                        owner.released.wait(30)
                        with owner.lock:
                            owner.held -= 1
                    self._send(CATS.read_bytes(), "image/jpeg")

            def _send(self, body: bytes, kind: str) -> None:
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer((host, 0), Handler)
        self.server.daemon_threads = True
        self.base = f"http://{host}:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def url(self, path: str) -> str:
        return self.base + path

    def paths(self) -> list[str]:
        with self.lock:
            return [p for p, _ in self.hits]

    def close(self) -> None:
        self.released.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def host() -> Iterator[ImageHost]:
    h = ImageHost()
    try:
        yield h
    finally:
        h.close()


@pytest.fixture
def public_host(monkeypatch: pytest.MonkeyPatch) -> Iterator[ImageHost]:
    """A host on 127.0.0.2 that the address check takes for a public one (only that address)."""
    try:
        h = ImageHost("127.0.0.2")
    except OSError:
        pytest.skip("127.0.0.2 cannot be bound here")
    real = imagesources.address_allowed
    monkeypatch.setattr(imagesources, "address_allowed", lambda a: a == "127.0.0.2" or real(a))
    try:
        yield h
    finally:
        h.close()


def decoding(request: Any) -> str:
    """A scripted backend that decodes the picture, as a local backend (HF, llama.cpp) does."""
    request.images[0].pil()
    return ANSWER


def judge(sources: ImageSources | None = None, *, images: Path | None = IMAGES, **options: Any) -> ServedJudge:
    return ServedJudge("vanilla", ScriptedBackend(decoding), images_root=images, image_sources=sources, **options)


def score(srv: Any, rows: list[dict[str, Any]], **kw: Any) -> list[dict[str, Any]]:
    r = httpx.post(f"{srv.url}/v1/score", json={"samples": rows}, timeout=kw.pop("timeout", 60))
    assert r.status_code == 200, r.text
    results: list[dict[str, Any]] = r.json()["results"]
    return results


def row(i: int, image: str, **extra: Any) -> dict[str, Any]:
    return {"id": f"s{i}", "image": image, "caption": f"caption {i}", **extra}


# ------------------------------------------------------------------------------- item 1: paths
def test_without_images_the_server_reads_no_path_a_client_names(tmp_path: Path) -> None:
    secret = tmp_path / "secret.jpg"
    secret.write_bytes(CATS.read_bytes())
    rows = [row(0, str(secret)), row(1, str(tmp_path / "nothing-here.jpg")), row(2, "/etc/passwd"), row(3, "cats.jpg"), row(4, "x.jpg", image_b64=b64(CATS))]
    with serving(images=None) as srv:
        recs = score(srv, rows)
        reward = httpx.post(f"{srv.url}/v1/reward", json={"completions": ["a", "b"], "images": [str(secret), {"image": "y.jpg", "image_b64": b64(CATS)}]}).json()
        pairs = httpx.post(f"{srv.url}/v1/compare", json={"pairs": [{"id": "p", "image": str(secret), "caption_a": "a", "caption_b": "b"}]}).json()
    errors = [rec.get("error") or "" for rec in recs[:4]]
    # One text for a file that exists, one that does not, one that is not a picture: nothing told apart.
    assert all(NOT_READ in e and "image_b64" in e and "--images DIR" in e for e in errors), errors
    assert not any(w in e for e in errors for w in ("not found", "could not be decoded", "could not be read"))
    assert recs[4]["status"] == "ok" and recs[4]["image"] == "x.jpg"
    assert reward["rewards"] == [None, 85.0] and NOT_READ in reward["results"][0]["error"]
    assert pairs["results"][0]["status"] == "error" and NOT_READ in pairs["results"][0]["error"]


def test_with_images_paths_stay_confined_to_the_folder(tmp_path: Path) -> None:
    with serving() as srv:  # --images examples/images
        inside, outside = score(srv, [row(0, "cats.jpg"), row(1, str(tmp_path))])
    assert inside["status"] == "ok"
    assert "outside the images folder" in outside["error"]


def test_capjudge_serve_reads_only_inline_images_unless_its_options_widen_it(tmp_path: Path, host: ImageHost) -> None:
    secret = tmp_path / "secret.jpg"
    secret.write_bytes(CATS.read_bytes())
    rows = [row(0, str(secret)), row(1, "cats.jpg"), row(2, host.url("/cats.jpg")), row(3, "n.jpg", image_b64=b64(CATS))]
    server = ServeProcess(tmp_path)
    try:
        plain = score(server, rows)
    finally:
        server.stop()
    assert [r["status"] for r in plain] == ["error", "error", "error", "ok"]
    assert NOT_READ in plain[0]["error"] and NOT_READ in plain[1]["error"]
    assert NOT_FETCHED in plain[2]["error"] and "--allow-url-images" in plain[2]["error"]
    assert host.paths() == []
    server = ServeProcess(tmp_path, "--images", str(IMAGES), "--allow-url-images", "--allow-private-urls")
    try:
        wide = score(server, rows)
    finally:
        server.stop()
    assert [r["status"] for r in wide] == ["error", "ok", "ok", "ok"]
    assert "outside the images folder" in wide[0]["error"]  # an absolute path still leaves --images
    assert wide[2]["image"] == host.url("/cats.jpg") and host.paths() == ["/cats.jpg"]


def test_allow_private_urls_alone_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--method", "vanilla", "--backend", f"scripted:{ANSWER}", "--port", "0", "--allow-private-urls"]) == 2
    assert "--allow-url-images" in capsys.readouterr().err


# ------------------------------------------------------------------------------- item 2: URLs
def test_url_images_are_not_fetched_by_default(host: ImageHost) -> None:
    with serving(judge=judge()) as srv:
        (rec,) = score(srv, [row(0, host.url("/cats.jpg"))])
    assert rec["status"] == "error" and NOT_FETCHED in rec["error"] and "--allow-url-images" in rec["error"]
    assert host.paths() == []  # never asked


def test_allowed_url_images_refuse_private_addresses_unless_allowed(host: ImageHost) -> None:
    port = host.server.server_address[1]
    urls = [host.url("/cats.jpg"), f"http://localhost:{port}/cats.jpg", f"http://[::ffff:127.0.0.1]:{port}/cats.jpg"]
    with serving(judge=judge(ImageSources.shared(urls=True))) as srv:
        recs = score(srv, [row(k, u) for k, u in enumerate(urls)])
    assert all(r["status"] == "error" and NEUTRAL in r["error"] for r in recs), recs
    assert host.paths() == []
    with serving(judge=judge(ImageSources.shared(urls=True, private_urls=True))) as srv:
        (rec,) = score(srv, [row(0, urls[0])])
    assert rec["status"] == "ok" and rec["image"] == urls[0] and host.paths() == ["/cats.jpg"]


def test_a_redirect_is_checked_at_every_hop(host: ImageHost, public_host: ImageHost) -> None:
    to_private = public_host.url("/redirect?to=" + host.url("/cats.jpg"))
    to_public = public_host.url("/redirect?to=/cats.jpg")
    with serving(judge=judge(ImageSources.shared(urls=True))) as srv:
        direct, redirected, refused = score(srv, [row(0, public_host.url("/cats.jpg")), row(1, to_public), row(2, to_private)])
    assert direct["status"] == "ok" and redirected["status"] == "ok"  # the public host is reached, its redirects followed
    assert refused["status"] == "error" and NEUTRAL in refused["error"]
    assert host.paths() == []  # the private host behind the redirect was never asked


def test_a_checked_fetch_connects_to_the_address_it_checked(public_host: ImageHost, monkeypatch: pytest.MonkeyPatch) -> None:
    # A rebinding name: public (127.0.0.2) at its first lookup, private (127.0.0.1) after: a
    # second lookup (by the HTTP client) would connect to 127.0.0.1.
    real = socket.getaddrinfo
    answers = ["127.0.0.2"]

    def lookup(name: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if name == "rebind.test":
            address = answers.pop(0) if answers else "127.0.0.1"
            return real(address, port, *args, **kwargs)
        return real(name, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", lookup)
    port = public_host.server.server_address[1]
    body = download(f"http://rebind.test:{port}/cats.jpg", ImageLimits(download_timeout=10), ImageSources.shared(urls=True))
    assert body == CATS.read_bytes()
    assert public_host.hits == [("/cats.jpg", f"rebind.test:{port}")]  # the name sent as Host, the checked address reached


def test_every_failed_fetch_has_one_text(host: ImageHost) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}/x.jpg"  # bound, never listening: refused
    urls = [closed, host.url("/missing"), host.url("/huge"), host.url("/hold/slow")]
    with serving(judge=judge(ImageSources.shared(urls=True, private_urls=True), image_limits=ImageLimits(max_download_bytes=100_000, download_timeout=1))) as srv:
        recs = score(srv, [row(k, u) for k, u in enumerate(urls)])
    texts = {r["error"].replace(u, "URL").replace(f"sample {r['id']}:", "") for r, u in zip(recs, urls)}
    assert len(texts) == 1 and NEUTRAL in texts.pop(), recs


def test_address_check() -> None:
    for refused in ("127.0.0.1", "10.1.2.3", "172.16.0.1", "192.168.1.1", "169.254.169.254", "100.64.0.1", "0.0.0.0", "224.0.0.1", "::1", "fe80::1", "fd00::1", "::ffff:10.0.0.1", "::", "not-an-ip"):
        assert not address_allowed(refused), refused
    for public in ("8.8.8.8", "1.1.1.1", "2606:4700:4700::1111"):
        assert address_allowed(public), public


def test_a_reward_in_a_shared_service_reads_only_what_its_policy_allows(host: ImageHost, caplog: pytest.LogCaptureFixture) -> None:
    cells = [str(CATS), host.url("/cats.jpg"), CATS.read_bytes()]
    call = {"prompts": ["p"] * 3, "completions": ["two cats"] * 3, "image": cells}
    backend = ScriptedBackend(decoding)
    with caplog.at_level(logging.WARNING, logger="capjudge.reward"):
        assert make_reward("vanilla", backend, image_sources=ImageSources.shared(), normalize=False)(**call) == [None, None, 85.0]
        assert make_reward("vanilla", backend, image_sources=ImageSources.shared(urls=True), normalize=False)(**call) == [None, None, 85.0]
    assert host.paths() == []
    assert NOT_READ in caplog.text and NOT_FETCHED in caplog.text and NEUTRAL in caplog.text
    wide = make_async_reward("vanilla", backend, image_sources=ImageSources.shared(paths=True, urls=True, private_urls=True), normalize=False)
    try:
        import asyncio

        assert asyncio.run(wide(**call)) == [85.0, 85.0, 85.0]
    finally:
        wide.close()
    assert host.paths() == ["/cats.jpg"]
    # The same reward over a judge server: the URL fetched by the reward, sent inline.
    with serving(images=None) as srv:
        remote = make_reward(remote=srv.url, image_sources=ImageSources.shared(urls=True, private_urls=True), normalize=False)
        try:
            assert remote(prompts=["p"] * 2, completions=["two cats"] * 2, image=cells[:2]) == [None, 85.0]
        finally:
            remote.close()
    assert host.paths() == ["/cats.jpg"] * 2
    # A local reward (the default) reads its own dataset's paths and URLs, as before.
    assert make_reward("vanilla", backend, normalize=False)(**call) == [85.0, 85.0, 85.0]


# ------------------------------------------------------------------------------- item 5: slow URLs
def test_slow_image_urls_are_fetched_together_at_the_door_and_hold_no_other_client(host: ImageHost) -> None:
    slow = [row(k, host.url(f"/hold/{k}")) for k in range(4)]
    with serving(judge=judge(ImageSources.shared(urls=True, private_urls=True), image_limits=ImageLimits(download_timeout=30)), max_wait_ms=0) as srv, ThreadPoolExecutor(2) as pool:
        first = pool.submit(score, srv, slow)
        deadline = time.monotonic() + 20
        while host.most_held < 4 and time.monotonic() < deadline:  # all four asked at once, not one after another
            time.sleep(0.02)
        assert host.most_held == 4
        (other,) = score(srv, [row(9, "n.jpg", image_b64=b64(CATS))], timeout=10)  # answered while the four still hang
        assert other["status"] == "ok" and not first.done()
        host.released.set()
        recs = first.result(timeout=30)
    assert [r["status"] for r in recs] == ["ok"] * 4
    assert [r["image"] for r in recs] == [r["image"] for r in slow]


def test_a_requests_urls_share_one_deadline(host: ImageHost) -> None:
    urls = [host.url(f"/hold/{k}") for k in range(20)]
    t0 = time.monotonic()
    got = fetch_many(urls, ImageLimits(download_timeout=0.5), ImageSources(), deadline=1.0)
    assert time.monotonic() - t0 < 10  # 20 downloads of 0.5 s, 8 at a time, cut at the request's 1 s
    errors = [str(v) for v in got.values()]
    assert all(isinstance(v, ImageError) for v in got.values())
    assert any("not all complete within 1 s" in e for e in errors) and any("not complete within 0.5 s" in e for e in errors)


# ------------------------------------------------------------------------------- items 13, 14
def test_a_data_url_is_capped_as_image_b64_is() -> None:
    data_url = "data:image/jpeg;base64," + b64(CATS)
    with serving(max_image_bytes=1000) as srv:
        as_url, as_b64 = score(srv, [row(0, data_url), row(1, "cats.jpg", image_b64=b64(CATS))])
    assert as_url["status"] == as_b64["status"] == "error"
    assert "size cap of 1,000 bytes" in as_url["error"] and "size cap of 1,000 bytes" in as_b64["error"]
    assert as_url["image"] == data_url[:32] + "..."  # named as a local run names it


def test_a_path_equal_to_an_inline_images_key_does_not_share_its_load() -> None:
    key = str(InlineImage("a.jpg", data=CATS.read_bytes()))
    with serving() as srv:
        inline, lookalike = score(srv, [row(0, "a.jpg", image_b64=b64(CATS)), row(1, key)])
    assert inline["status"] == "ok" and inline["image"] == "a.jpg"
    assert lookalike["status"] == "error" and "not found" in lookalike["error"]


def test_inline_base64_is_unchanged() -> None:
    data = base64.b64encode(CATS.read_bytes()).decode()
    with serving(images=None) as srv:
        (rec,) = score(srv, [row(0, "c.jpg", image_b64=data)])
    assert rec["status"] == "ok" and rec["image"] == "c.jpg"
