"""What a distributed run ships to each worker, and how it cuts the samples into units of work.

Nothing here imports Ray: a :class:`JudgeConfig` is everything a worker process needs to build
the same :class:`~capjudge.judges.judge.Judge` as the driver (method, backend, options, and the
user templates the method renders, which live in the driver's registry only). A *unit* is a list
of ``(input index, sample)`` holding whole image groups (up to ``batch_size`` samples, a larger
group alone): a worker judges one unit per call, so the captions of an image always reach the same
model in the same call and share its image prefix.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from capjudge.judges.scoring import image_groups, pack

if TYPE_CHECKING:
    from capjudge.backends.base import Backend
    from capjudge.judges.judge import Judge
    from capjudge.prompts.registry import Method

Unit = list[tuple[int, Any]]  # (input index, sample as given)


@dataclass(frozen=True)
class JudgeConfig:
    """How to build a :class:`~capjudge.judges.judge.Judge` in another process.

    ``backend`` is a spec string (``"hf:llava-hf/llava-1.5-7b-hf"``, loaded lazily: the model loads
    at the worker's first cache miss) or a picklable function that returns a backend (called once
    per worker). ``options`` are :class:`Judge`'s keyword arguments (``cache_dir``, ``system``,
    ``images_root``, ``batch_size``, ``top_logprobs``, ``max_new_tokens``, ``backend_options``,
    ``method_options``, ...). ``read_cache=False`` asks again what the cache holds
    (``--retry-errors``). ``templates`` are ``(name, source)`` of user templates that the method
    renders; :meth:`from_judge_args` collects them, and the driver's working directory
    (``workdir``), where relative image paths are found on the driver's machine.
    """

    method: str | Method
    backend: str | Callable[[], Backend]
    options: dict[str, Any] = field(default_factory=dict)
    read_cache: bool = True
    templates: tuple[tuple[str, str], ...] = ()
    workdir: str | None = None

    @classmethod
    def from_judge_args(cls, method: str | Method, backend: str | Callable[[], Backend], **options: Any) -> JudgeConfig:
        """A config from :class:`Judge`'s arguments; the method's user templates travel with it."""
        from capjudge.prompts.registry import get_method, get_template

        resolved = get_method(method)
        names = [n for n in (resolved.template, resolved.context_template, resolved.explain_template) if n]
        templates = tuple((n, get_template(n).source) for n in names if get_template(n).origin != _package_origin(n))
        if options.get("cache_dir") is not None:
            options["cache_dir"] = str(Path(options["cache_dir"]).expanduser().resolve())
        return cls(method=method, backend=backend, options=options, templates=templates, workdir=os.getcwd())

    @property
    def batch_size(self) -> int:
        """Samples per unit of work (the judge's ``batch_size``, 64 by default)."""
        return max(1, int(self.options.get("batch_size", 64)))

    def with_cache_reads(self, read: bool) -> JudgeConfig:
        """The same config, reading the response cache or not (new answers are stored either way)."""
        return dataclasses.replace(self, read_cache=read)

    def build(self) -> Judge:
        """The judge this config describes (in the calling process)."""
        from capjudge.judges.judge import Judge
        from capjudge.prompts.registry import register_template

        if self.workdir is not None and self.workdir != os.getcwd() and os.path.isdir(self.workdir):
            # A worker on the driver's machine resolves relative image paths as the driver does
            # (and its records and error texts say the same); elsewhere give absolute paths.
            os.chdir(self.workdir)
        for name, source in self.templates:
            register_template(name, source, overwrite=True)
        backend = self.backend if isinstance(self.backend, str) else self.backend()
        judge = Judge(self.method, backend, **self.options)
        if not self.read_cache and hasattr(judge.backend, "read"):
            judge.backend.read = False
        return judge


def _package_origin(name: str) -> str:
    return f"capjudge/prompts/templates/{name}.j2"


def plan_units(samples: Sequence[Any], batch_size: int, first: int = 0) -> Iterator[Unit]:
    """The samples as units of whole image groups (grouped over the whole input, groups in
    first-seen order, input order inside a group), each up to ``batch_size`` samples."""
    yield from pack(image_groups(list(enumerate(samples, start=first))), batch_size)


__all__ = ["JudgeConfig", "Unit", "plan_units"]
