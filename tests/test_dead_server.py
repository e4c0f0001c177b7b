"""A server that dies mid-run: the backend notices, stops asking, and the run exits 3 within seconds.

Also the circuit breaker on its own, a server that was never there, the exit codes, and the hint
for a base URL without ``/v1``.
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
import time
from pathlib import Path

import pytest

from capjudge.backends.faults import BackendGone, CircuitBreaker, is_resumable
from capjudge.backends.openai.retry import APIRequestError
from capjudge.backends.usage import BudgetExceeded
from capjudge.cli import EXIT_BACKEND, EXIT_CODES_HELP, build_parser, main
from capjudge.core.errors import EXIT_ALL_FAILED
from openai_fake_server import running_server

ROOT = Path(__file__).resolve().parents[1]
IMAGES = ROOT / "examples" / "images"


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def write_input(path: Path, n: int) -> Path:
    images = ("cats.jpg", "dog.jpg")
    path.write_text("".join(json.dumps({"id": f"s{i}", "image": images[i % 2], "caption": f"caption number {i}"}) + "\n" for i in range(n)))
    return path


def free_port() -> int:
    """A port nothing listens on (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- the breaker on its own -----------------------------------------------------------------------
class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_breaker_needs_consecutive_failures_over_the_grace_period() -> None:
    clock = Clock()
    b = CircuitBreaker("the server at http://h/v1", threshold=3, grace=2.0, clock=clock)
    for _ in range(5):
        b.failure()
    assert not b.gone  # enough failures, but all within the grace period
    b.success()  # an answer resets the count
    clock.now = 10.0
    b.failure()
    clock.now = 11.0
    b.failure()
    assert not b.gone
    clock.now = 12.0
    b.failure()
    assert b.gone
    with pytest.raises(BackendGone, match=r"the server at http://h/v1 stopped answering: 3 connection attempts"):
        b.check()


def test_breaker_off_and_bad_settings() -> None:
    b = CircuitBreaker("x", threshold=0, grace=0)
    for _ in range(100):
        b.failure()
    assert not b.gone
    with pytest.raises(ValueError, match="gone_after"):
        CircuitBreaker("x", threshold=-1)


def test_breaker_sleep_ends_when_the_backend_is_declared_gone() -> None:
    b = CircuitBreaker("x", threshold=1, grace=0)

    async def wait_then_trip() -> float:
        t0 = time.monotonic()
        asyncio.get_running_loop().call_later(0.1, b.failure)
        with pytest.raises(BackendGone):
            await b.sleep(30.0)
        return time.monotonic() - t0

    assert asyncio.run(wait_then_trip()) < 5.0


def test_resumable_failures() -> None:
    assert is_resumable(BackendGone("gone"))
    assert is_resumable(BudgetExceeded("over budget"))
    assert is_resumable(APIRequestError("HTTP 500 (after 7 attempts): boom", status=500, retryable=True))
    assert not is_resumable(APIRequestError("HTTP 400: bad image", status=400, retryable=False))
    assert not is_resumable(ValueError("corrupt"))


# -- a run against a server that dies -------------------------------------------------------------
def test_killed_server_stops_the_run_within_seconds(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inp = write_input(tmp_path / "in.jsonl", 200)
    out = tmp_path / "out.jsonl"
    with running_server(die_after=20) as srv:
        base_url = srv.base_url
        t0 = time.monotonic()
        # Default retry settings (7 attempts, ~36 s of back-off per request): only the breaker can
        # make this fast. gone_grace is shortened to keep the test quick.
        rc = main(["score", "--method", "vanilla", "--backend", f"openai-compatible:{srv.base_url}#m", "--images", str(IMAGES),
                   "--input", str(inp), "--out", str(out), "--no-cache", "--quiet", "--backend-opt", "gone_grace=1"])
        wall = time.monotonic() - t0
    err = capsys.readouterr().err
    assert rc == EXIT_BACKEND == 3
    assert wall < 30.0, f"the run took {wall:.0f} s after the server died"
    res = read_jsonl(out)
    assert len(res) == 200 and [r["id"] for r in res] == [f"s{i}" for i in range(200)]
    ok = [r for r in res if r["status"] == "ok"]
    failed = [r for r in res if r["status"] == "error"]
    assert 20 <= len(ok) < 60 and len(ok) + len(failed) == 200
    # One clear cause for every remaining sample, the same text in every record.
    causes = {re.sub(r"^sample \S+: ", "", r["error"]) for r in failed}
    assert len(causes) == 1, causes
    (cause,) = causes
    assert f"the server at {base_url} stopped answering" in cause and "BackendGone" in cause
    assert all(r["details"]["resumable"] is True for r in failed)
    assert "failed for backend reasons" in err and "re-run" in err


def test_server_never_there_fails_fast_with_one_cause(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inp = write_input(tmp_path / "in.jsonl", 40)
    out = tmp_path / "out.jsonl"
    t0 = time.monotonic()
    rc = main(["score", "--method", "fleur", "--backend", f"openai-compatible:http://127.0.0.1:{free_port()}/v1#m", "--images", str(IMAGES),
               "--input", str(inp), "--out", str(out), "--no-cache", "--quiet", "--backend-opt", "gone_grace=0.5"])
    assert rc == 3 and time.monotonic() - t0 < 30.0
    res = read_jsonl(out)
    assert len(res) == 40 and all(r["status"] == "error" and r["details"]["resumable"] for r in res)
    assert len({re.sub(r"^sample \S+: ", "", r["error"]) for r in res}) == 1
    assert "stopped answering" in capsys.readouterr().err


def test_per_sample_errors_still_exit_0(tmp_path: Path) -> None:
    inp = tmp_path / "in.jsonl"
    inp.write_text(json.dumps({"image": "cats.jpg", "caption": "two cats"}) + "\n" + json.dumps({"image": "missing.jpg", "caption": "x"}) + "\n")
    with running_server() as srv:
        rc = main(["score", "--method", "vanilla", "--backend", f"openai-compatible:{srv.base_url}#m", "--images", str(IMAGES),
                   "--input", str(inp), "--out", str(tmp_path / "o.jsonl"), "--no-cache", "--quiet"])
    assert rc == 0
    res = read_jsonl(tmp_path / "o.jsonl")
    assert [r["status"] for r in res] == ["ok", "error"] and "resumable" not in res[1]["details"]


def test_retries_exhausted_exit_3(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from openai_fake_server import Reply, error_body

    inp = write_input(tmp_path / "in.jsonl", 2)

    def overloaded(_req):  # noqa: ANN001, ANN202
        return Reply(status=503, body=error_body("overloaded", type_="server_error"))

    with running_server(responder=overloaded) as srv:
        rc = main(["score", "--method", "vanilla", "--backend", f"openai-compatible:{srv.base_url}#m", "--images", str(IMAGES),
                   "--input", str(inp), "--out", str(tmp_path / "o.jsonl"), "--no-cache", "--quiet",
                   "--backend-opt", "max_retries=1", "--backend-opt", "retry_base_delay=0.01"])
    assert rc == 3
    res = read_jsonl(tmp_path / "o.jsonl")
    assert all("HTTP 503 (after 2 attempts)" in r["error"] and r["details"]["resumable"] for r in res)
    assert "2 sample(s) failed for backend reasons" in capsys.readouterr().err


def test_base_url_without_v1_gets_a_hint(tmp_path: Path) -> None:
    inp = write_input(tmp_path / "in.jsonl", 1)
    with running_server() as srv:
        base = srv.base_url[: -len("/v1")]
        rc = main(["score", "--method", "vanilla", "--backend", f"openai-compatible:{base}#m", "--images", str(IMAGES),
                   "--input", str(inp), "--out", str(tmp_path / "o.jsonl"), "--no-cache", "--quiet"])
    (rec,) = read_jsonl(tmp_path / "o.jsonl")
    assert rc == EXIT_ALL_FAILED  # a 404 is the request's own failure, not retried (none succeeded: 6, not 3)
    assert "HTTP 404" in rec["error"] and f"did you mean {base}/v1?" in rec["error"]


def test_exit_codes_are_documented_in_help() -> None:
    text = build_parser().format_help()
    assert "exit codes" in text
    for code in ("0 ", "1 ", "2 ", "3 ", "130"):
        assert f"\n  {code}" in EXIT_CODES_HELP and code.strip() in text
