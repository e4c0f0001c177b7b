"""The table of backend kinds: what each ``KIND:`` of a spec string is, in one place.

Every decision made by a backend's kind (is it an API server, does it run the model in this
process, does it take judge presets, which pip extra it needs, which environment variable holds its
key, does it read message text as text) asks this table instead of comparing kind strings. A new
kind is one :class:`BackendKind` here (or :func:`register_kind` at run time) plus its module.

Pure data: this module imports nothing of capjudge, so that any layer may ask it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BackendKind:
    """One backend kind.

    ``factory`` is the ``"module:function"`` that builds it from a parsed spec (the module may also
    offer ``check_options`` and ``lazy_from_spec``); ``implementation`` the class that answers.
    ``api``: an OpenAI-protocol server (requests run concurrently, ``--concurrency``, ``--max-cost``
    and the API flags apply); ``local``: the model runs on this machine, in this process or a server capjudge starts (a GPU is worth asking for);
    ``batch``: the provider's Batch API can answer it (``--batch``); ``preset_option``: the backend
    option a judge preset (``--judge``) becomes (``preset``: any preset by name; ``prompt_format``:
    the families the backend runs, as their prompt format; ``None``: presets do not apply); ``extra``: the pip extra that installs what it imports (``None``: none
    needed); ``key_variable``: the environment variable its API key is read from when none is named
    (``None``: no key unless asked); ``text_as_text``: it tokenizes prompts itself and reads message
    text spelling a special token as plain text (the cache key marks such requests); ``url_target``:
    the spec's target is ``base_url#model`` (credentials are taken out of the URL as it is parsed);
    ``text_options``: the target is free text (``scripted:``), percent-decoded (``%3F`` is ``?``),
    and a ``?`` starts the spec's options only when every ``key=value`` after it names one of
    these options (``None``: the target is a name, and its first ``?`` starts the options).
    """

    name: str
    factory: str
    implementation: str = ""
    api: bool = False
    local: bool = False
    batch: bool = False
    preset_option: str | None = None
    extra: str | None = None
    key_variable: str | None = None
    text_as_text: bool = False
    url_target: bool = False
    text_options: tuple[str, ...] | None = None

    @property
    def presets(self) -> bool:
        """Judge presets apply to this kind."""
        return self.preset_option is not None

    @property
    def module(self) -> str:
        """The module that builds this kind."""
        return self.factory.split(":", 1)[0]

    def install_hint(self) -> str:
        """What to say when the kind's module cannot be imported ("" when no extra installs it)."""
        return f" (install it with: pip install 'capjudge[{self.extra}]')" if self.extra else ""


_OPENAI = "capjudge.backends.openai:from_spec"
_OPENAI_CLASS = "capjudge.backends.openai.backend:OpenAIBackend"

BUILTIN: tuple[BackendKind, ...] = (
    BackendKind("hf", "capjudge.backends.hf:from_spec", "capjudge.backends.hf.backend:HFBackend", local=True, preset_option="preset", extra="hf", text_as_text=True),
    BackendKind(
        "llamacpp", "capjudge.backends.llamacpp:from_spec", "capjudge.backends.llamacpp.backend:LlamaCppBackend", local=True, preset_option="prompt_format", extra="llamacpp", text_as_text=True
    ),
    BackendKind("openai", _OPENAI, _OPENAI_CLASS, api=True, batch=True, key_variable="OPENAI_API_KEY"),
    BackendKind("azure", _OPENAI, _OPENAI_CLASS, api=True, batch=True, key_variable="AZURE_OPENAI_API_KEY"),
    BackendKind("openai-compatible", _OPENAI, _OPENAI_CLASS, api=True, batch=True, url_target=True),
    BackendKind("vllm", "capjudge.backends.vllm:from_spec", "capjudge.backends.vllm.backend:VLLMBackend", local=True, preset_option="preset"),
    BackendKind("scripted", "capjudge.backends.scripted:from_spec", "capjudge.backends.scripted:ScriptedBackend", text_options=("rules", "text")),
)
"""The kinds capjudge ships."""

KINDS: dict[str, BackendKind] = {k.name: k for k in BUILTIN}
"""Every known kind by name (built-in and registered)."""


def register_kind(kind: BackendKind) -> None:
    """Add (or replace) a kind of the table (``registry.register_backend`` does it for new kinds)."""
    KINDS[kind.name] = kind


def get(kind: str) -> BackendKind:
    """The entry of ``kind`` (case and spaces ignored); a kind not in the table (a backend
    registered with a callable factory, a Backend object's own ``kind``) gets an entry with every
    property off."""
    name = str(kind).strip().lower()
    found = KINDS.get(name)
    return found if found is not None else BackendKind(name, "")


def of_spec(spec: str) -> BackendKind:
    """The entry of a spec string's kind (the text before the first ``:``)."""
    return get(str(spec).split(":", 1)[0])


def names() -> list[str]:
    """The known kinds, sorted."""
    return sorted(KINDS)


def is_api(kind: str) -> bool:
    """An OpenAI-protocol server (``openai``, ``azure``, ``openai-compatible``)."""
    return get(kind).api


def is_local(kind: str) -> bool:
    """The model runs on this machine (``hf``, ``llamacpp``; ``vllm``: a server capjudge starts)."""
    return get(kind).local


def batch_capable(kind: str) -> bool:
    """The provider's Batch API can answer it (``--batch``)."""
    return get(kind).batch


def takes_presets(kind: str) -> bool:
    """Judge presets (``--judge``) apply to it."""
    return get(kind).presets


def key_variable(kind: str) -> str | None:
    """The environment variable the kind's API key is read from by default (``None``: none)."""
    return get(kind).key_variable


def text_as_text(kind: str) -> bool:
    """It reads message text spelling a special token as plain text (``hf``, ``llamacpp``)."""
    return get(kind).text_as_text


def api_kinds() -> tuple[str, ...]:
    """The API kinds, in the table's order."""
    return tuple(k.name for k in KINDS.values() if k.api)


def local_kinds() -> tuple[str, ...]:
    """The local kinds, in the table's order."""
    return tuple(k.name for k in KINDS.values() if k.local)


def batch_kinds() -> tuple[str, ...]:
    """The kinds the Batch API answers, in the table's order."""
    return tuple(k.name for k in KINDS.values() if k.batch)


def preset_kinds() -> tuple[str, ...]:
    """The kinds judge presets apply to, in the table's order."""
    return tuple(k.name for k in KINDS.values() if k.presets)


def text_as_text_kinds() -> tuple[str, ...]:
    """The kinds that read message text as text, in the table's order."""
    return tuple(k.name for k in KINDS.values() if k.text_as_text)
