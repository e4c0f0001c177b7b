"""``RemoteJudge(url)``: a judge whose answers come from ``capjudge serve``.

It has the judge interface the runner and the CLI use (``method``, ``backend``, ``backend_spec``,
``batch_size``, ``score_stream`` / ``score_many``, ``compare_stream`` / ``compare_many``,
``run_fields``, ``close``), and the records it returns are the server's judge's records, so a
``--remote`` run writes the results file a local run of the same judge writes (resume, ``--html``
and all). Rows go in requests of ``batch_size``, ``concurrency`` of them in flight; local images are
read here (under ``images_root``, confined unless ``allow_outside_images``) and sent as bytes.
A request the server refuses for a full queue (429) is sent again after its ``Retry-After``; a
server that cannot be reached makes resumable error records (a re-run asks them again).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from capjudge.errors import BackendError, UsageError
from capjudge.images import DEFAULT_LIMITS, ImageLimits
from capjudge.redact import register_secret, scrub
from capjudge.serve.server import TOKEN_VARIABLE
from capjudge.serve.wire import row_to_wire
from capjudge.types import PairResult, Sample, ScoreResult, image_label


class RemoteError(BackendError):
    """The server could not be reached or refused a request (resumable: a re-run asks again)."""

    resumable = True


@dataclass(frozen=True)
class RemoteMethod:
    """What the client knows of the server's method (``GET /v1/info``): enough for the runner's
    checks and the records a run makes without the server (unreadable input rows)."""

    name: str
    kind: str
    pairwise: bool
    scale: tuple[float, float]
    template_hash: str
    smoothing: bool
    options: dict[str, Any] = field(default_factory=dict)  # the method options records carry
    reads_logprobs: bool = False  # smoothing or score=expected: the summary counts smoothed scores


@dataclass
class RemoteBackend:
    """The server's backend as records name it (``spec``, ``model``, ``kind``); nothing runs here."""

    spec: str
    model: str
    kind: str
    usage: Any = None
    meta: dict[str, Any] = field(default_factory=dict)

    def identity(self) -> dict[str, Any]:
        """The backend as the server reports it."""
        return {"remote": self.spec, "model": self.model}

    def close(self) -> None:
        """Nothing to release."""


def _as_row(item: Any, pairs: bool) -> Any:
    if isinstance(item, Sample):
        return {"image": item.image, "caption": item.caption, "references": list(item.references), "id": item.id}
    if pairs and not isinstance(item, dict):
        fields = ("image", "caption_a", "caption_b", "references", "id")
        if isinstance(item, (tuple, list)):
            return dict(zip(fields, item))
        if all(hasattr(item, f) for f in fields[:3]):
            return {f: getattr(item, f, None) for f in fields}
    return item


class RemoteJudge:
    """A judge served by ``capjudge serve`` at ``url`` (``http://HOST:PORT``).

    ``token`` defaults to ``$CAPJUDGE_TOKEN`` (never logged); ``batch_size`` rows go in one request,
    ``concurrency`` requests at once; ``images_root`` resolves local image paths, which are read here
    and sent (``send_images=False``: sent as paths, for the server's ``--images``); ``timeout`` bounds
    one request (seconds); ``retry_for`` how long a 429 is retried.
    """

    def __init__(
        self,
        url: str,
        token: str | None = None,
        *,
        batch_size: int = 64,
        concurrency: int = 4,
        images_root: str | Path | None = None,
        allow_outside_images: bool = False,
        image_limits: ImageLimits = DEFAULT_LIMITS,
        send_images: bool = True,
        timeout: float = 600.0,
        retry_for: float = 600.0,
    ) -> None:
        self.url = url.rstrip("/")
        self.token = token if token is not None else os.environ.get(TOKEN_VARIABLE)
        register_secret(self.token)
        self.batch_size = max(1, int(batch_size))
        self.concurrency = max(1, int(concurrency))
        self.images_root = images_root
        self.allow_outside_images = allow_outside_images
        self.image_limits = image_limits
        self.send_images = send_images
        self.retry_for = retry_for
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        self._client = httpx.Client(base_url=self.url, headers=headers, timeout=timeout)
        self._lock = threading.Lock()
        self.info = self._get_info()
        m = self.info["method"]
        self.method = RemoteMethod(
            m["name"], m["kind"], bool(m["pairwise"]), (float(m["scale"][0]), float(m["scale"][1])), m["template_hash"], bool(m["smoothing"]),
            dict(m.get("options") or {}), bool(m.get("reads_logprobs", m["smoothing"])),
        )
        self.backend = RemoteBackend(self.info["backend"], self.info["model"], self.info["kind"])
        self.judge_preset: str | None = self.info.get("judge_preset")

    def _get_info(self) -> dict[str, Any]:
        try:
            r = self._client.get("/v1/info")
        except httpx.HTTPError as exc:
            raise RemoteError(f"the judge server at {self.url} cannot be reached: {type(exc).__name__}: {scrub(str(exc))}") from None
        if r.status_code == 401:
            raise UsageError(f"the judge server at {self.url} refused the token (set ${TOKEN_VARIABLE} to the server's token)")
        if r.status_code != 200:
            raise RemoteError(f"the judge server at {self.url} answered {r.status_code} to /v1/info: {scrub(r.text[:300])}")
        info: dict[str, Any] = r.json()
        return info

    @property
    def backend_spec(self) -> str:
        """The server's backend spec, as its records show it."""
        return self.backend.spec

    def run_fields(self, mode: str | None = None) -> dict[str, Any]:
        """The fields every pair record of ``mode`` carries (what a re-run checks), as the server's
        :func:`capjudge.judges.pairwise.run_fields` gives them; ``ValueError`` for a mode the judge
        cannot compare by."""
        mode = mode or self.info.get("default_mode")
        fields = self.info.get("compare_modes", {}).get(mode)
        if fields is None:
            raise ValueError(f"the served judge {self.method.name!r} does not compare by {mode!r}")
        return dict(fields)

    # ------------------------------------------------------------------ requests
    def _post(self, route: str, body: dict[str, Any]) -> list[dict[str, Any]]:
        deadline = time.monotonic() + self.retry_for
        while True:
            r = self._client.post(route, json=body)
            if r.status_code == 429 and time.monotonic() < deadline:
                time.sleep(min(float(r.headers.get("retry-after", "1") or 1), max(0.0, deadline - time.monotonic())))
                continue
            if r.status_code != 200:
                try:
                    message = r.json().get("error", r.text)
                except ValueError:
                    message = r.text
                raise RemoteError(f"the judge server answered {r.status_code}: {scrub(str(message)[:500])}")
            results: list[dict[str, Any]] = r.json()["results"]
            return results

    def _wire(self, rows: list[Any], start: int) -> list[Any]:
        out = []
        read: dict[str, dict[str, str]] = {}  # each image of this request read and encoded once
        for k, row in enumerate(rows):
            if isinstance(row, dict):
                out.append(row_to_wire(row, start + k, images_root=self.images_root, limits=self.image_limits, confine=not self.allow_outside_images, send_images=self.send_images, read=read))
            else:
                out.append(row)  # the server makes its error record
        return out

    def _stream(self, items: Iterable[Any], route: str, field_name: str, extra: dict[str, Any], make: Any, failed: Any) -> Iterator[tuple[int, Any]]:
        rows = list(items)
        chunks = [(s, rows[s : s + self.batch_size]) for s in range(0, len(rows), self.batch_size)]
        with ThreadPoolExecutor(max_workers=self.concurrency, thread_name_prefix="capjudge-remote") as pool:
            pending: dict[Future[list[dict[str, Any]]], tuple[int, list[Any]]] = {}
            todo = iter(chunks)

            def fill() -> None:
                while len(pending) < self.concurrency:
                    nxt = next(todo, None)
                    if nxt is None:
                        return
                    start, chunk = nxt
                    pending[pool.submit(self._post, route, {field_name: self._wire(chunk, start), **extra})] = (start, chunk)

            fill()
            while pending:
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for fut in done:
                    start, chunk = pending.pop(fut)
                    try:
                        records = fut.result()
                        for k, rec in enumerate(records):
                            yield start + k, make(rec)
                    except (httpx.HTTPError, RemoteError, ValueError, KeyError) as exc:
                        cause = exc if isinstance(exc, RemoteError) else RemoteError(f"the judge server at {self.url}: {type(exc).__name__}: {scrub(str(exc))}")
                        for k, row in enumerate(chunk):
                            yield start + k, failed(start + k, row, cause)
                fill()

    def _score_failed(self, index: int, row: Any, cause: BaseException) -> ScoreResult:
        row = row if isinstance(row, dict) else {}
        sid = row.get("id")
        return ScoreResult(
            image=image_label(row.get("image")), caption=str(row.get("caption", "")), score=None, method=self.method.name, backend=self.backend_spec,
            model=self.backend.model, template_hash=self.method.template_hash, raw=None, status="error", error=f"sample {sid if sid is not None else index}: {cause}",
            id=str(sid) if sid is not None else str(index), scale=self.method.scale, references=list(row.get("references") or ()), details={"resumable": True},
        )

    def _pair_failed(self, mode: str | None) -> Any:
        fields = self.run_fields(mode)

        def failed(index: int, row: Any, cause: BaseException) -> PairResult:
            row = row if isinstance(row, dict) else {}
            pid = row.get("id")
            return PairResult(
                image=image_label(row.get("image")), caption_a=str(row.get("caption_a", "")), caption_b=str(row.get("caption_b", "")), verdict=None,
                method=fields["method"], backend=self.backend_spec, model=self.backend.model, template_hash=fields["template_hash"], mode=fields["mode"],
                status="error", error=f"pair {pid if pid is not None else index}: {cause}", id=str(pid) if pid is not None else str(index), details={"resumable": True},
            )

        return failed

    # ------------------------------------------------------------------ the judge interface
    def score_stream(self, samples: Iterable[Sample | dict[str, Any]]) -> Iterator[tuple[int, ScoreResult]]:
        """Score samples on the server, yielding ``(input index, result)`` as answers arrive."""
        if self.method.pairwise:
            raise ValueError(f"method {self.method.name!r} compares pairs: use compare_many / compare_stream")
        rows = (_as_row(s, pairs=False) for s in samples)
        return self._stream(rows, "/v1/score", "samples", {}, ScoreResult.from_dict, self._score_failed)

    def score_many(self, samples: Iterable[Sample | dict[str, Any]]) -> Iterator[ScoreResult]:
        """Score samples on the server, yielding results in input order."""
        results = dict(self.score_stream(samples))
        return iter([results[k] for k in sorted(results)])

    def score(self, sample: Sample | dict[str, Any]) -> ScoreResult:
        """Score one sample on the server."""
        return next(self.score_many([sample]))

    def compare_stream(self, pairs: Iterable[Any], *, mode: str | None = None) -> Iterator[tuple[int, PairResult]]:
        """Compare pairs on the server, yielding ``(input index, result)`` as answers arrive."""
        failed = self._pair_failed(mode)
        rows = (_as_row(p, pairs=True) for p in pairs)
        return self._stream(rows, "/v1/compare", "pairs", {"mode": mode}, PairResult.from_dict, failed)

    def compare_many(self, pairs: Iterable[Any], *, mode: str | None = None) -> Iterator[PairResult]:
        """Compare pairs on the server, yielding results in input order."""
        results = dict(self.compare_stream(pairs, mode=mode))
        return iter([results[k] for k in sorted(results)])

    def reward(self, completions: list[str], images: list[Any], references: list[list[str]] | None = None) -> list[float | None]:
        """Scores of ``completions`` (one image each) through ``POST /v1/reward``: the score of each
        ok record, ``None`` for a failed one."""
        rows = [{"image": img, "caption": "x"} for img in images]
        wired = [{k: v for k, v in w.items() if k in ("image", "image_b64", "image_error")} for w in self._wire(rows, 0)]
        body: dict[str, Any] = {"completions": list(completions), "images": wired}
        if references is not None:
            body["references"] = references
        r = self._client.post("/v1/reward", json=body)
        if r.status_code != 200:
            raise RemoteError(f"the judge server answered {r.status_code}: {scrub(r.text[:500])}")
        rewards: list[float | None] = r.json()["rewards"]
        return rewards

    def close(self) -> None:
        """Close the connection pool."""
        self._client.close()

    def __enter__(self) -> RemoteJudge:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"RemoteJudge({self.url!r}, method={self.method.name!r}, backend={self.backend_spec!r})"


__all__ = ["RemoteBackend", "RemoteError", "RemoteJudge", "RemoteMethod"]
