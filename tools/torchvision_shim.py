"""Let a torchvision whose compiled ops cannot load still import (build machines only).

On the CPU-only build machines the only torchvision wheel that matches torch 2.13 is a CUDA build:
its compiled ops need the CUDA libraries and do not load against the CPU torch. The pure-Python parts
that image/video processors use (``transforms.v2``) work, but ``import torchvision`` fails in
``torchvision/_meta_registrations.py``, which registers fake kernels for ``torchvision::nms`` and
``torchvision::qnms`` without checking that those operators exist. Defining the two operator schemas
first lets the import go through; ``torchvision.ops.nms`` still refuses (no processor uses it).

The Makefile copies this file into a virtual env's site-packages, with a ``.pth`` line calling
:func:`hook`, only where ``import torchvision`` fails this way; on a normal install it is never used.
The hook costs nothing at start-up: it imports torch only when something imports torchvision.
"""

from __future__ import annotations


def install() -> None:
    """Define the missing ``torchvision::nms`` / ``qnms`` schemas if torchvision's ops did not load."""
    try:
        import torch
    except Exception:  # no torch: nothing to patch
        return
    for name, schema in (
        ("nms", "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor"),
        ("qnms", "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor"),
    ):
        try:
            torch._C._dispatch_has_kernel_for_dispatch_key(f"torchvision::{name}", "Meta")
        except RuntimeError:  # operator does not exist: the compiled ops did not load
            lib = torch.library.Library("torchvision", "FRAGMENT")  # noqa: F841 (kept alive below)
            lib.define(schema)
            _LIBS.append(lib)


_LIBS: list[object] = []


class _Finder:
    """Meta-path finder that runs :func:`install` just before torchvision's first import."""

    @classmethod
    def find_spec(cls, name: str, path: object = None, target: object = None) -> None:
        if name == "torchvision":
            import sys

            sys.meta_path.remove(cls)  # type: ignore[arg-type]
            install()
        return None  # let the normal finders import it


def hook() -> None:
    """Arm the finder (called from a ``.pth`` line at interpreter start-up)."""
    import sys

    if _Finder not in sys.meta_path:
        sys.meta_path.insert(0, _Finder)  # type: ignore[arg-type]
