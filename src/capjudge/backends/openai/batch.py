"""Provider batch jobs for API judges: batch JSONL lines, splitting at the provider's limits, the
state file beside ``--out``, and the files and batches calls of the official ``openai`` SDK.

A *job* is one batch input file and the provider batch made from it. Its life, each step written to
the state file (atomically) before and after it happens, so that a kill at any point loses nothing
and submits nothing twice:

``prepared`` (the JSONL is on disk) -> ``uploading`` -> ``uploaded`` (``file_id`` known) ->
``creating`` -> a provider status (``validating``, ``in_progress``, ``finalizing``, ``completed``,
``failed``, ``expired``, ``cancelling``, ``cancelled``; ``batch_id`` known) -> ``collected``.

A job found in ``uploading`` looks for its file among the uploaded files (same name and size)
before it uploads; one found in ``creating`` looks for its batch among the provider's batches (by
the ``capjudge_job`` metadata it was created with, or its input file) before it creates one.

Line format (OpenAI's, also read by vLLM's ``run-batch``)::

    {"custom_id": KEY, "method": "POST", "url": "/v1/chat/completions", "body": {...}}

``custom_id`` is the request's response-cache key; ``body`` exactly what the online request sends.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from capjudge.backends.base import BackendError
from capjudge.backends.credentials import mask_argv, safe_options
from capjudge.core.errors import CapjudgeError
from capjudge.core.redact import get_logger, scrub, scrub_data
from capjudge.data.io import read_jsonl as jsonl_lines
from capjudge.data.io import write_atomically

log = get_logger("capjudge.backends.openai.batch")

DEFAULT_MAX_REQUESTS = 50_000
"""OpenAI's limit of requests in one batch input file."""
DEFAULT_MAX_BYTES = 200 * 1024 * 1024
"""OpenAI's limit on the size of one batch input file (200 MB)."""
COMPLETION_WINDOW = "24h"
TERMINAL = frozenset({"completed", "failed", "expired", "cancelled"})
"""Provider statuses after which a batch changes no more."""
STATE_VERSION = 1


class BatchStateError(CapjudgeError, RuntimeError):
    """The state file cannot be read, or belongs to another run."""


def state_paths(out: str | Path) -> tuple[Path, Path]:
    """The state file (``OUT.batch.json``) and the work folder (``OUT.batch/``) of ``--out``."""
    p = Path(out)
    return p.with_name(p.name + ".batch.json"), p.with_name(p.name + ".batch")


def batch_line(custom_id: str, body: dict[str, Any], url: str) -> bytes:
    """One line of a batch input file (UTF-8, newline included)."""
    line = {"custom_id": custom_id, "method": "POST", "url": url, "body": body}
    return (json.dumps(line, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")


@dataclass(frozen=True)
class BatchLimits:
    """A provider's limits on one batch: requests and bytes of its input file."""

    max_requests: int = DEFAULT_MAX_REQUESTS
    max_bytes: int = DEFAULT_MAX_BYTES

    def __post_init__(self) -> None:
        if self.max_requests < 1 or self.max_bytes < 1:
            raise ValueError(f"batch limits must be positive (requests {self.max_requests}, bytes {self.max_bytes})")


class LineTooLarge(CapjudgeError, ValueError):
    """A single request is larger than the per-batch byte limit."""


@dataclass
class Job:
    """One batch input file and the provider batch made from it (see the module docstring)."""

    name: str
    input: str  # file name in the work folder
    lines: int
    bytes: int
    sha256: str
    round: int
    status: str = "prepared"
    file_id: str | None = None
    batch_id: str | None = None
    output_file_id: str | None = None
    error_file_id: str | None = None
    counts: dict[str, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    created: float = field(default_factory=time.time)

    @property
    def in_flight(self) -> bool:
        """Submitted (or being submitted) and not yet collected."""
        return self.status != "collected"

    @property
    def info(self) -> str:
        """The sidecar file of the job's lines (key, cacheable, logprobs wanted)."""
        return self.input.replace(".jsonl", ".info.jsonl")


class JobWriter:
    """Writes batch lines into job files in ``directory``, starting a new file whenever the next
    line would take the current one past ``limits``. Each line's facts that the provider must not
    see (whether its answer may go into the response cache, whether log-probabilities were wanted)
    go into a sidecar ``*.info.jsonl``."""

    def __init__(self, directory: Path, prefix: str, round_: int, url: str, limits: BatchLimits | None) -> None:
        self.directory = directory
        self.prefix = prefix
        self.round = round_
        self.url = url
        self.limits = limits
        self.jobs: list[Job] = []
        self._fh: Any = None
        self._info: Any = None
        self._hash: Any = None
        self._lines = 0
        self._bytes = 0

    def _open(self) -> None:
        index = len(self.jobs)
        name = f"{self.prefix}-r{self.round}-b{index}"
        self.directory.mkdir(parents=True, exist_ok=True)
        self._fh = (self.directory / f"{name}.jsonl").open("wb")
        self._info = (self.directory / f"{name}.info.jsonl").open("w", encoding="utf-8")
        self._hash = hashlib.sha256()
        self._lines = self._bytes = 0
        self.jobs.append(Job(name=name, input=f"{name}.jsonl", lines=0, bytes=0, sha256="", round=self.round))

    def add(self, custom_id: str, body: dict[str, Any], *, cacheable: bool, wanted_logprobs: bool) -> None:
        """Append one request; raises :class:`LineTooLarge` when it alone exceeds the byte limit."""
        data = batch_line(custom_id, body, self.url)
        if self.limits is not None and len(data) > self.limits.max_bytes:
            raise LineTooLarge(f"the request is {len(data)} bytes, more than one batch may hold ({self.limits.max_bytes} bytes)")
        full = self._fh is not None and self.limits is not None and (self._lines + 1 > self.limits.max_requests or self._bytes + len(data) > self.limits.max_bytes)
        if self._fh is None or full:
            self._close_current()
            self._open()
        self._fh.write(data)
        self._hash.update(data)
        self._info.write(json.dumps({"id": custom_id, "cacheable": cacheable, "wanted": wanted_logprobs}) + "\n")
        self._lines += 1
        self._bytes += len(data)

    def _close_current(self) -> None:
        if self._fh is None:
            return
        for fh in (self._fh, self._info):
            fh.flush()
            os.fsync(fh.fileno())
            fh.close()
        job = self.jobs[-1]
        job.lines, job.bytes, job.sha256 = self._lines, self._bytes, self._hash.hexdigest()
        self._fh = self._info = None

    def close(self) -> list[Job]:
        """Finish the last file; the jobs written, in order."""
        self._close_current()
        return self.jobs

    @property
    def total(self) -> int:
        """Lines written so far."""
        return sum(j.lines for j in self.jobs[:-1]) + self._lines if self.jobs else 0


@dataclass
class BatchStats:
    """What the batches of a run did, for the summary (kept across processes in the state)."""

    rounds: int = 0
    submitted: int = 0  # lines submitted, resubmissions included
    answered: int = 0  # lines answered (status 200)
    failed: int = 0  # lines the provider refused (4xx): error records
    resubmitted: int = 0  # lines submitted again after they expired or failed for a transient cause
    online: int = 0  # lines sent as online requests after they expired or failed (--batch-failed online)
    exhausted: int = 0  # lines still unanswered after the last attempt
    too_large: int = 0  # requests larger than one batch may hold (sent online, or error records)


class BatchState:
    """The state file of one batch run: its identity, the command, the jobs, the statistics.
    Every :meth:`save` is atomic (a temporary file, fsync, rename)."""

    def __init__(self, path: Path, data: dict[str, Any]) -> None:
        self.path = path
        self.run_id: str = data["run_id"]
        self.prefix: str = data["prefix"]
        self.command: list[str] = list(data.get("command") or [])
        self.cwd: str = data.get("cwd") or os.getcwd()
        self.backend: str = data.get("backend", "")
        self.backend_options: dict[str, Any] = dict(data.get("backend_options") or {})
        # Where the credentials came from, by name only (OpenAIBackend.credential_sources()):
        # keys and URL credentials are never written; those given on the command line are asked
        # for again by the commands that need them.
        self.credentials: dict[str, Any] = dict(data.get("credentials") or {})
        self.jobs: list[Job] = [Job(**j) for j in data.get("jobs") or []]
        self.stats = BatchStats(**(data.get("stats") or {}))
        # What the server's answers taught (``logprobs_refused``, ``top_cap``), as the online
        # backend learns it from a refusal, kept for the rounds to come.
        self.learned: dict[str, Any] = dict(data.get("learned") or {})
        self.created: float = float(data.get("created") or time.time())

    @classmethod
    def new(
        cls, path: Path, *, run_id: str, command: list[str], backend: str, backend_options: dict[str, Any], credentials: dict[str, Any] | None = None
    ) -> BatchState:
        """A fresh state (not yet saved); job names start with a random prefix of this run. No
        credential is kept: the command and the spec show them as ``***``, credential options
        (``api_key`` ...) are left out, ``credentials`` says where they came from."""
        prefix = f"capjudge-{run_id[:10]}-{secrets.token_hex(3)}"
        return cls(
            path,
            {
                "run_id": run_id,
                "prefix": prefix,
                "command": [scrub(a) for a in mask_argv(command)],
                "cwd": os.getcwd(),
                "backend": scrub(backend),
                "backend_options": scrub_data(safe_options(backend_options)),
                "credentials": credentials or {},
            },
        )

    @classmethod
    def load(cls, path: Path) -> BatchState:
        """Read a state file (:class:`BatchStateError` when it is unreadable)."""
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise BatchStateError(f"the batch state file {path} cannot be read: {exc}") from exc
        if not isinstance(data, dict) or data.get("version") != STATE_VERSION or "run_id" not in data:
            raise BatchStateError(f"{path} is not a capjudge batch state file (version {STATE_VERSION})")
        return cls(path, data)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form written to the state file."""
        return {
            "version": STATE_VERSION,
            "run_id": self.run_id,
            "prefix": self.prefix,
            "command": self.command,
            "cwd": self.cwd,
            "backend": self.backend,
            "backend_options": self.backend_options,
            "credentials": self.credentials,
            "created": self.created,
            "jobs": [asdict(j) for j in self.jobs],
            "stats": asdict(self.stats),
            "learned": self.learned,
        }

    def save(self) -> None:
        """Write the state atomically."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        state = self.to_dict()
        write_atomically(self.path, lambda fh: json.dump(state, fh, indent=1))

    @property
    def next_round(self) -> int:
        """The number of the next round of jobs."""
        return max((j.round for j in self.jobs), default=0) + 1

    @property
    def in_flight(self) -> list[Job]:
        """Jobs not yet collected."""
        return [j for j in self.jobs if j.in_flight]


def _page(listing: Any) -> Iterator[Any]:
    """Every item of an SDK list call (auto-paginating)."""
    yield from listing


MAX_DOWNLOAD_BYTES = 4 * 1024**3
"""A batch's output or error file is downloaded up to this many bytes (a provider's file of
50,000 answers runs to hundreds of MB): a larger one is refused, its partial copy removed."""


class FileTooLarge(BackendError):
    """A batch file being downloaded ran over :data:`MAX_DOWNLOAD_BYTES`: refused, not kept."""


class Provider:
    """The files and batches calls of the official ``openai`` SDK for one backend; files are
    downloaded up to ``max_download_bytes``."""

    def __init__(self, client: Any, url: str, *, max_download_bytes: int = MAX_DOWNLOAD_BYTES) -> None:
        self.client = client
        self.url = url
        self.max_download_bytes = max_download_bytes

    def find_file(self, name: str, size: int) -> str | None:
        """The id of an uploaded batch file with this name and size (a kill after the upload, before
        the state was written), or ``None``. Servers without a file listing: ``None``."""
        try:
            for f in _page(self.client.files.list(purpose="batch")):
                if getattr(f, "filename", None) == name and int(getattr(f, "bytes", -1) or -1) == size:
                    return str(f.id)
        except Exception as exc:  # noqa: BLE001 - listing is only a reconciliation aid
            log.info("cannot list uploaded files (%s); uploading %s", scrub(str(exc)), name)
        return None

    def upload(self, path: Path) -> str:
        """Upload a batch input file (purpose ``batch``); its file id."""
        with path.open("rb") as fh:
            uploaded = self.client.files.create(file=(path.name, fh, "application/jsonl"), purpose="batch")
        return str(uploaded.id)

    def find_batch(self, job: Job) -> Any | None:
        """The provider batch created for ``job`` (by its ``capjudge_job`` metadata or its input
        file), or ``None``. Batches are listed newest first: the search stops at batches older than
        the job."""
        try:
            for b in _page(self.client.batches.list(limit=100)):
                meta = getattr(b, "metadata", None) or {}
                if meta.get("capjudge_job") == job.name or (job.file_id and getattr(b, "input_file_id", None) == job.file_id):
                    return b
                created = getattr(b, "created_at", None)
                if isinstance(created, (int, float)) and created < job.created - 3600:
                    break
        except Exception as exc:  # noqa: BLE001 - a server without a listing: nothing to find
            log.info("cannot list batches (%s)", scrub(str(exc)))
        return None

    def create(self, job: Job) -> Any:
        """Create the batch of an uploaded job (24 h window, ``capjudge_job`` metadata)."""
        return self.client.batches.create(
            input_file_id=job.file_id,
            endpoint=self.url,
            completion_window=COMPLETION_WINDOW,
            metadata={"capjudge_job": job.name},
        )

    def retrieve(self, batch_id: str) -> Any:
        """The batch as the provider sees it now."""
        return self.client.batches.retrieve(batch_id)

    def cancel(self, batch_id: str) -> Any:
        """Ask the provider to cancel a batch (it becomes ``cancelling``, then ``cancelled``)."""
        return self.client.batches.cancel(batch_id)

    def download(self, file_id: str, dest: Path) -> Path:
        """Save a file's content (an output or error file) to ``dest`` (atomically), up to
        ``max_download_bytes``: :class:`FileTooLarge` beyond (announced or as it streams in), the
        partial copy removed."""
        tmp = dest.with_name(dest.name + ".part")
        cap = self.max_download_bytes
        too_large = f"batch file {file_id} is over {cap:,} bytes: refused, not kept (capjudge.backends.openai.batch.MAX_DOWNLOAD_BYTES)"
        try:
            with tmp.open("wb") as fh, self.client.files.with_streaming_response.content(file_id) as response:
                declared = str(response.headers.get("content-length", ""))
                if declared.isdigit() and int(declared) > cap:
                    raise FileTooLarge(f"{too_large}; it announced {int(declared):,} bytes")
                size = 0
                for chunk in response.iter_bytes():  # output files of large batches run to hundreds of MB
                    size += len(chunk)
                    if size > cap:
                        raise FileTooLarge(too_large)
                    fh.write(chunk)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        os.replace(tmp, dest)
        return dest

    def close(self) -> None:
        """Close the SDK client."""
        with contextlib.suppress(Exception):
            self.client.close()


def apply_status(job: Job, batch: Any) -> None:
    """Copy a provider batch's status, counts, result files and errors into ``job``."""
    job.batch_id = str(batch.id)
    job.status = str(batch.status)
    job.output_file_id = getattr(batch, "output_file_id", None)
    job.error_file_id = getattr(batch, "error_file_id", None)
    counts = getattr(batch, "request_counts", None)
    if counts is not None:
        job.counts = {k: int(getattr(counts, k, 0) or 0) for k in ("total", "completed", "failed")}
    errors = getattr(getattr(batch, "errors", None), "data", None) or []
    job.errors = [scrub(f"{getattr(e, 'code', None) or 'error'}: {getattr(e, 'message', None) or ''}".strip()) for e in errors][:5]


def submit_job(provider: Provider, state: BatchState, job: Job, work: Path) -> None:
    """Upload ``job``'s file and create its batch, writing the state before and after each step;
    a job left halfway by a kill is reconciled with what the provider has (see the module)."""
    path = work / job.input
    if job.status in ("prepared", "uploading"):
        found = provider.find_file(job.input, job.bytes) if job.status == "uploading" else None
        if found is None:
            job.status = "uploading"
            state.save()
            found = provider.upload(path)
        job.file_id, job.status = found, "uploaded"
        state.save()
    if job.status in ("uploaded", "creating"):
        batch = provider.find_batch(job) if job.status == "creating" else None
        if batch is None:
            job.status = "creating"
            state.save()
            batch = provider.create(job)
        apply_status(job, batch)
        state.save()
        log.info("batch %s: %d requests, %s", job.batch_id, job.lines, job.status)


def read_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    """The JSON-object lines of a batch file (blank lines skipped; broken ones too, with a warning)."""
    for line in jsonl_lines(path):
        if line.error is not None:
            log.warning("%s line %d is not JSON; skipped", path, line.number)
            continue
        if isinstance(line.value, dict):
            yield line.value


__all__ = [
    "COMPLETION_WINDOW",
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_REQUESTS",
    "TERMINAL",
    "BatchLimits",
    "BatchState",
    "BatchStateError",
    "BatchStats",
    "Job",
    "JobWriter",
    "LineTooLarge",
    "Provider",
    "apply_status",
    "batch_line",
    "read_jsonl",
    "state_paths",
    "submit_job",
]
