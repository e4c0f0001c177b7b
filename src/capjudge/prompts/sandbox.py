"""The sandbox user templates render in: refused constructs before the run, bounded rendering during it.

jinja2's sandbox stops attribute tricks, but not work: ``{% include %}`` / ``{% import %}`` /
``{% extends %}`` fail at render time (there is no loader), ``range(10**6)`` is an overflow, and
loops nested a few deep run for hours. A user template (``--template-file``,
:func:`capjudge.prompts.registry.register_template`) is therefore

* **checked when it is registered** (:func:`check_source`): templates that load other templates,
  ``range()`` with a constant size above :data:`MAX_RANGE` and ``{% for %}`` loops nested deeper
  than :data:`MAX_LOOP_DEPTH` are refused with the construct and its line;
* **bounded when it is rendered** (:func:`render_bounded`): loop iterations and calls together at
  most :data:`MAX_STEPS`, output at most :data:`MAX_OUTPUT` characters, strings built by ``*``,
  ``+``, ``~``, ``%``, ``replace`` and formatting at most that long (lists repeated by ``*`` at most
  :data:`MAX_RANGE` items), integers at most :data:`MAX_INT_BITS`
  bits, and :data:`MAX_SECONDS` of wall time. A render over a bound raises :class:`RenderLimitError`
  naming it (the judge records it as that row's error).
"""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import jinja2
import jinja2.sandbox
from jinja2 import nodes

from capjudge.core.errors import SampleFailure, UsageError

MAX_RANGE = 10_000
"""Most items one ``range()`` of a user template may have."""
MAX_LOOP_DEPTH = 3
"""Deepest nesting of ``{% for %}`` loops a user template may have."""
MAX_STEPS = 200_000
"""Most loop iterations plus calls (functions, methods, filters) in one render."""
MAX_OUTPUT = 1_000_000
"""Most characters a render may produce, and the longest string or list it may build."""
MAX_INT_BITS = 4096
"""Largest integer (in bits) arithmetic in a user template may produce."""
MAX_SECONDS = 5.0
"""Longest wall time one render may take."""

_LOOP = "__capjudge_loop"
_CONCAT = "__capjudge_concat"
_LOADERS = {nodes.Include: "include", nodes.Import: "import", nodes.FromImport: "from ... import", nodes.Extends: "extends"}
_SIZE_ARGS = frozenset({"center", "ljust", "rjust", "zfill", "expandtabs", "indent", "lipsum", "wordwrap", "truncate"})
_PERCENT_SPEC = re.compile(r"%(?:\([^)]*\))?[-+ #0]*(\d*)(?:\.(\d*))?")
_BRACE_SPEC = re.compile(r"\{[^{}]*?:([^{}]*)\}")
_DIGITS = re.compile(r"\d+")


class UnsafeTemplateError(UsageError, ValueError):
    """A user template uses a construct that is refused before any render (names it and its line)."""


class RenderLimitError(SampleFailure):
    """A render went over one of the bounds of this module (names the bound)."""


@dataclass
class _Budget:
    deadline: float
    steps: int = 0
    output: int = 0

    def tick(self) -> None:
        self.steps += 1
        if self.steps > MAX_STEPS:
            raise RenderLimitError(f"the render took more than {MAX_STEPS} loop iterations and calls")
        if not self.steps % 256 and time.monotonic() > self.deadline:
            raise RenderLimitError(f"the render ran longer than {MAX_SECONDS:g} s")


_BUDGET: ContextVar[_Budget | None] = ContextVar("capjudge_template_budget", default=None)


def _tick() -> None:
    budget = _BUDGET.get()
    if budget is not None:
        budget.tick()


def _check_size(value: Any, what: str) -> Any:
    if isinstance(value, (str, bytes, list, tuple)) and len(value) > MAX_OUTPUT:
        raise RenderLimitError(f"{what} would be longer than {MAX_OUTPUT} items")
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > MAX_INT_BITS:
        raise RenderLimitError(f"{what} would be an integer of more than {MAX_INT_BITS} bits")
    return value


def _check_args(name: str, args: Iterable[Any]) -> None:
    """Refuse an integer argument large enough to allocate more than the output bound, for the
    functions and filters whose integer arguments are sizes (``ljust``, ``center``, ``indent``,
    ``lipsum`` ...); other integers (a number to format, a count) are data."""
    if name not in _SIZE_ARGS:
        return
    for a in args:
        if isinstance(a, int) and not isinstance(a, bool) and abs(a) > MAX_OUTPUT:
            raise RenderLimitError(f"{name}() was given {a}, more than {MAX_OUTPUT}")


def _check_replace(name: str, args: Sequence[Any]) -> None:
    """Refuse a ``replace`` whose result would exceed the output bound (an empty ``old`` inserts
    ``new`` between every character)."""
    strings = [a for a in args if isinstance(a, str)]  # the filter is also given jinja's eval context
    if name == "replace" and len(strings) >= 3:
        text, old, new = strings[:3]
        if len(text) + (text.count(old) if old else len(text) + 1) * len(new) > MAX_OUTPUT:
            raise RenderLimitError(f"replace() would make a string longer than {MAX_OUTPUT} characters")


def _check_format(fmt: Any, what: str) -> None:
    """Refuse a format string (``%`` or ``str.format``) with a width or precision over the bound."""
    if not isinstance(fmt, str):
        return
    numbers = [n for m in _PERCENT_SPEC.finditer(fmt) for n in m.groups() if n]
    numbers += [n for m in _BRACE_SPEC.finditer(fmt) for n in _DIGITS.findall(m.group(1))]
    if any(int(n) > MAX_OUTPUT for n in numbers):
        raise RenderLimitError(f"{what} has a width or precision over {MAX_OUTPUT}")


def _safe_range(*args: int) -> range:
    rng = range(*args)
    if len(rng) > MAX_RANGE:
        raise RenderLimitError(f"range() of {len(rng)} items (at most {MAX_RANGE})")
    return rng


def _loop(iterable: Any) -> Iterator[Any]:
    """Every ``{% for %}`` iterates through this: each iteration counts against the budget."""
    for item in iterable:
        _tick()
        yield item


def _concat(*parts: Any) -> str:
    """``a ~ b``: the same string, refused when it would exceed the output bound."""
    if sum(len(p) if isinstance(p, str) else 0 for p in parts) > MAX_OUTPUT:
        raise RenderLimitError(f"a string joined with ~ would be longer than {MAX_OUTPUT} characters")
    return "".join(str(p) for p in parts)


def _bounded_filter(name: str, func: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(func)  # keeps jinja's pass_context / pass_environment marks
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        _tick()
        _check_args(name, [*args[1:], *kwargs.values()])
        _check_replace(name, args)
        if name == "format" and args:
            _check_format(args[0], "the format filter's format")
        return _check_size(func(*args, **kwargs), f"the result of filter {name!r}")

    return wrapper


class BoundedSandbox(jinja2.sandbox.ImmutableSandboxedEnvironment):
    """jinja2's immutable sandbox with every call, loop and size-making operator bounded."""

    intercepted_binops = frozenset({"*", "**", "+", "%"})

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.globals["range"] = _safe_range
        self.globals[_LOOP] = _loop
        self.globals[_CONCAT] = _concat
        self.filters = {name: _bounded_filter(name, f) for name, f in self.filters.items()}

    def call_binop(self, context: jinja2.runtime.Context, operator: str, left: Any, right: Any) -> Any:
        """``*``, ``**``, ``+`` and ``%`` with their operands' sizes checked before they are computed."""
        _tick()
        what = f"the result of {operator}"
        if operator == "**":
            if isinstance(left, int) and isinstance(right, int) and right > 0 and max(left.bit_length(), 1) * right > MAX_INT_BITS:
                raise RenderLimitError(f"{what} would be an integer of more than {MAX_INT_BITS} bits")
        elif operator == "*":
            for seq, n in ((left, right), (right, left)):
                # a list may hold long strings: repeated at most MAX_RANGE items long
                limit = MAX_OUTPUT if isinstance(seq, str) else MAX_RANGE
                if isinstance(seq, (str, list, tuple)) and isinstance(n, int) and len(seq) * max(n, 0) > limit:
                    raise RenderLimitError(f"{what} would be longer than {limit} items")
            if isinstance(left, int) and isinstance(right, int) and left.bit_length() + right.bit_length() > MAX_INT_BITS:
                raise RenderLimitError(f"{what} would be an integer of more than {MAX_INT_BITS} bits")
        elif operator == "+":
            if isinstance(left, (str, list, tuple)) and isinstance(right, (str, list, tuple)) and len(left) + len(right) > MAX_OUTPUT:
                raise RenderLimitError(f"{what} would be longer than {MAX_OUTPUT} items")
        elif operator == "%":
            _check_format(left, "the % format")
        return _check_size(super().call_binop(context, operator, left, right), what)

    def call(__self, __context: jinja2.runtime.Context, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805 - jinja's signature
        """A call of the template (function, method, macro) counts against the budget; sizes and
        format widths over the bound are refused."""
        _tick()
        # The sandbox hands out str.format wrapped (functools.update_wrapper keeps __wrapped__).
        method = getattr(__obj, "__wrapped__", __obj)
        name = str(getattr(method, "__name__", ""))
        _check_args(name, [*args, *kwargs.values()])
        _check_replace(name, (getattr(method, "__self__", None), *args))
        if name in ("format", "format_map") and isinstance(getattr(method, "__self__", None), str):
            _check_format(method.__self__, "str.format")
        return _check_size(super().call(__context, __obj, *args, **kwargs), "the result of a call")


def check_source(env: jinja2.Environment, source: str) -> nodes.Template:
    """The parsed template with its loops and ``~`` bounded; raises :class:`UnsafeTemplateError`
    for a construct refused in user templates (``include``, ``import``, ``extends``, a constant
    ``range()`` over :data:`MAX_RANGE`, loops nested deeper than :data:`MAX_LOOP_DEPTH`) and
    ``jinja2.TemplateSyntaxError`` for a syntax error."""
    tree = env.parse(source)
    for node in tree.find_all((nodes.Include, nodes.Import, nodes.FromImport, nodes.Extends)):
        raise UnsafeTemplateError(
            f"uses {{% {_LOADERS[type(node)]} %}} on line {node.lineno}: a user template cannot load other templates (put their text into it)"
        )
    for call in tree.find_all(nodes.Call):
        if isinstance(call.node, nodes.Name) and call.node.name == "range" and call.args:
            try:
                size = len(range(*(_constant(a) for a in call.args)))
            except (_NotConstant, TypeError, ValueError, OverflowError):
                continue  # not a constant (or not valid): bounded when rendered
            if size > MAX_RANGE:
                raise UnsafeTemplateError(f"calls range() with {size} items on line {call.lineno} (at most {MAX_RANGE})")
    _check_depth(tree, 0)
    _bound(tree)
    return tree


class _NotConstant(Exception):
    pass


_ARITHMETIC: dict[type[nodes.Node], Callable[[Any, Any], Any]] = {
    nodes.Add: lambda a, b: a + b,
    nodes.Sub: lambda a, b: a - b,
    nodes.Mul: lambda a, b: a * b,
    nodes.FloorDiv: lambda a, b: a // b,
}


def _constant(node: nodes.Node) -> int:
    """The value of a constant integer expression (``10**6``, ``-5``, ``2*1000``); a power too
    large to compute counts as more than any limit. Raises :class:`_NotConstant` otherwise."""
    if isinstance(node, nodes.Const) and isinstance(node.value, int):
        return int(node.value)
    if isinstance(node, nodes.Neg):
        return -_constant(node.node)
    if isinstance(node, nodes.Pos):
        return _constant(node.node)
    if isinstance(node, nodes.Pow):
        base, exp = _constant(node.left), _constant(node.right)
        if exp > 0 and max(base.bit_length(), 1) * exp > MAX_INT_BITS:
            return 1 << MAX_INT_BITS if base > 0 or exp % 2 == 0 else -(1 << MAX_INT_BITS)
        return int(base**exp)
    op = _ARITHMETIC.get(type(node))
    if op is not None:
        value = op(_constant(node.left), _constant(node.right))  # type: ignore[attr-defined]
        if isinstance(value, int) and value.bit_length() <= 2 * MAX_INT_BITS:
            return value
    raise _NotConstant


def _check_depth(node: nodes.Node, depth: int) -> None:
    for child in node.iter_child_nodes():
        inner = depth + isinstance(child, nodes.For)
        if inner > MAX_LOOP_DEPTH:
            raise UnsafeTemplateError(f"nests {{% for %}} loops {inner} deep on line {child.lineno} (at most {MAX_LOOP_DEPTH})")
        _check_depth(child, inner)


def _bound(tree: nodes.Template) -> None:
    """Route every loop through :func:`_loop` and every ``~`` through :func:`_concat`."""
    for loop in tree.find_all(nodes.For):
        loop.iter = nodes.Call(nodes.Name(_LOOP, "load", lineno=loop.lineno), [loop.iter], [], None, None, lineno=loop.lineno)
    for node in list(tree.find_all(nodes.Node)):
        for name in node.fields:
            value = getattr(node, name, None)
            if isinstance(value, nodes.Concat):
                setattr(node, name, _concat_call(value))
            elif isinstance(value, list):
                setattr(node, name, [_concat_call(v) if isinstance(v, nodes.Concat) else v for v in value])


def _concat_call(node: nodes.Concat) -> nodes.Call:
    return nodes.Call(nodes.Name(_CONCAT, "load", lineno=node.lineno), list(node.nodes), [], None, None, lineno=node.lineno)


def render_bounded(template: jinja2.Template, variables: dict[str, Any]) -> str:
    """Render within the bounds of this module; raises :class:`RenderLimitError` naming the bound."""
    budget = _Budget(deadline=time.monotonic() + MAX_SECONDS)
    token = _BUDGET.set(budget)
    try:
        parts: list[str] = []
        for chunk in template.generate(**variables):
            budget.output += len(chunk)
            if budget.output > MAX_OUTPUT:
                raise RenderLimitError(f"the render produced more than {MAX_OUTPUT} characters")
            budget.tick()
            parts.append(chunk)
        return "".join(parts)
    except RecursionError:
        raise RenderLimitError("the render recursed too deeply (a macro or recursive loop that does not end)") from None
    except MemoryError:
        raise RenderLimitError("the render ran out of memory") from None
    finally:
        _BUDGET.reset(token)
