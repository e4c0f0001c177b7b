"""Shared fixtures: the tiny HF LLaVA (built once per session, offline), example data paths."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
SEEDS = SHARED / "seeds"
EXAMPLES = ROOT / "examples"

# Never reach a model hub from the tests.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture(scope="session")
def tiny_llava_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random LLaVA-1.5 in HF format (see capjudge.testing.tiny_llava)."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from capjudge.testing.tiny_llava import build_tiny_llava

    return build_tiny_llava(tmp_path_factory.mktemp("tiny-llava"))


@pytest.fixture(scope="session")
def tiny_vlm(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """``tiny_vlm(arch)``: the folder of a tiny random model of that architecture (see
    capjudge.testing.tiny_vlm), built once per session. Skips, with the reason, where the
    architecture needs torchvision and it cannot be imported (``make test`` installs it)."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from capjudge.testing.tiny_vlm import build_tiny_vlm, needs_torchvision

    built: dict[str, Path] = {}

    def get(arch: str) -> Path:
        if arch not in built:
            if needs_torchvision(arch):
                pytest.importorskip("torchvision", reason=f"the {arch} processor needs torchvision (make test installs it)")
            built[arch] = build_tiny_vlm(arch, tmp_path_factory.mktemp(f"tiny-{arch}"))
        return built[arch]

    return get


@pytest.fixture(scope="session")
def endless_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny thinking model that reasons until its token limit: ``max_new_tokens`` plants each
    answer's length (slot refill and decode-graph tests)."""
    from capjudge.testing.tiny_thinking import build_tiny_thinking_vlm

    return build_tiny_thinking_vlm(tmp_path_factory.mktemp("tiny-endless"), endless=True)


@pytest.fixture(scope="session")
def hf_backend(tiny_llava_dir: Path):
    """The tiny model loaded through the real HF backend (shared: loading costs ~1 s)."""
    from capjudge.backends.hf import HFBackend

    backend = HFBackend(str(tiny_llava_dir), batch_size=4)
    yield backend
    backend.close()


@pytest.fixture(scope="session")
def example_images() -> list[Path]:
    """The two bundled example images."""
    return [EXAMPLES / "images" / "cats.jpg", EXAMPLES / "images" / "dog.jpg"]


@pytest.fixture()
def corrupt_image(tmp_path: Path) -> Path:
    """A file named .jpg that is not an image."""
    p = tmp_path / "corrupt.jpg"
    p.write_bytes(b"\xff\xd8\xff\xe0 this is not really a jpeg" + bytes(range(50)))
    return p


@pytest.fixture(scope="module")
def server() -> Iterator[Any]:
    """The fake OpenAI-protocol server (tests/openai_fake_server.py), one per test module; a module
    that needs another one (a key, a responder) defines its own ``server``."""
    from openai_fake_server import running_server

    with running_server() as srv:
        yield srv


@pytest.fixture()
def srv(server: Any) -> Any:
    """:func:`server`, its recorded requests and scripted answers reset for this test."""
    server.reset()
    return server
