"""``RemoteJudge(url)``: a judge whose answers come from ``capjudge serve``.

It has the judge interface the runner and the CLI use (``method``, ``backend``, ``backend_spec``,
``batch_size``, ``score_stream`` / ``score_many``, ``compare_stream`` / ``compare_many``,
``run_fields``, ``close``), and the records it returns are the server's judge's records, so a
``--remote`` run writes the results file a local run of the same judge writes (resume, ``--html``
and all). Rows go in requests of ``batch_size``, ``concurrency`` of them in flight; local images are
read here (under ``images_root``, confined unless ``allow_outside_images``), URL images fetched
here, and both sent as bytes, as are encoded bytes and PIL images; a row the server's door would
refuse is checked here by the same rules (:mod:`.rows`) and is its own error record, never sent.
A request the server refuses for a full queue (429) is sent again after its ``Retry-After``; a
server that cannot be reached makes resumable error records (a re-run asks them again).

A client trusts no server: each call is bounded in time as a whole and in the size of its answer
(:mod:`.calls`), and every record received is checked as a local record is (:mod:`.received`: one
per row, its row's id, the served judge's method, an ``ok`` score a finite one on the method's
scale, an ``ok`` verdict a verdict); a record that is not is that row's resumable error record.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from capjudge.core.errors import UsageError
from capjudge.core.redact import register_secret, scrub
from capjudge.data.images import DEFAULT_LIMITS, ImageLimits
from capjudge.data.recordcheck import unit_score
from capjudge.data.types import PairResult, Sample, ScoreResult, image_label
from capjudge.serve.calls import DEFAULT_MAX_RESPONSE_BYTES, DEFAULT_WAIT, Caller, RemoteError
from capjudge.serve.received import Expected, check_records, keeps_outside_scale
from capjudge.serve.rows import row_problem
from capjudge.serve.server import TOKEN_VARIABLE, check_token
from capjudge.serve.wire import fetch_url_fields, is_url, row_to_wire


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
            row = {f: getattr(item, f, None) for f in fields}
            row["shown_first"] = getattr(item, "first", None)  # a Pair's fixed order (--order single)
            return row
    return item


class RowRefused(ValueError):
    """A row the server would refuse (:func:`capjudge.serve.rows.row_problem`): not sent, its own
    error record (not resumable: the same row is refused again)."""


def _failure_details(cause: BaseException) -> dict[str, Any]:
    """A client-made error record's details: resumable (a re-run asks again) unless the row itself
    was refused (asking again gives the same answer)."""
    return {} if isinstance(cause, RowRefused) else {"resumable": True}


class RemoteJudge:
    """A judge served by ``capjudge serve`` at ``url`` (``http://HOST:PORT``).

    ``token`` defaults to ``$CAPJUDGE_TOKEN`` (never logged; one with white space at either end or
    other than printable ASCII is a ``ValueError``); ``batch_size`` rows go in one request,
    ``concurrency`` requests at once; ``images_root`` resolves local image paths, which are read here
    and sent, and ``http(s)`` image URLs are fetched here (the local policy, ``image_limits``' size
    cap and timeout; a failed fetch is that row's error record) and sent (``send_images=False``:
    both sent as they are, for the server's ``--images`` / ``--allow-url-images``); encoded bytes
    and PIL images are always sent inline. A row the server would refuse (a caption that is not a
    string, ...: :mod:`capjudge.serve.rows`) is not sent: it is its own error record; ``timeout`` bounds
    each request as a whole, its answer read entirely (seconds); ``max_response_bytes`` the size of
    an answer; ``retry_for`` how long a 429 is retried; ``wait`` how long the server may take to
    answer ``/health`` at the start (a server still loading its model; 0: ask once).
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
        wait: float = DEFAULT_WAIT,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
    ) -> None:
        self.url = url.rstrip("/")
        self.token = token if token is not None else os.environ.get(TOKEN_VARIABLE)
        register_secret(self.token)
        check_token(self.token, "token=" if token is not None else f"${TOKEN_VARIABLE}")
        self.batch_size = max(1, int(batch_size))
        self.concurrency = max(1, int(concurrency))
        self.images_root = images_root
        self.allow_outside_images = allow_outside_images
        self.image_limits = image_limits
        self.send_images = send_images
        self.retry_for = retry_for
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        self._calls = Caller(self.url, headers, timeout=timeout, max_response_bytes=max_response_bytes)
        try:
            self._calls.wait_ready(wait)
            self.info = self._get_info()
            self.method, self.backend = self._judge_of(self.info)
        except BaseException:
            self._calls.close()
            raise
        self.judge_preset: str | None = self.info.get("judge_preset")
        self._outside_ok = keeps_outside_scale(self.method.name)

    def _get_info(self) -> dict[str, Any]:
        r = self._calls.call("GET", "/v1/info")
        if r.status == 401:
            raise UsageError(f"the judge server at {self.url} refused the token (set ${TOKEN_VARIABLE} to the server's token)")
        if r.status != 200:
            raise RemoteError(f"the judge server at {self.url} answered {r.status} to /v1/info: {r.message()[:300]}")
        try:
            info = r.json()
        except ValueError:
            info = None
        if not isinstance(info, dict):
            raise RemoteError(f"the judge server at {self.url} answered /v1/info with no JSON object: is it a capjudge server?")
        return info

    def _judge_of(self, info: dict[str, Any]) -> tuple[RemoteMethod, RemoteBackend]:
        """The method and backend ``/v1/info`` names (:class:`RemoteError` for an answer that does
        not say what they are)."""
        try:
            m = info["method"]
            low, high = (float(v) for v in m["scale"])
            if not (low < high and all(abs(v) < float("inf") for v in (low, high))):
                raise ValueError(f"scale {m['scale']!r}")
            method = RemoteMethod(
                str(m["name"]), str(m["kind"]), bool(m["pairwise"]), (low, high), str(m["template_hash"]), bool(m["smoothing"]),
                dict(m.get("options") or {}), bool(m.get("reads_logprobs", m["smoothing"])),
            )
            backend = RemoteBackend(str(info["backend"]), str(info["model"]), str(info["kind"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise RemoteError(f"the judge server at {self.url} answered /v1/info without a judge capjudge can use ({type(exc).__name__}: {scrub(str(exc))[:200]})") from None
        return method, backend

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
    def _post(self, route: str, body: dict[str, Any]) -> Any:
        """``POST route``: the answer's ``results`` (unchecked); a 429 sent again after its
        ``Retry-After`` for up to ``retry_for`` seconds; :class:`RemoteError` otherwise."""
        deadline = time.monotonic() + self.retry_for
        while True:
            r = self._calls.call("POST", route, body)
            if r.status == 429 and time.monotonic() < deadline:
                try:
                    pause = min(max(float(r.headers.get("retry-after", "1") or 1), 0.0), 600.0)
                except ValueError:
                    pause = 1.0
                time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
                continue
            if r.status != 200:
                raise RemoteError(f"the judge server answered {r.status}: {r.message()}")
            try:
                answer = r.json()
            except ValueError as exc:
                raise RemoteError(f"the judge server at {self.url} answered {route} with no JSON: {exc}") from None
            if not isinstance(answer, dict) or "results" not in answer:
                raise RemoteError(f"the judge server at {self.url} answered {route} without 'results'")
            return answer["results"]

    def _wire(self, rows: list[Any], start: int) -> tuple[list[Any], dict[int, str]]:
        """The wire form of each row of one request, and the rows not to send: ``{position: what
        is wrong}`` by the server's own row checks (:func:`~capjudge.serve.rows.row_problem`)."""
        out = []
        read: dict[str, dict[str, str]] = {}  # each image of this request read and encoded once
        if self.send_images:  # the request's URL images fetched here, together
            fetch_url_fields([r["image"] for r in rows if isinstance(r, dict) and is_url(r.get("image"))], self.image_limits, read)
        refused: dict[int, str] = {}
        for k, row in enumerate(rows):
            if isinstance(row, dict):
                wired = row_to_wire(row, start + k, images_root=self.images_root, limits=self.image_limits, confine=not self.allow_outside_images, send_images=self.send_images, read=read)
                if (problem := row_problem(wired)) is not None:
                    refused[k] = problem
                out.append(wired)
            else:
                out.append(row)  # the server makes its error record
        return out, refused

    def _stream(self, items: Iterable[Any], route: str, field_name: str, extra: dict[str, Any], make: Any, failed: Any, expected: Expected) -> Iterator[tuple[int, Any]]:
        rows = list(items)
        chunks = [(s, rows[s : s + self.batch_size]) for s in range(0, len(rows), self.batch_size)]
        with ThreadPoolExecutor(max_workers=self.concurrency, thread_name_prefix="capjudge-remote") as pool:
            pending: dict[Future[Any], tuple[int, list[Any], list[Any], dict[int, str]]] = {}
            todo = iter(chunks)

            def fill() -> None:
                while len(pending) < self.concurrency:
                    nxt = next(todo, None)
                    if nxt is None:
                        return
                    start, chunk = nxt
                    wired, refused = self._wire(chunk, start)
                    sent = [w for k, w in enumerate(wired) if k not in refused]
                    fut = pool.submit(self._post, route, {field_name: sent, **extra}) if sent else pool.submit(list)
                    pending[fut] = (start, chunk, sent, refused)

            fill()
            while pending:
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for fut in done:
                    start, chunk, sent, refused = pending.pop(fut)
                    checked: list[tuple[dict[str, Any] | None, str | BaseException | None]]
                    try:
                        checked = list(check_records(fut.result(), sent, expected))
                    except RemoteError as exc:
                        checked = [(None, exc)] * len(sent)
                    answers = iter(checked)
                    for k, row in enumerate(chunk):
                        if k in refused:
                            yield start + k, failed(start + k, row, RowRefused(refused[k]))
                            continue
                        record, problem = next(answers)
                        yield start + k, self._kept(start + k, row, record, problem, make, failed)
                fill()

    def _kept(self, index: int, row: Any, record: dict[str, Any] | None, problem: str | BaseException | None, make: Callable[[dict[str, Any]], Any], failed: Any) -> Any:
        """The result of a row: the server's record when it passed the checks, else the row's
        resumable error record naming the cause."""
        if record is not None:
            try:
                return make(record)
            except (TypeError, ValueError, KeyError) as exc:
                problem = f"a record that is no results-file record ({type(exc).__name__}: {exc})"
        if isinstance(problem, BaseException):
            return failed(index, row, problem)
        return failed(index, row, RemoteError(f"the judge server at {self.url} sent a record that cannot be kept: {scrub(str(problem))}"))

    def _score_failed(self, index: int, row: Any, cause: BaseException) -> ScoreResult:
        row = row if isinstance(row, dict) else {}
        sid = row.get("id")
        refs = row.get("references")
        return ScoreResult(
            image=image_label(row.get("image")), caption=str(row.get("caption", "")), score=None, method=self.method.name, backend=self.backend_spec,
            model=self.backend.model, template_hash=self.method.template_hash, raw=None, status="error", error=f"sample {sid if sid is not None else index}: {cause}",
            id=str(sid) if sid is not None else str(index), scale=self.method.scale, references=[r for r in refs if isinstance(r, str)] if isinstance(refs, (list, tuple)) else [],
            details=_failure_details(cause),
        )

    def _pair_failed(self, mode: str | None) -> Any:
        fields = self.run_fields(mode)

        def failed(index: int, row: Any, cause: BaseException) -> PairResult:
            row = row if isinstance(row, dict) else {}
            pid = row.get("id")
            return PairResult(
                image=image_label(row.get("image")), caption_a=str(row.get("caption_a", "")), caption_b=str(row.get("caption_b", "")), verdict=None,
                method=fields["method"], backend=self.backend_spec, model=self.backend.model, template_hash=fields["template_hash"], mode=fields["mode"],
                status="error", error=f"pair {pid if pid is not None else index}: {cause}", id=str(pid) if pid is not None else str(index), details=_failure_details(cause),
            )

        return failed

    # ------------------------------------------------------------------ the judge interface
    def score_stream(self, samples: Iterable[Sample | dict[str, Any]]) -> Iterator[tuple[int, ScoreResult]]:
        """Score samples on the server, yielding ``(input index, result)`` as answers arrive."""
        if self.method.pairwise:
            raise ValueError(f"method {self.method.name!r} compares pairs: use compare_many / compare_stream")
        rows = (_as_row(s, pairs=False) for s in samples)
        m = self.method
        expected = Expected({"method": m.name, "template_hash": m.template_hash, "backend": self.backend_spec}, m.scale, self._outside_ok)
        return self._stream(rows, "/v1/score", "samples", {}, ScoreResult.from_dict, self._score_failed, expected)

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
        expected = Expected(self.run_fields(mode), pairs=True)  # method, backend, template_hash, mode
        rows = (_as_row(p, pairs=True) for p in pairs)
        return self._stream(rows, "/v1/compare", "pairs", {"mode": mode}, PairResult.from_dict, failed, expected)

    def compare_many(self, pairs: Iterable[Any], *, mode: str | None = None) -> Iterator[PairResult]:
        """Compare pairs on the server, yielding results in input order."""
        results = dict(self.compare_stream(pairs, mode=mode))
        return iter([results[k] for k in sorted(results)])

    def reward(self, completions: list[str], images: list[Any], references: list[list[str]] | None = None, *, normalize: bool = True) -> list[float | None]:
        """Rewards of ``completions`` (one image each, in order), as :func:`capjudge.reward.make_reward`
        gives them: each ok record's score on ``[0, 1]`` (the method's scale mapped onto it,
        clipped), or on the method's scale with ``normalize=False``; ``None`` for a completion that
        could not be judged. Sent as :meth:`score_many` sends rows, the records checked as its are."""
        if len(images) != len(completions) or (references is not None and len(references) != len(completions)):
            raise ValueError(f"{len(completions)} completions need as many images (got {len(images)}) and lists of references (or none)")
        rows = [
            {"image": img, "caption": text, "id": str(k), **({"references": list(references[k])} if references is not None else {})}
            for k, (text, img) in enumerate(zip(completions, images))
        ]
        out: list[float | None] = []
        for result in self.score_many(rows):
            if not result.ok or result.score is None:
                out.append(None)
            else:
                out.append(unit_score(result.score, result.scale) if normalize else float(result.score))
        return out

    def close(self) -> None:
        """Close the connections."""
        self._calls.close()

    def __enter__(self) -> RemoteJudge:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"RemoteJudge({self.url!r}, method={self.method.name!r}, backend={self.backend_spec!r})"


__all__ = ["RemoteBackend", "RemoteError", "RemoteJudge", "RemoteMethod"]
