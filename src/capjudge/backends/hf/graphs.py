"""Decoding steps as CUDA graphs: fixed shapes, captured once, replayed (option ``decode_graphs``).

A decoding step of a 7B model at a small batch is bound by kernel launches in eager mode (~20 ms a
step on an H200 where the weights take ~3-4 ms to read): hundreds of small kernels, each launched
from Python. :class:`GraphSteps` runs the steps of slot refill (:mod:`capjudge.backends.hf.refill`)
at fixed shapes so that each can be captured once as a CUDA graph and replayed with one launch:

* every step computes all ``slots`` rows of the :class:`~capjudge.backends.hf.slots.SlotCache`
  (busy rows first, longest first, as the refiller keeps them; a free row decodes a dummy token at
  its column 0, seen by no one, and its output is dropped);
* the rows are cut into :data:`ROW_GROUPS` fixed ranges, each attending over a *bucket* of columns,
  the smallest power of two (at least :data:`BUCKET_MIN`) holding the range's longest row, each row
  masked to its own columns; one graph per combination of buckets met (at most :data:`MAX_GRAPHS`);
* the inputs (tokens, positions, the column each row writes) are copied into tensors the graph
  reads; the mask is built inside the graph from the columns.

:class:`PackedSteps` does the same for the decoding steps of the packed prefix path
(:mod:`capjudge.backends.hf.prefix`): all rows of a chunk every step, keys written at arena slots
given as a tensor, one bucket of slots, the mask built inside the graph from the slots' owners.

Correctness is checked where it matters, on the device: the first step of every shape is computed
eagerly and by the freshly captured graph, and the graph is used only if both agree (the same
greedy tokens, logits within a tolerance); otherwise, or if capture fails (an architecture whose
forward synchronises with the host), decoding goes on eagerly and the answers say why
(``Completion.meta["decode_graphs"]``). Buffers that move or grow drop the graphs (they read the old
ones) and they are captured again.

Without CUDA the same fixed-shape steps run with :func:`eager_capture`, which replays by calling
the step again and writing into the captured output, the way a graph writes its outputs: the tests
check that path on the CPU (``decode_graphs=on``), the real capture runs on CUDA only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from capjudge.backends.hf.slot_attention import planned
from capjudge.backends.hf.slots import SlotCache
from capjudge.backends.options import OptionError
from capjudge.core.redact import get_logger

log = get_logger(__name__)

MODES = ("auto", "on", "off")
"""``decode_graphs`` values: ``auto`` (graphs on CUDA, eager elsewhere), ``on``, ``off``."""

BUCKET_MIN = 256
"""The smallest column bucket of a captured step."""

ROW_GROUPS = 4
"""Fixed row ranges of a slot-refill graph step, each attending over its own bucket of columns."""

MAX_GRAPHS = 48
"""Captured slot-refill steps kept per call (combinations of the row groups' buckets)."""

USED = "used"
"""``Completion.meta["decode_graphs"]`` of an answer whose steps were replayed graphs."""

Capture = Callable[[Callable[[], Any]], Callable[[], Any]]
"""Takes a step (a function of the fixed input tensors returning its output tensor) and returns
the replay: a function running the step again and returning the same output tensor."""


def mode(value: Any) -> str:
    """``decode_graphs`` checked: one of :data:`MODES` (yes/no words map to on/off)."""
    text = str(value).strip().lower()
    text = {"true": "on", "1": "on", "yes": "on", "false": "off", "0": "off", "no": "off"}.get(text, text)
    if text not in MODES:
        raise OptionError(f"option decode_graphs={value!r} is not one of {', '.join(MODES)}")
    return text


def bucket(width: int, capacity: int) -> int:
    """Columns a step computes for rows of at most ``width`` columns: a power of two, at least
    :data:`BUCKET_MIN`, at most the buffers' ``capacity``."""
    size = BUCKET_MIN
    while size < width:
        size *= 2
    return max(width, min(size, capacity))


def eager_capture(step: Callable[[], Any]) -> Callable[[], Any]:
    """Graph semantics without a graph: the output tensor of the first call, rewritten by every replay."""
    out = step()

    def replay() -> Any:
        out.copy_(step())
        return out

    return replay


def cuda_capture(torch: Any, device: Any) -> Capture:
    """Capture on ``device`` as a CUDA graph (warm-up on a side stream, one memory pool for all)."""
    pool = torch.cuda.graph_pool_handle()

    def capture(step: Callable[[], Any]) -> Callable[[], Any]:
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            for _ in range(2):  # lazy initialisation and allocator warm-up outside the graph
                step()
        torch.cuda.current_stream(device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=pool):
            out = step()

        def replay() -> Any:
            graph.replay()
            return out

        return replay

    return capture


class _Captured:
    """What both kinds of fixed-shape steps share: one captured step per column bucket, each
    checked against the eager step before use, and giving up for the call on a failure."""

    what = "slot refill"

    def __init__(self, torch: Any, dtype: Any, device: Any, capture: Capture) -> None:
        self.torch, self.dtype, self.device, self.capture = torch, dtype, device, capture
        self.lowest = torch.finfo(dtype).min
        self.graphs: dict[Any, Callable[[], Any]] = {}
        self.buffers: tuple[int, ...] = ()  # the buffers the graphs read (data pointers)
        self.failed: str | None = None  # why graphs were given up (the caller goes on eagerly)
        self.replays = 0
        self.captures = 0
        self.shapes: list[Any] = []  # the shapes captured, in order

    def _replay(self, key: Any, step: Callable[[Any], Callable[[], Any]], rows: int) -> Any:
        """The step of shape ``key`` (its columns) replayed (captured and checked the first time;
        its first ``rows`` outputs); None when capture failed or differs."""
        replay = self.graphs.get(key)
        if replay is None:
            fn = step(key)
            try:
                expected = fn()[:rows].clone()  # the same inputs write the same keys: harmless
                replay = self.capture(fn)
                got = replay()[:rows]
            except Exception as exc:  # noqa: BLE001 - any capture failure: decode eagerly
                return self._give_up(f"capture failed ({type(exc).__name__}: {str(exc)[:200]})")
            self.captures += 1
            self.shapes.append(key)
            scale = max(1.0, float(expected.abs().max())) if expected.numel() else 1.0
            if not (bool((got.argmax(-1) == expected.argmax(-1)).all()) and float((got - expected).abs().max()) <= 1e-3 * scale):
                return self._give_up("replayed step differs from the eager step")
            self.graphs[key] = replay
        self.replays += 1
        return replay()[:rows]

    def release(self) -> None:
        """Drop the graphs and what they read (the counters, :attr:`shapes` and :attr:`failed` stay)."""
        self.graphs.clear()
        self.buffers = ()

    def _give_up(self, why: str) -> None:
        self.failed = why
        self.graphs.clear()
        log.warning("decode graphs off (%s): %s; decoding eagerly", self.what, why)


class GraphSteps(_Captured):
    """Fixed-shape decoding steps over a :class:`SlotCache` of ``slots`` rows (module doc).

    ``forward(ids, mask, positions)`` runs the model's step on the cache and returns its last
    position's logits, at least float32 (the refiller's forward with the adapter's positions and
    masks). With ``grouped`` (SDPA attention), the rows (longest first) are cut into
    :data:`ROW_GROUPS` fixed ranges, each attending over its own bucket of columns
    (:func:`~capjudge.backends.hf.slot_attention.planned`), so short rows do not read the longest
    row's columns; a graph is captured per combination of buckets met (at most :data:`MAX_GRAPHS`;
    beyond that a new combination's step runs eagerly)."""

    def __init__(self, torch: Any, kv: SlotCache, slots: int, forward: Callable[[Any, Any, Any], Any], dtype: Any, device: Any, capture: Capture, *, config: Any = None, grouped: bool = False) -> None:
        super().__init__(torch, dtype, device, capture)
        self.kv, self.slots, self.forward, self.config = kv, int(slots), forward, config
        self.ids = torch.zeros((self.slots, 1), dtype=torch.long, device=device)
        self.positions = torch.zeros((self.slots, 1), dtype=torch.long, device=device)
        self.columns = torch.zeros((self.slots,), dtype=torch.long, device=device)
        self.rows = torch.arange(self.slots, device=device)
        n = min(ROW_GROUPS, self.slots) if grouped and config is not None else 1
        self.row_groups = tuple((self.slots * g // n, self.slots * (g + 1) // n) for g in range(n))

    def release(self) -> None:
        """After the call: the graphs, the key/value buffers and the model step let go."""
        super().release()
        self.kv = None  # type: ignore[assignment]
        self.forward = None  # type: ignore[assignment]

    def logits(self, tokens: Sequence[int], lengths: Sequence[int], positions: Sequence[int]) -> Any:
        """The next-token logits ``(m, vocab)`` of the ``m`` busy rows (rows ``0..m-1``, longest
        first), each writing its new key at column ``lengths[k]`` and reading columns
        ``0..lengths[k]``; None when this step ran no graph (graphs failed: :attr:`failed` says why;
        or one more would pass :data:`MAX_GRAPHS`)."""
        torch, pad = self.torch, self.slots - len(lengths)
        buffers = self.kv.buffers()
        if buffers != self.buffers:  # new or grown buffers: the graphs read the old ones
            self.graphs.clear()
            self.buffers = buffers
        every = list(lengths) + [0] * pad
        key = tuple(bucket(max(every[a:b]) + 1, self.kv.capacity) for a, b in self.row_groups)
        if key not in self.graphs and len(self.graphs) >= MAX_GRAPHS:
            return None
        staged = torch.tensor([list(tokens) + [0] * pad, list(positions) + [0] * pad, every], dtype=torch.long)
        staged = staged.to(self.device)
        self.ids[:, 0].copy_(staged[0])
        self.positions[:, 0].copy_(staged[1])
        self.columns.copy_(staged[2])
        return self._replay(key, self._step, len(lengths))

    def _step(self, key: tuple[int, ...]) -> Callable[[], Any]:
        width = max(key)
        plan = tuple((a, b, w) for (a, b), w in zip(self.row_groups, key))

        def step() -> Any:
            mask = self.kv.mask(self.columns, width, self.dtype)
            self.kv.step(self.slots, self.columns, width, self.rows)
            if len(plan) == 1:
                return self.forward(self.ids, mask, self.positions)
            with planned(self.config, plan):
                return self.forward(self.ids, mask, self.positions)

        return step


PREFIX = -2
"""Owner of the shared prefix's slots in :class:`PackedSteps` (every query sees them)."""


class PackedSteps(_Captured):
    """Fixed-shape decoding steps of the packed prefix path (:mod:`capjudge.backends.hf.prefix`):
    every step feeds all ``b`` rows of a chunk (a finished row feeds a dummy token whose slot no one
    sees) into the batch-1 :class:`~capjudge.backends.hf.kv.KVArena`, writing at slots given as a
    tensor, and reads a bucket of slots; the mask (each query sees the prefix and the slots its row
    owns) is built inside the step from the slots' owners.

    ``forward(ids, mask, positions)`` runs the model's packed step on the arena's cache and returns
    the ``b`` queries' logits ``(b, vocab)``, at least float32."""

    what = "prefix reuse"

    def __init__(self, torch: Any, arena: Any, b: int, forward: Callable[[Any, Any, Any], Any], dtype: Any, device: Any, capture: Capture) -> None:
        super().__init__(torch, dtype, device, capture)
        self.arena, self.b, self.forward = arena, int(b), forward
        self.ids = torch.zeros((1, self.b), dtype=torch.long, device=device)
        self.positions = torch.zeros((1, self.b), dtype=torch.long, device=device)
        self.write_at = torch.zeros((self.b,), dtype=torch.long, device=device)
        self.queries = torch.arange(self.b, device=device)[:, None]
        self.owners: Any = None  # (capacity,) long: each slot's row, PREFIX, or -1 (seen by no one)

    def logits(self, tokens: Sequence[int], positions: Sequence[int], owners: Sequence[int], prefix: int, capacity: int) -> Any:
        """Logits ``(b, vocab)`` of one step: ``tokens`` at ``positions`` (one per row) written
        into the last ``b`` of the slots whose ``owners`` are given (after the ``prefix`` slots,
        this step's included); the arena holds them after it. None when graphs failed
        (:attr:`failed` says why; the arena then holds the slots before this step)."""
        torch, b = self.torch, self.b
        filled = prefix + len(owners)
        if self.arena.capacity < capacity or self.arena.buffers() != self.buffers:
            self.arena.reserve(capacity)  # never-written slots zeroed (they are read, masked)
            self.graphs.clear()
            self.buffers = self.arena.buffers()
            self.owners = torch.full((self.arena.capacity,), -1, dtype=torch.long, device=self.device)
        staged = torch.tensor([list(tokens), list(positions), list(range(filled - b, filled))], dtype=torch.long).to(self.device)
        self.ids[0].copy_(staged[0])
        self.positions[0].copy_(staged[1])
        self.write_at.copy_(staged[2])
        self.owners[:filled].copy_(torch.tensor([PREFIX] * prefix + list(owners), dtype=torch.long).to(self.device))
        self.owners[filled:].fill_(-1)
        out = self._replay(bucket(filled, self.arena.capacity), self._step, b)
        self.arena.fixed(None, 0)
        self.arena.set_length(filled if out is not None else filled - b)
        return out

    def _step(self, width: int) -> Callable[[], Any]:
        torch = self.torch

        def step() -> Any:
            owners = self.owners[:width][None, :]
            seen = (owners == self.queries) | (owners == PREFIX)
            mask = torch.full((1, 1, self.b, width), self.lowest, dtype=self.dtype, device=self.device)
            mask.masked_fill_(seen[None, None], 0.0)
            self.arena.fixed(self.write_at, width)
            return self.forward(self.ids, mask, self.positions)

        return step
