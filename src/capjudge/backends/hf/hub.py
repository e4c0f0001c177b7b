"""Is the Hugging Face hub reachable? Asked once per process, before a hub model id is looked up.

huggingface_hub retries a failed connection five times with back-off (about 25 s per file, and a
load reads several files), and a server that accepts connections but never answers holds each try
for its whole timeout. One short probe of the endpoint the hub client uses (``HF_ENDPOINT``, its
proxies included) decides instead: reachable, or the rest of the load reads the local HF cache only
and a model that is not there fails at once with what to do.
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass

log = logging.getLogger(__name__)

# Seconds the probe may take in all (connect, send, first response bytes). A hub that cannot answer
# one request in this time would not serve gigabytes of weights either.
PROBE_SECONDS = 5.0

_DEFAULT_ENDPOINT = "https://huggingface.co"
_probed: dict[str, HubStatus] = {}
_lock = threading.Lock()


@dataclass(frozen=True)
class HubStatus:
    """The outcome of one probe of ``endpoint``: ``reachable``, else ``cause`` says why not."""

    endpoint: str
    reachable: bool
    cause: str = ""


def hub_endpoint() -> str:
    """The hub URL the hub client talks to: ``HF_ENDPOINT`` when set, else huggingface.co."""
    return (os.environ.get("HF_ENDPOINT") or _DEFAULT_ENDPOINT).strip().rstrip("/")


def shown_endpoint(endpoint: str) -> str:
    """``endpoint`` as messages show it: credentials in the URL (``https://user:pass@mirror``) masked."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(endpoint)
    if "@" not in parts.netloc:
        return endpoint
    host = parts.netloc.rsplit("@", 1)[1]
    return urlunsplit(parts._replace(netloc=f"***@{host}"))


def hub_status(timeout: float = PROBE_SECONDS) -> HubStatus:
    """Probe the hub endpoint once per process (the answer is kept): any HTTP answer, whatever its
    status, means reachable; a refused or timed-out connection, or no answer within ``timeout``
    seconds, means not."""
    endpoint = hub_endpoint()
    with _lock:
        if endpoint not in _probed:
            _probed[endpoint] = _probe(endpoint, timeout)
            if not _probed[endpoint].reachable:
                log.debug("hub probe of %s: %s", shown_endpoint(endpoint), _probed[endpoint].cause)
        return _probed[endpoint]


def _probe(endpoint: str, timeout: float) -> HubStatus:
    import httpx

    result: list[HubStatus] = []

    def ask() -> None:
        try:
            with httpx.Client(timeout=timeout, follow_redirects=False) as client:
                client.head(endpoint + "/api/models")
            result.append(HubStatus(endpoint, True))
        except Exception as exc:  # noqa: BLE001 - every failure to get an answer means unreachable
            result.append(HubStatus(endpoint, False, _cause(exc).replace(endpoint, shown_endpoint(endpoint))))

    # A thread with a deadline: httpx's timeout bounds each read, not a body trickled byte by byte.
    worker = threading.Thread(target=ask, name="capjudge-hub-probe", daemon=True)
    worker.start()
    worker.join(timeout + 1.0)
    if result:
        return result[0]
    return HubStatus(endpoint, False, f"no answer within {timeout:g} s")


def _cause(exc: BaseException) -> str:
    import httpx

    if isinstance(exc, httpx.TimeoutException):
        return f"no answer within {PROBE_SECONDS:g} s ({type(exc).__name__})"
    text = str(exc).strip() or type(exc).__name__
    return text if len(text) <= 200 else text[:200] + "..."


def is_cached(model: str) -> bool:
    """Whether the local HF cache holds ``model``'s ``config.json`` (what a load reads first)."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:  # pragma: no cover - huggingface_hub comes with transformers
        return False
    found = try_to_load_from_cache(model, "config.json")
    return isinstance(found, str)


def download_command(model: str) -> str:
    """The command that downloads ``model`` into the local HF cache: the one spelling every
    message of capjudge gives (``hf``, the CLI of huggingface_hub)."""
    return f"hf download {model}"


def offline_hint(model: str, status: HubStatus) -> str:
    """What to do when ``model`` is not in the local cache and the hub cannot be reached."""
    return (
        f"the Hugging Face hub at {shown_endpoint(status.endpoint)} cannot be reached ({status.cause}) and {model!r} "
        f"is not in the local HF cache. Download it on a connected machine ({download_command(model)}) and copy the "
        "cache (~/.cache/huggingface or $HF_HOME) here, or give a local folder (hf:/path/to/model); with the model "
        "on disk, HF_HUB_OFFLINE=1 skips the network"
    )


_noted: set[tuple[str, str]] = set()


def note_cache_only(model: str, status: HubStatus) -> None:
    """Say once per model that the hub is unreachable and ``model`` is read from the cache only."""
    with _lock:
        if (status.endpoint, model) in _noted:
            return
        _noted.add((status.endpoint, model))
    log.warning(
        "the Hugging Face hub at %s cannot be reached (%s): reading %r from the local HF cache only "
        "(HF_HUB_OFFLINE=1 skips this check)", shown_endpoint(status.endpoint), status.cause, model,
    )


def reset() -> None:
    """Forget the probes made so far (tests; a process whose network changed)."""
    with _lock:
        _probed.clear()
        _noted.clear()
