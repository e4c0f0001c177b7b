"""No API key in anything a run writes: logs (at -vv), results, cache entries, messages, summary.

The scrubber on its own, then whole command-line runs against a local server that echoes the key
under each kind of fault (429, 500 echoing the Authorization header, timeout, malformed body,
server gone), grepping every file and stream the run wrote.
"""

from __future__ import annotations

import json
import logging
import socket
from collections.abc import Callable
from pathlib import Path

import pytest

from capjudge.cli import main
from capjudge.core.redact import (
    MASK,
    ScrubFilter,
    register_secret,
    scrub,
    scrub_data,
    scrub_record,
    stable,
)
from capjudge.data.types import ScoreResult
from openai_fake_server import Received, Reply, default_responder, error_body, running_server

KEY = "sk-proj-LEAKCHECK-9d8c7b6a5f4e3d2c1b0a"
SECRET_PART = "LEAKCHECK-9d8c7b6a5f4e3d2c1b0a"
IMAGES = Path(__file__).resolve().parents[1] / "examples" / "images"


# -- the scrubber --------------------------------------------------------------------------------
def test_scrub_masks_registered_secrets_and_credential_shapes() -> None:
    register_secret("my-private-token-123")
    assert scrub("got my-private-token-123 twice: my-private-token-123") == f"got {MASK} twice: {MASK}"
    assert scrub("Authorization: Bearer abcdefghijkl0123") == f"Authorization: Bearer {MASK}"
    assert scrub("key sk-abcdefghijklmnop0123456789 was refused") == f"key sk-{MASK} was refused"
    assert scrub('{"api-key": "0123456789abcdef"}') == f'{{"api-key": "{MASK}"}}'
    assert scrub("Bearer EMPTY") == "Bearer EMPTY"  # placeholders are not secrets
    register_secret("short")  # too short to be a secret: never masked
    assert scrub("short answers") == "short answers"


@pytest.mark.parametrize(
    "text",
    [
        "authorization: BEARER abcdefghijkl0123",
        "AUTHORIZATION: bEaReR abcdefghijkl0123 and X-Api-Key=zyxwvutsrq987",
        '{"API_KEY": "0123456789abcdef", "note": "sk-abcdefghijklmnop0123456789"}',
        "caf\u00e9 said Bearer abcdefghijkl0123, api-key: 0123456789abcdef, sk-abcdefghijklmnop0123456789",
        "api-\u212aey: 0123456789abcdef",  # the Kelvin sign matches k case-insensitively
        "a FLEUR answer: 0.75, tokens 0 . 7 5; nothing secret " * 40,
        "sk-short and bearer short and api key",
    ],
)
def test_scrub_masks_what_every_shape_would_mask(text: str) -> None:
    """The shapes are only searched in texts that hold their trigger word: same result as always
    searching them."""
    from capjudge.core import redact

    expected = text
    for pattern, replacement, *_ in redact._SHAPES:
        expected = pattern.sub(replacement, expected)
    assert scrub(text) == expected
    assert (expected != text) == ("0123" in text or "987" in text)


def test_scrub_reads_the_key_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AZURE_OPENAI_API_KEY", "azurekey0123456789")
    assert scrub("echo azurekey0123456789") == f"echo {MASK}"


def test_scrub_data_keeps_json_valid_and_returns_clean_data_unchanged() -> None:
    clean = {"text": "0.8", "steps": [{"token": "0"}]}
    assert scrub_data(clean) is clean
    dirty = {"meta": {"reason": f'server said "Bearer {KEY}"'}, "n": [1, 2.5, None]}
    out = scrub_data(dirty)
    assert KEY not in json.dumps(out) and out["n"] == [1, 2.5, None] and out["meta"]["reason"].endswith(f'Bearer {MASK}"')


def test_records_have_no_secret_and_no_memory_address() -> None:
    r = ScoreResult(image="a.jpg", caption="c", score=None, method="m", backend="b", model="x", template_hash="h", raw=None,
                    status="error", error=f"boom <_io.BytesIO object at 0x7f3a2c1b0d90> Bearer {KEY}",
                    details={"explanation_error": "<Foo object at 0xdeadbeef12>"})
    d = r.to_dict()
    assert d["error"] == f"boom <_io.BytesIO object> Bearer {MASK}"
    assert d["details"]["explanation_error"] == "<Foo object>"
    assert r.error is not None and KEY in r.error  # the in-memory result is untouched
    assert scrub_record({"caption": "meet me at 0x1F00 tomorrow"})["caption"] == "meet me at 0x1F00 tomorrow"
    assert stable("a <x at 0xABCDEF01> b") == "a <x> b"


def test_log_filter_scrubs_message_args_and_traceback() -> None:
    record = logging.LogRecord("openai", logging.DEBUG, __file__, 1, "headers: %s", ({"Authorization": f"Bearer {KEY}"},), None)
    try:
        raise RuntimeError(f"failed with {KEY}")
    except RuntimeError:
        import sys

        record.exc_info = sys.exc_info()
    assert ScrubFilter().filter(record)
    text = logging.Formatter().format(record)
    assert KEY not in text and SECRET_PART not in text and MASK in text


# -- whole runs under each fault ------------------------------------------------------------------
def _responder(fault: str) -> Callable[[Received], Reply]:
    def respond(req: Received) -> Reply:
        auth = req.headers.get("authorization", "")
        body = req.body if isinstance(req.body, dict) else {}
        if body.get("logprobs"):
            # Refusal quoting the key: the reason lands in the answer's metadata (and the cache).
            return Reply(status=400, body=error_body(f"This model does not support 'logprobs' (caller {auth})", param="logprobs"))
        if "a good caption" in req.prompt_text():
            return default_responder(req)
        if fault == "429":
            return Reply(status=429, body=error_body(f"Rate limit reached for {auth}", type_="requests", code="rate_limit_exceeded"), headers={"retry-after-ms": "10"})
        if fault == "500":
            return Reply(status=500, body=error_body(f"Internal error. Request headers: Authorization: {auth}", type_="server_error"))
        if fault == "timeout":
            return Reply(delay=1.5, body=error_body(f"too late for {auth}"))
        if fault == "malformed":
            return Reply(raw=f"<html>upstream proxy error; forwarded {auth}</html>".encode())
        raise AssertionError(fault)

    return respond


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("fault", ["429", "500", "timeout", "malformed", "gone"])
def test_no_key_in_anything_a_run_writes(fault: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    inp = tmp_path / "in.jsonl"
    inp.write_text("".join(json.dumps({"image": "cats.jpg", "caption": c}) + "\n" for c in ("a good caption", "a faulty caption", "another faulty one")))
    out, cache = tmp_path / "out.jsonl", tmp_path / "cache"
    # An OpenAI-compatible server gets the variable's key only when asked (issue #20, item 3).
    opts = ["--backend-opt", "api_key_env=OPENAI_API_KEY", "--backend-opt", "max_retries=1", "--backend-opt", "retry_base_delay=0.01", "--backend-opt", "timeout=0.5", "--backend-opt", "gone_grace=0"]

    def run(base_url: str) -> int:
        return main(["-vv", "score", "--method", "fleur", "--backend", f"openai-compatible:{base_url}#m", "--images", str(IMAGES),
                     "--input", str(inp), "--out", str(out), "--cache-dir", str(cache), *opts])

    if fault == "gone":
        rc = run(f"http://127.0.0.1:{_free_port()}/v1")
    else:
        with running_server(responder=_responder(fault)) as srv:
            rc = run(srv.base_url)
    captured = capsys.readouterr()
    written = {"--out": out.read_text(), "stdout": captured.out, "stderr": captured.err}
    for f in cache.rglob("*"):
        if f.is_file():
            written[str(f)] = f.read_bytes().decode("utf-8", "replace")
    for where, text in written.items():
        assert SECRET_PART not in text, f"the API key leaked into {where} ({fault})"
    # The faults did happen, and reached the client with the key in them (masked).
    records = [json.loads(x) for x in written["--out"].splitlines()]
    errors = " | ".join(r["error"] or "" for r in records)
    expected = {"429": "HTTP 429", "500": "HTTP 500", "timeout": "timed out", "malformed": "malformed", "gone": "connection error"}[fault]
    assert expected in errors or (fault == "gone" and "stopped answering" in errors), errors
    assert rc == 3  # retries exhausted / server gone: resumable
    if fault != "gone":
        assert records[0]["status"] == "ok" and records[0]["details"]["backend_meta"]["logprobs_refused"]
        assert f"Bearer {MASK}" in records[0]["details"]["backend_meta"]["logprobs_refused_reason"]
    if fault in ("429", "500"):
        assert f"Bearer {MASK}" in errors and "retrying in" in captured.err  # -v logged the retried echo
