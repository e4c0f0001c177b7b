"""A ``score`` / ``compare`` run through provider batches (``--batch``), ``--batch-export`` and
``--batch-import``.

:class:`BatchSession` drives it in rounds; every step is in the state file, so the same command
run again (or ``capjudge batch collect``) carries on wherever the last one stopped:

1. poll the run's batches; download the output and error files of those that ended and put every
   answer into the response cache and the run's store (:mod:`.batch_store`); lines that expired
   or failed for a transient cause are counted and asked again in a later batch (or, with
   ``--batch-failed online``, sent as online requests by the final pass);
2. while batches are in progress: exit with "submitted" (or, with ``--wait``, sleep
   ``--poll-interval`` seconds and poll again);
3. a planning pass: the normal scoring flow over the rows still to judge, answered from what is
   known; what is not becomes the lines of a new round of batches, split at the per-batch limits,
   uploaded and created (step 1 again);
4. when a planning pass finds nothing to ask: the final pass, the normal online flow, writes
   ``--out`` from the store and the cache, exactly as an online run would.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from capjudge.backends.base import Backend, BackendError, Completion, Request
from capjudge.backends.cache import CachedBackend, cacheable
from capjudge.backends.openai.backend import OpenAIBackend
from capjudge.backends.openai.batch import (
    TERMINAL,
    BatchLimits,
    BatchState,
    BatchStateError,
    Job,
    JobWriter,
    Provider,
    apply_status,
    read_jsonl,
    state_paths,
    submit_job,
)
from capjudge.backends.openai.batch_store import PlanningBackend, ReplayBackend, RunStore
from capjudge.backends.openai.caps import AZURE_MAX_TOP_LOGPROBS
from capjudge.backends.openai.retry import RETRY_STATUS, describe
from capjudge.backends.openai.wire import refused_field
from capjudge.core.redact import get_logger, scrub

log = get_logger("capjudge.backends.openai.batch_run")

FailedLines = Literal["resubmit", "online"]


@dataclass(frozen=True)
class BatchOptions:
    """How a run uses batches (the CLI's ``--batch*`` flags)."""

    submit: bool = False  # --batch
    wait: bool = False
    poll_interval: float = 60.0
    limits: BatchLimits = BatchLimits()
    failed: FailedLines = "resubmit"
    attempts: int = 3
    export: Path | None = None
    import_: Path | None = None


def api_backend(backend: Backend) -> OpenAIBackend:
    """The OpenAI-protocol backend behind a judge's backend (unwrapping the response cache);
    :class:`BackendError` for any other backend."""
    inner = backend.inner if isinstance(backend, CachedBackend) else backend
    if not isinstance(inner, OpenAIBackend):
        raise BackendError(f"batch mode needs an openai:, azure: or openai-compatible: backend, not {backend.spec or backend.kind!r}")
    return inner


COMMAND_LINE_KEY = "the api_key option"  # OpenAIBackend.credential_sources()'s name for a key given as an option


def check_credentials_given(state: BatchState, now: dict[str, Any]) -> None:
    """A :class:`BatchStateError` (a usage error) when the run that wrote ``state`` was given
    credentials on the command line that this run lacks: the state never holds them, and the
    batches belong to the account they name."""
    missing: list[str] = []
    if state.credentials.get("api_key") == COMMAND_LINE_KEY and now.get("api_key") != COMMAND_LINE_KEY:
        missing.append("its API key (--backend-opt api_key=...)")
    url = list(state.credentials.get("url") or [])
    if url and list(now.get("url") or []) != url:
        missing.append(f"the credentials of its --backend URL ({', '.join(url)})")
    if missing:
        raise BatchStateError(
            f"the batch run in {state.path} was given {' and '.join(missing)} on the command line; capjudge never writes credentials "
            "to disk: give them again (run the same command, with them)"
        )


def run_id(backend: Backend, fields: dict[str, Any]) -> str:
    """What must not change between the runs that share a state file: the backend's identity and
    the fields every record carries (method, template hash, mode)."""
    payload = json.dumps({"backend": backend.identity(), "run": fields}, sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()


def _line_error(response: Any, error: Any) -> tuple[int | None, str | None, str]:
    """``(status, code, message)`` of a batch line that did not answer 200."""
    status = response.get("status_code") if isinstance(response, dict) else None
    body = response.get("body") if isinstance(response, dict) else None
    err = body.get("error") if isinstance(body, dict) and isinstance(body.get("error"), dict) else error if isinstance(error, dict) else {}
    code = err.get("code") if isinstance(err, dict) else None
    message = (err.get("message") if isinstance(err, dict) else None) or (json.dumps(body)[:300] if body else "no answer")
    return (int(status) if isinstance(status, int) else None), (str(code) if code else None), str(message)


def _transient(status: int | None) -> bool:
    return status is None or status in RETRY_STATUS or status >= 500


@contextlib.contextmanager
def provider_errors() -> Iterator[None]:
    """A failed files or batches call as a :class:`BackendError` that says what failed (the state
    is kept: the same command carries on)."""
    import openai

    try:
        yield
    except openai.OpenAIError as exc:
        err = describe(exc)
        hint = (
            " (the server does not serve the /files and /batches endpoints: a plain vLLM server does not;"
            " use --batch-export with vLLM's run-batch, or a LiteLLM proxy)"
            if getattr(err, "status", None) == 404
            else ""
        )
        raise BackendError(f"a files/batches call failed: {err}{hint}; the batch state is kept: run the same command again") from exc


class Importer:
    """Answers of an output JSONL (``--batch-import``; OpenAI's and vLLM ``run-batch``'s format:
    ``custom_id`` -> ``response.body``), handed out by the planning pass, which knows the request
    each answer belongs to."""

    def __init__(self, path: Path, api: OpenAIBackend) -> None:
        self.path = path
        self.api = api
        self.lines: dict[str, dict[str, Any]] = {}
        for obj in read_jsonl(path):
            if isinstance(obj.get("custom_id"), str):
                self.lines[obj["custom_id"]] = obj
        self.answers: list[tuple[str, Completion, bool]] = []
        self.errors: list[tuple[str, dict[str, Any]]] = []
        self.used: set[str] = set()

    def answer(self, key: str, request: Request) -> Completion | BaseException | None:
        """The imported answer to ``request`` (``key`` its custom_id), or ``None``."""
        line = self.lines.get(key)
        if line is None:
            return None
        self.used.add(key)
        response = line.get("response")
        if isinstance(response, dict) and response.get("status_code") == 200:
            try:
                completion = self.api.completion_from_body(response.get("body") or {}, self.api.request_body(request), wanted_logprobs=request.config.top_logprobs > 0)
            except Exception as exc:  # noqa: BLE001 - a broken line is that request's error
                return exc
            cost = self.api.prices.cost(self.api.model_name, completion.usage, batch=True)
            completion.meta["cost_usd"] = cost
            spent = self.api.wire.budget_spent(completion, request.config.max_new_tokens + self.api.wire.reasoning_budget)
            self.answers.append((key, completion, cacheable(request) and spent is None))  # an empty answer is not kept
            return completion
        status, code, message = _line_error(response, line.get("error"))
        if _transient(status):
            return None  # not answered: asked in a batch, or online
        err = {"status": status, "code": code, "message": f"HTTP {status}{f' [{code}]' if code else ''}: {message} (imported from {self.path.name})"}
        self.errors.append((key, err))
        return RunStore.error_from(err)


class BatchSession:
    """One batch run over the rows of a ``score`` or ``compare`` command (see the module)."""

    def __init__(self, judge: Any, out: str | Path, options: BatchOptions, *, command: list[str], fields: dict[str, Any], backend_options: dict[str, Any]) -> None:
        self.judge = judge
        self.outer: Backend = judge.backend
        self.api = api_backend(self.outer)
        self.options = options
        self.cache = self.outer.cache if isinstance(self.outer, CachedBackend) else None
        self.state_path, self.work = state_paths(out)
        self.run_id = run_id(self.outer, fields)
        self.command = command
        self.backend_options = backend_options
        self.state: BatchState | None = None
        if self.state_path.exists():
            state = BatchState.load(self.state_path)
            # First: a spec without its URL credentials also differs in the run's fields.
            check_credentials_given(state, self.api.credential_sources())
            if state.run_id != self.run_id:
                raise BatchStateError(
                    f"{self.state_path} holds the batches of another run (another backend, method or template) for this --out: "
                    "finish it with its own command, cancel it (`capjudge batch cancel`), or delete the state file and its folder"
                )
            self.state = state
            self._apply_learned(state)
        self.store = RunStore(self.work / "store")
        self._provider: Provider | None = None
        self.imported = 0
        self.import_unused = 0
        self.replay: ReplayBackend | None = None

    # ------------------------------------------------------------------ plumbing
    @property
    def provider(self) -> Provider:
        """The SDK client for the files and batches calls (built on first use)."""
        if self._provider is None:
            self._provider = Provider(self.api.batch_client(), self.api.batch_url)
        return self._provider

    def _state(self) -> BatchState:
        if self.state is None:
            self.state = BatchState.new(
                self.state_path,
                run_id=self.run_id,
                command=self.command,
                backend=self.outer.spec,
                backend_options=self.backend_options,
                credentials=self.api.credential_sources(),
            )
        return self.state

    @contextlib.contextmanager
    def _installed(self, backend: Backend) -> Iterator[None]:
        self.judge.backend = backend
        try:
            yield
        finally:
            self.judge.backend = self.outer

    # ------------------------------------------------------------------ the rounds
    def prepare(self, plan_pass: Callable[[], None], *, say: Callable[[str], None] = print) -> Literal["ready", "pending", "exported"]:
        """Import, collect, plan and submit until the final pass can run (``"ready"``), batches
        are in progress without ``--wait`` (``"pending"``), or ``--batch-export`` wrote its file."""
        opts = self.options
        if opts.import_ is not None:
            self._import(plan_pass, say)
        if opts.export is not None:
            self._export(plan_pass, say)
            return "exported"
        if not opts.submit:
            return "ready"
        with provider_errors():
            return self._rounds(plan_pass, say)

    def _rounds(self, plan_pass: Callable[[], None], say: Callable[[str], None]) -> Literal["ready", "pending"]:
        opts = self.options
        while True:
            state = self.state
            if state is not None and state.in_flight:
                self._advance(state, say)
                if state.in_flight:
                    if not opts.wait:
                        return "pending"
                    time.sleep(opts.poll_interval)
                    continue
            if not self._plan_round(plan_pass, say):
                return "ready"
            if not opts.wait:
                return "pending"

    def _advance(self, state: BatchState, say: Callable[[str], None]) -> None:
        """Submit jobs left halfway; poll the others; collect those that ended."""
        for job in state.in_flight:
            if job.batch_id is None:
                submit_job(self.provider, state, job, self.work)
                continue
            if job.status not in TERMINAL:
                apply_status(job, self.provider.retrieve(job.batch_id))
                state.save()
            if job.status in TERMINAL:
                self._collect(state, job, say)

    def _plan_round(self, plan_pass: Callable[[], None], say: Callable[[str], None]) -> bool:
        """A planning pass; when it finds requests to ask, write, upload and create the batches of
        a new round and return ``True``."""
        state = self._state()
        round_ = state.next_round
        writer = JobWriter(self.work, state.prefix, round_, self.api.batch_url, self.options.limits)
        planner = PlanningBackend(self.outer, self.api, self.store, writer)
        with self._installed(planner):
            plan_pass()
        jobs = writer.close()
        self._place_too_large(planner, state)
        if not jobs:
            self._remove_job_files(round_)
            return False
        state.stats.rounds += 1
        state.stats.submitted += planner.lines
        state.stats.resubmitted += planner.resubmitted
        state.jobs.extend(jobs)
        state.save()  # the files are on disk before anything is uploaded
        for job in jobs:
            submit_job(self.provider, state, job, self.work)
        say(f"batch round {round_}: {planner.lines} request(s) in {len(jobs)} batch(es): {', '.join(str(j.batch_id) for j in jobs)}")
        return True

    def _place_too_large(self, planner: PlanningBackend, state: BatchState) -> None:
        """Requests larger than one batch may hold: online (``--batch-failed online``) or errors;
        requests that cannot be built: the error an online request gets."""
        if planner.unsendable:
            self.store.put(errors=[(k, {"kind": "request", "message": why}) for k, why in planner.unsendable])
        if not planner.too_large:
            return
        state.stats.too_large += len(planner.too_large)
        if self.options.failed == "online":
            self.store.put(online=[k for k, _ in planner.too_large])
        else:
            self.store.put(errors=[(k, {"kind": "too_large", "message": f"not sent: {why}"}) for k, why in planner.too_large])

    def _remove_job_files(self, round_: int) -> None:
        assert self.state is not None
        for path in self.work.glob(f"{self.state.prefix}-r{round_}-b*.jsonl"):
            path.unlink(missing_ok=True)

    # ------------------------------------------------------------------ collecting
    def _collect(self, state: BatchState, job: Job, say: Callable[[str], None]) -> None:
        """Download a finished job's output and error files and store every line's outcome; the
        job is marked collected only once its outcomes are stored (collecting twice is harmless)."""
        info = {obj["id"]: obj for obj in read_jsonl(self.work / job.info)}
        bodies = {obj["custom_id"]: obj.get("body") or {} for obj in read_jsonl(self.work / job.input)}
        lines: list[dict[str, Any]] = []
        for kind, file_id in (("output", job.output_file_id), ("errors", job.error_file_id)):
            if file_id:
                path = self.provider.download(file_id, self.work / f"{job.name}.{kind}.jsonl")
                lines.extend(read_jsonl(path))
        answers: list[tuple[str, Completion]] = []
        cache_items: list[tuple[str, Completion]] = []
        errors: list[tuple[str, dict[str, Any]]] = []
        transient: dict[str, str] = {}
        free: set[str] = set()  # asked again without counting an attempt
        seen: set[str] = set()
        for line in lines:
            key = line.get("custom_id")
            if not isinstance(key, str) or key not in bodies or key in seen:
                continue
            seen.add(key)
            response = line.get("response")
            if isinstance(response, dict) and response.get("status_code") == 200:
                try:
                    completion = self.api.completion_from_body(response.get("body") or {}, bodies[key], wanted_logprobs=bool(info.get(key, {}).get("wanted")))
                except Exception as exc:  # noqa: BLE001 - a malformed answer is asked again
                    transient[key] = f"malformed answer: {exc}"
                    continue
                cost = self.api.prices.cost(self.api.model_name, completion.usage, batch=True)
                if cost is None and completion.model != self.api.model_name:
                    cost = self.api.prices.cost(completion.model, completion.usage, batch=True)
                completion.meta["cost_usd"] = cost
                completion.meta["batch_id"] = job.batch_id
                answers.append((key, completion))
                # An answer a reasoning model left empty (its reasoning spent the budget) is that
                # line's error when replayed, and never a cache entry.
                if info.get(key, {}).get("cacheable") and self.api.wire.budget_spent(completion, bodies[key].get("max_completion_tokens")) is None:
                    cache_items.append((key, completion))
                continue
            status, code, message = _line_error(response, line.get("error"))
            if self._learn_logprobs(state, status, message, bodies[key]):
                transient[key] = f"asked again: {message}"
                free.add(key)
            elif _transient(status):
                transient[key] = f"{code or status or 'error'}: {message}"
            else:
                errors.append((key, {"status": status, "code": code, "message": f"HTTP {status}{f' [{code}]' if code else ''}: {message} (batch {job.batch_id})"}))
        why = f"batch {job.batch_id} ended {job.status}" + (f" ({'; '.join(job.errors)})" if job.errors else "")
        for key in bodies:
            if key not in seen:
                transient[key] = why
        online: list[str] = []
        tries: list[tuple[str, str]] = []
        for key, cause in transient.items():
            if self.options.failed == "online":
                online.append(key)
                continue
            tried = set(self.store.tried(key))
            if job.status != "cancelled" and key not in free:  # a cancelled batch is no attempt
                tries.append((key, job.name))
                tried.add(job.name)
            if len(tried) >= self.options.attempts:
                errors.append((key, {"kind": "exhausted", "message": scrub(f"not answered by {self.options.attempts} batches (last: {cause}); run the same command again")}))
        if self.cache is not None and cache_items:
            self.cache.set_many(cache_items, metadata={"backend": self.api.identity(), "batch_id": job.batch_id})
        self.store.put(answers=answers, errors=errors, online=online, tries=tries)
        exhausted = sum(1 for _, e in errors if e.get("kind") == "exhausted")
        state.stats.answered += len(answers)
        state.stats.failed += len(errors) - exhausted
        state.stats.exhausted += exhausted
        state.stats.online += len(online)
        job.status = "collected"
        state.save()
        say(f"batch {job.batch_id}: {len(answers)} answered, {len(errors) - exhausted} failed, {len(transient)} expired or not answered")

    def _learn_logprobs(self, state: BatchState, status: int | None, message: str, body: dict[str, Any]) -> bool:
        """A line refused for its log-probabilities (or the neutral penalty fields): remember it as
        the online backend does (no logprobs from now on, at most 5 ``top_logprobs``, no penalty
        fields) so the next round asks without them; ``True`` when the line is to be asked again."""
        refused = refused_field(
            status,
            message,
            sent_penalties=self.api.wire.sent_penalties(body),
            sent_logprobs=bool(body.get("logprobs")),
            top_logprobs=int(body.get("top_logprobs") or 0),
        )
        if refused == "penalties":
            state.learned["no_penalties"] = True  # as online: no penalty fields from now on
            self._apply_learned(state)
            return True
        if refused is None:
            return False
        if refused == "top_logprobs":
            state.learned["top_cap"] = AZURE_MAX_TOP_LOGPROBS
        else:
            state.learned["logprobs_refused"] = scrub(f"server refused logprobs: HTTP {status}: {message}")
        self._apply_learned(state)
        return True

    def _apply_learned(self, state: BatchState) -> None:
        """What earlier rounds learned about the server, applied to the backend that builds lines."""
        cap = state.learned.get("top_cap")
        if isinstance(cap, int):
            self.api.wire.top_cap = min(self.api.wire.top_cap, cap)
        refused = state.learned.get("logprobs_refused")
        if isinstance(refused, str):
            self.api.wire.logprobs_refused = refused
        if state.learned.get("no_penalties"):
            self.api.wire.send_penalties = False

    # ------------------------------------------------------------------ export / import
    def _export(self, plan_pass: Callable[[], None], say: Callable[[str], None]) -> None:
        """``--batch-export FILE``: the lines of every request not yet answered, nothing submitted."""
        assert self.options.export is not None
        target = self.options.export
        writer = JobWriter(self.work / "export", "export", 1, self.api.batch_url, None)
        planner = PlanningBackend(self.outer, self.api, self.store, writer)
        with self._installed(planner):
            plan_pass()
        jobs = writer.close()
        target.parent.mkdir(parents=True, exist_ok=True)
        if jobs:
            shutil.move(str(self.work / "export" / jobs[0].input), str(target))
        else:
            target.write_bytes(b"")
        shutil.rmtree(self.work / "export", ignore_errors=True)
        say(f"exported {planner.lines} request(s) to {target}; nothing was submitted")

    def _import(self, plan_pass: Callable[[], None], say: Callable[[str], None]) -> None:
        """``--batch-import FILE``: its answers into the response cache and the run's store."""
        assert self.options.import_ is not None
        importer = Importer(self.options.import_, self.api)
        while True:  # two-step methods: the first step's answers make the next requests
            before = len(importer.used)
            planner = PlanningBackend(self.outer, self.api, self.store, None, importer=importer)
            with self._installed(planner):
                plan_pass()
            if importer.answers or importer.errors:
                cache_items = [(k, c) for k, c, ok in importer.answers if ok]
                if self.cache is not None and cache_items:
                    self.cache.set_many(cache_items, metadata={"backend": self.api.identity(), "imported": self.options.import_.name})
                self.store.put(answers=[(k, c) for k, c, _ in importer.answers], errors=importer.errors)
                self.imported += len(importer.answers)
                importer.answers, importer.errors = [], []
            if len(importer.used) == before:
                break
        self.import_unused = len(importer.lines) - len(importer.used)
        say(f"imported {self.imported} answer(s) from {self.options.import_}" + (f"; {self.import_unused} line(s) matched no request of this run" if self.import_unused else ""))

    # ------------------------------------------------------------------ the final pass
    @contextlib.contextmanager
    def replaying(self) -> Iterator[None]:
        """The judge's backend answers from this run's store for the final pass."""
        allow_online = self.options.failed == "online" or not self.options.submit
        self.replay = ReplayBackend(self.outer, self.store, self.api.usage, allow_online=allow_online)
        with self._installed(self.replay):
            yield

    def finish(self) -> None:
        """The run is complete: remove the state file and the work folder."""
        self.close()
        self.state_path.unlink(missing_ok=True)
        shutil.rmtree(self.work, ignore_errors=True)

    def close(self) -> None:
        """Close the store and the SDK client (the state stays)."""
        self.store.close()
        if self._provider is not None:
            self._provider.close()
            self._provider = None

    def summary_rows(self) -> list[tuple[str, str]]:
        """What the batches did, for the run's summary table."""
        rows: list[tuple[str, str]] = []
        if self.imported or self.options.import_ is not None:
            rows.append(("imported answers", str(self.imported)))
        s = self.state.stats if self.state is not None else None
        if s is None or not s.rounds:
            return rows
        rows += [
            ("batches", f"{len(self.state.jobs) if self.state else 0} in {s.rounds} round(s)"),
            ("batch requests", str(s.submitted)),
            ("  answered", str(s.answered)),
            ("  failed (error records)", str(s.failed)),
        ]
        if s.resubmitted:
            rows.append(("  expired/failed, re-submitted", str(s.resubmitted)))
        if s.online:
            rows.append(("  expired/failed, sent online", str(s.online)))
        if s.exhausted:
            rows.append(("  unanswered after all attempts", str(s.exhausted)))
        if s.too_large:
            rows.append(("  too large for a batch", str(s.too_large)))
        return rows


__all__ = ["BatchOptions", "BatchSession", "FailedLines", "Importer", "api_backend", "run_id"]
