"""Bounds on what an OpenAI-protocol server may make capjudge hold (issue 30 follow-ups):

- an error answer (4xx / 5xx) is read up to ``errorbody.error_cap`` (64 KiB, or
  ``max_response_bytes`` when lower) as it streams in, by the SDK's chat client and by the
  files-and-batches client alike; the error quoting a longer one says it was cut;
- the refused answers a record keeps in ``details.format_retries`` are cut to ``RAW_CHARS`` each,
  ``details.format_retries_chars`` giving their full lengths;
- a batch file is downloaded up to ``Provider.max_download_bytes`` (4 GiB by default), a larger
  one refused and not kept.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from capjudge.backends.base import BackendError, GenerationConfig, Message, Request
from capjudge.backends.openai.batch import MAX_DOWNLOAD_BYTES, FileTooLarge, Provider
from capjudge.backends.openai.errorbody import CUT_HEADER, MAX_ERROR_BODY_BYTES, error_cap
from capjudge.backends.registry import load_backend
from capjudge.backends.scripted import ScriptedBackend
from capjudge.judges.judge import Judge
from capjudge.judges.reasoning import TRUNCATED
from capjudge.judges.records import RAW_CHARS
from openai_fake_server import Reply, error_body, running_server
from serve_helpers import IMAGES

REQUEST = Request((Message("user", "rate it"),), GenerationConfig(max_new_tokens=4))
MiB = 1024 * 1024


@pytest.mark.parametrize("body", ["raw", "json"])
def test_an_error_answer_is_read_up_to_its_cap_and_the_error_says_it_was_cut(body: str) -> None:
    huge = Reply(status=400, raw=b"x" * (4 * MiB)) if body == "raw" else Reply(status=400, body=error_body("y" * (4 * MiB)))
    with running_server(responder=lambda req: huge) as srv:
        backend = load_backend(f"openai-compatible:{srv.base_url}#m", lazy=False, max_retries=0)
        (out,) = backend.generate([REQUEST])
        backend.close()
    assert isinstance(out, BackendError) and "HTTP 400" in str(out), out
    assert "its body ran over 65,536 bytes: read up to there, cut by capjudge" in str(out)
    assert len(str(out)) < 2 * MAX_ERROR_BODY_BYTES
    # A small error answer is read whole, as before.
    with running_server(responder=lambda req: Reply(status=400, body=error_body("bad model name"))) as srv:
        backend = load_backend(f"openai-compatible:{srv.base_url}#m", lazy=False, max_retries=0)
        (out,) = backend.generate([REQUEST])
        backend.close()
    assert isinstance(out, BackendError) and "bad model name" in str(out) and "cut by capjudge" not in str(out)


def test_the_files_and_batches_client_reads_error_answers_up_to_the_cap_too() -> None:
    import openai

    with running_server(responder=lambda req: Reply(status=500, raw=b"z" * (2 * MiB))) as srv:
        backend = load_backend(f"openai-compatible:{srv.base_url}#m", lazy=False, max_response_bytes=1000)
        client = backend.batch_client()
        with pytest.raises(openai.APIStatusError) as caught:
            client.with_options(max_retries=0).chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        client.close()
        backend.close()
    assert error_cap(1000) == 1000
    response = caught.value.response
    assert response.headers[CUT_HEADER] == "1000" and len(response.content) < 1100
    assert response.content.endswith(b"[cut by capjudge: the error answer ran over 1,000 bytes]")


def test_a_records_format_retries_keep_at_most_raw_chars_each() -> None:
    long_refusal = "no judgment here " * 6000  # 102,000 characters
    calls: list[int] = []

    def answer(request: Any) -> str:
        calls.append(1)
        return long_refusal if len(calls) == 1 else "Reason: fine\nJudgment: Caption 1 is better"

    judge = Judge("caparena", ScriptedBackend(answer), images_root=IMAGES)
    (r,) = judge.compare_many([{"image": "cats.jpg", "caption_a": "two cats", "caption_b": "a dog"}])
    retries = r.details["format_retries"]
    assert sum(len(order) for order in retries) == 1
    kept = next(t for order in retries for t in order)
    assert len(kept) == RAW_CHARS and kept.endswith(TRUNCATED)
    chars = r.details["format_retries_chars"]
    assert sorted([n for order in chars for n in order]) == [len(long_refusal)]
    # Short refusals are kept whole, with no lengths.
    calls.clear()
    long_refusal = "I think caption 1."
    (short,) = judge.compare_many([{"image": "cats.jpg", "caption_a": "two cats", "caption_b": "a dog"}])
    assert [t for order in short.details["format_retries"] for t in order] == ["I think caption 1."] and "format_retries_chars" not in short.details


def test_a_batch_file_over_the_cap_is_refused_and_not_kept(tmp_path: Path) -> None:
    assert MAX_DOWNLOAD_BYTES == 4 * 1024**3
    with running_server() as srv:
        backend = load_backend(f"openai-compatible:{srv.base_url}#m", lazy=False)
        provider = Provider(backend.batch_client(), backend.batch_url, max_download_bytes=1000)
        uploaded = provider.client.files.create(file=("out.jsonl", b'{"custom_id": "x"}\n' * 200, "application/jsonl"), purpose="batch")
        dest = tmp_path / "out.jsonl"
        with pytest.raises(FileTooLarge, match="over 1,000 bytes: refused, not kept"):
            provider.download(uploaded.id, dest)
        assert not dest.exists() and not dest.with_name(dest.name + ".part").exists()
        roomy = Provider(provider.client, backend.batch_url, max_download_bytes=10_000)
        assert roomy.download(uploaded.id, dest).read_bytes() == b'{"custom_id": "x"}\n' * 200
        provider.close()
        backend.close()
