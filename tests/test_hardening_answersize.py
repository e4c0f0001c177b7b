"""Huge answers (issue 30 item 11): an OpenAI-protocol server's answer is read up to
``max_response_bytes`` (16 MiB by default) as it streams in, a larger one refused, never held
whole; a record keeps at most ``RAW_CHARS`` characters of an answer in ``raw`` (as
``details.reasoning`` keeps ``REASONING_CHARS``), saying so in ``details.raw_chars``."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from capjudge.backends.base import BackendError, GenerationConfig, Message, Request
from capjudge.backends.options import OptionError
from capjudge.backends.registry import load_backend
from capjudge.backends.scripted import ScriptedBackend
from capjudge.data.types import Sample
from capjudge.judges.judge import Judge
from capjudge.judges.reasoning import TRUNCATED
from capjudge.judges.records import RAW_CHARS
from openai_fake_server import answering, running_server
from serve_helpers import IMAGES

REQUEST = Request((Message("user", "rate it"),), GenerationConfig(max_new_tokens=4))
MiB = 1024 * 1024


def test_an_answer_over_max_response_bytes_is_refused_and_not_retried() -> None:
    with running_server(responder=answering("85 " + "x" * (2 * MiB))) as srv:
        backend = load_backend(f"openai-compatible:{srv.base_url}#m", lazy=False, max_response_bytes=MiB, max_retries=2, retry_base_delay=0.01)
        (out,) = backend.generate([REQUEST])
        backend.close()
        asked = len(srv.received)
    assert isinstance(out, BackendError) and "max_response_bytes=1,048,576" in str(out) and "announced" in str(out), out
    assert asked == 1  # the same request would get the same answer
    # Under the cap, the same answer is read as before.
    with running_server(responder=answering("85 " + "x" * (2 * MiB))) as srv:
        backend = load_backend(f"openai-compatible:{srv.base_url}#m", lazy=False, max_response_bytes=4 * MiB)
        (out,) = backend.generate([REQUEST])
        backend.close()
    assert not isinstance(out, BaseException) and out.text.startswith("85 ")


class _Chunked(BaseHTTPRequestHandler):
    """Answers every POST with a 200 JSON body in chunks, no length announced, 8 MiB in all."""

    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        with contextlib.suppress(OSError):
            for piece in [b'{"choices": [{"message": {"content": "'] + [b"x" * 65536] * 128:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            self.wfile.write(b"0\r\n\r\n")

    def log_message(self, *args: Any) -> None:
        pass


@contextlib.contextmanager
def chunked_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Chunked)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


def test_an_answer_of_no_announced_length_is_cut_at_the_cap_as_it_streams() -> None:
    with chunked_server() as base:
        backend = load_backend(f"openai-compatible:{base}#m", lazy=False, max_response_bytes=MiB, max_retries=0)
        (out,) = backend.generate([REQUEST])
        backend.close()
    assert isinstance(out, BackendError) and "max_response_bytes=1,048,576" in str(out) and "announced" not in str(out), out


def test_max_response_bytes_default_and_checks() -> None:
    backend = load_backend("openai-compatible:http://127.0.0.1:9/v1#m", lazy=False)
    assert backend.max_response_bytes == 16 * MiB
    backend.close()
    with pytest.raises(OptionError, match="max_response_bytes"):
        load_backend("openai-compatible:http://127.0.0.1:9/v1#m", lazy=False, max_response_bytes="0")


LONG = "I would rate it 85 out of 100. " + "and more words " * 10_000  # 150,031 characters


def test_a_record_keeps_at_most_raw_chars_of_an_answer_and_says_so() -> None:
    judge = Judge("vanilla", ScriptedBackend(LONG), images_root=IMAGES)
    (r,) = judge.score_many([Sample("cats.jpg", "two cats")])
    assert r.ok and r.score == 85.0  # read from the whole answer
    assert len(r.raw or "") == RAW_CHARS and (r.raw or "").endswith(TRUNCATED) and r.details["raw_chars"] == len(LONG)
    (short,) = Judge("vanilla", ScriptedBackend("85"), images_root=IMAGES).score_many([Sample("cats.jpg", "two cats")])
    assert short.raw == "85" and "raw_chars" not in short.details


def test_a_pair_record_keeps_at_most_raw_chars_of_each_answer() -> None:
    judge = Judge("gpt4v-pairwise", ScriptedBackend("Caption A is better. [[A]] " + LONG), images_root=IMAGES)
    (r,) = judge.compare_many([{"image": "cats.jpg", "caption_a": "two cats", "caption_b": "a dog"}])
    assert all(len(t or "") == RAW_CHARS for t in r.raw) and r.details["raw_chars"] == [len(LONG) + 27] * 2
