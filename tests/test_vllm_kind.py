"""The ``vllm:MODEL`` backend kind without vLLM: a fake server program stands for
``python -m vllm.entrypoints.openai.api_server`` (it records its command line, answers ``/health``
and chat requests, and spawns a child, as vLLM spawns its engine), so the options, the command
line, the start (bounded, the log's tail when it dies), the use through the OpenAI-protocol client
and the stop of the whole process group (close, Ctrl-C, the interpreter's exit) are checked in
seconds. tests/test_vllm_kind_server.py runs the real server."""

from __future__ import annotations

import base64
import io
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import PIL.Image
import PIL.ImageChops
import pytest

from capjudge import Judge
from capjudge.backends.options import OptionError
from capjudge.backends.registry import check_backend, load_backend, parse_spec
from capjudge.backends.vllm import ServerStartError, check_options

ROOT = Path(__file__).resolve().parents[1]
CATS = ROOT / "examples" / "images" / "cats.jpg"

FAKE_SERVER = r'''
import http.server, json, os, subprocess, sys, time
argv = sys.argv[1:]
with open(os.environ["FAKE_VLLM_ARGV"], "w") as f:
    json.dump(argv, f)
mode = os.environ.get("FAKE_VLLM_MODE", "ok")
if mode == "die":
    print("ValueError: Unsupported CPU attention configuration: head_dim=16", flush=True)
    sys.exit(3)
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])  # the "engine"
with open(os.environ["FAKE_VLLM_CHILD"], "w") as f:
    f.write(str(child.pid))
if mode == "hang":
    time.sleep(600)
port = int(argv[argv.index("--port") + 1])
model = argv[argv.index("--served-model-name") + 1]

class H(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass
    def _send(self, body):
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
    def do_GET(self):
        self._send({})
    def do_POST(self):
        with open(os.environ["FAKE_VLLM_BODY"], "wb") as f:
            f.write(self.rfile.read(int(self.headers["Content-Length"])))
        self._send({"id": "x", "object": "chat.completion", "created": 0, "model": model,
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": "7"}, "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}})

http.server.ThreadingHTTPServer(("127.0.0.1", port), H).serve_forever()
'''


@pytest.fixture()
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """A fake vLLM Python (``python=`` of the spec), a LLaVA-shaped model folder, and the files
    where the fake server writes its command line and its child's pid."""
    script = tmp_path / "fake_vllm.py"
    script.write_text(FAKE_SERVER)
    python = tmp_path / "python"
    python.write_text(f"#!/bin/sh\nexec {sys.executable} {script} \"$@\"\n")
    python.chmod(0o755)
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "llava", "vision_config": {"model_type": "clip_vision_model"}}))
    # where transformers 5 saves the image processor's settings (CLIP's mean colour)
    (model / "processor_config.json").write_text(json.dumps({"image_processor": {"image_mean": [0.48145466, 0.4578275, 0.40821073]}}))
    files = {"python": python, "model": model, "argv": tmp_path / "argv.json", "child": tmp_path / "child.pid", "body": tmp_path / "body.json"}
    monkeypatch.setenv("FAKE_VLLM_BODY", str(files["body"]))
    monkeypatch.setenv("FAKE_VLLM_ARGV", str(files["argv"]))
    monkeypatch.setenv("FAKE_VLLM_CHILD", str(files["child"]))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the servers' temporary logs
    return files


def _sent_image(body: Path) -> PIL.Image.Image:
    """The image of the last chat request the fake server received."""
    parts = json.loads(body.read_text())["messages"][-1]["content"]
    url = next(p["image_url"]["url"] for p in parts if p["type"] == "image_url")
    assert url.startswith("data:image/")
    return PIL.Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1])))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie no one reaped yet is gone too
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split(")")[-1].split()[0] == "Z")


def _gone(pid: int, within: float = 10.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.1)
    return False


def test_options_are_checked_before_anything_starts(fake: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    spec = f"vllm:{fake['model']}"
    py = {"python": str(fake["python"])}
    with pytest.raises(OptionError, match="bogus"):
        check_backend(spec + "?bogus=1", **py)
    with pytest.raises(OptionError, match="gpu_memory_utilization"):
        check_backend(spec + "?gpu_memory_utilization=1.5", **py)
    with pytest.raises(OptionError, match="tensor_parallel_size"):
        check_backend(spec + "?tensor_parallel_size=two", **py)
    with pytest.raises(OptionError, match="concurrency"):
        check_backend(spec + "?concurrency=0", **py)
    with pytest.raises(OptionError, match="not a model folder"):
        check_backend(f"vllm:{fake['model'].parent / 'nothing'}", **py)
    with pytest.raises(OptionError, match="no executable"):
        check_backend(spec, python=str(fake["model"] / "python"))
    monkeypatch.delenv("CAPJUDGE_VLLM_PYTHON", raising=False)
    monkeypatch.setattr("importlib.util.find_spec", lambda name, *a: None)
    with pytest.raises(OptionError, match="CAPJUDGE_VLLM_PYTHON"):
        check_backend(spec)
    monkeypatch.setenv("CAPJUDGE_VLLM_PYTHON", str(fake["python"]))
    assert check_options(parse_spec(spec)).python == str(fake["python"])
    assert not fake["argv"].exists()  # nothing was started


def test_the_server_command_line(fake: dict[str, Path]) -> None:
    settings = check_options(
        parse_spec(f"vllm:{fake['model']}"),
        python=str(fake["python"]),
        tensor_parallel_size="2",
        gpu_memory_utilization="0.8",
        enforce_eager="false",
        max_top_logprobs="5",
        max_logprobs="30",
        limit_mm_per_prompt='{"image": 2}',
        server_args="--swap-space 4 --disable-log-stats",
    )
    cmd = settings.command(4321)
    line = " ".join(cmd)
    assert cmd[:3] == [str(fake["python"]), "-m", "vllm.entrypoints.openai.api_server"]
    assert f"--model {fake['model']} " in line and "--host 127.0.0.1 --port 4321" in line
    assert "--enable-prefix-caching" in cmd and "--max-logprobs 30" in line
    assert "--tensor-parallel-size 2" in line and "--gpu-memory-utilization 0.8" in line and "--no-enforce-eager" in cmd
    assert '--limit-mm-per-prompt {"image": 2}' in line
    assert cmd[-3:] == ["--swap-space", "4", "--disable-log-stats"]
    # LLaVA-1.5's preset: its llava_v1 conversation as the server's chat template (BOS included)
    assert cmd[cmd.index("--chat-template") + 1].endswith("llava_v1.jinja")
    assert "--reasoning-parser" not in cmd
    # at least the alternatives the client asks: 20 by default
    assert "--max-logprobs 20" in " ".join(check_options(parse_spec(f"vllm:{fake['model']}"), python=str(fake["python"])).command(1))
    thinking = check_options(parse_spec(f"vllm:{fake['model']}"), python=str(fake["python"]), preset="qwen3-vl-thinking").command(1)
    assert thinking[thinking.index("--reasoning-parser") + 1] == "qwen3" and "--chat-template" not in thinking
    # what changes answers is the identity; the port, parallelism and memory are not
    ident = settings.identity()
    assert ident["preset"] == "llava-1.5" and ident["chat_template"] == "llava_v1" and "tensor_parallel_size" not in ident
    assert check_options(parse_spec(f"vllm:{fake['model']}"), python=str(fake["python"]), dtype="float32").identity()["dtype"] == "float32"


def test_a_server_that_dies_is_an_error_with_its_log(fake: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_VLLM_MODE", "die")
    with pytest.raises(ServerStartError, match=r"exited with code 3(.|\n)*head_dim=16"):
        load_backend(f"vllm:{fake['model']}", python=str(fake["python"]))
    assert list(fake["model"].parent.glob("capjudge-server-*.log"))  # kept for the user to read (the message names it)


def test_a_server_never_ready_is_stopped_at_the_timeout(fake: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_VLLM_MODE", "hang")
    with pytest.raises(ServerStartError, match="not ready after 3 s"):
        load_backend(f"vllm:{fake['model']}", python=str(fake["python"]), startup_timeout="3")
    assert _gone(int(fake["child"].read_text()))  # the whole group, the engine's stand-in included


def test_ctrl_c_while_waiting_stops_the_group(fake: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    import httpx

    monkeypatch.setenv("FAKE_VLLM_MODE", "hang")
    calls = []

    def interrupted(*args: object, **kwargs: object) -> None:
        calls.append(1)
        if fake["child"].exists():
            raise KeyboardInterrupt
        raise httpx.ConnectError("not yet")

    monkeypatch.setattr(httpx, "get", interrupted)
    with pytest.raises(KeyboardInterrupt):
        load_backend(f"vllm:{fake['model']}", python=str(fake["python"]), startup_timeout="60")
    assert _gone(int(fake["child"].read_text()))


def test_started_at_the_first_request_used_and_stopped(fake: dict[str, Path]) -> None:
    judge = Judge("vanilla", f"vllm:{fake['model']}?concurrency=4", backend_options={"python": str(fake["python"])})
    assert not fake["argv"].exists()  # lazy: nothing started before a request needs the model
    first = judge.score(CATS, "two cats")
    second = judge.score(CATS, "a dog")
    assert first.ok and second.ok and first.raw == "7", first.error
    assert first.details["judge_preset"] == "llava-1.5"
    # LLaVA-1.5's preprocessing, which vLLM's processor does not do: the image padded to a square
    # with the processor's mean colour, sent losslessly
    sent = _sent_image(fake["body"])
    original = PIL.Image.open(CATS).convert("RGB")
    assert sent.width == sent.height == max(original.size) != min(original.size)
    expected = PIL.Image.new("RGB", sent.size, (122, 116, 104))  # int(255 * CLIP's mean), as hf: pads
    expected.paste(original, ((sent.width - original.width) // 2, (sent.height - original.height) // 2))
    assert PIL.ImageChops.difference(sent.convert("RGB"), expected).getbbox() is None  # pixel for pixel
    assert judge.backend.identity()["pad_square"] is True
    assert first.backend == f"vllm:{fake['model']}?concurrency=4"
    child = int(fake["child"].read_text())
    assert _alive(child)
    assert judge.backend.load().identity() == judge.backend.identity()  # announced before the start, no port in it
    judge.close()
    assert _gone(child)
    assert not list(fake["model"].parent.glob("capjudge-server-*.log"))  # its temporary log removed


@pytest.mark.parametrize("ending", ["raise KeyboardInterrupt", "raise RuntimeError('boom')", "pass", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"])
def test_no_server_outlives_capjudge(fake: dict[str, Path], ending: str) -> None:
    """A run that ends without closing the backend (an exception, Ctrl-C, simply exiting, or
    killed by SIGKILL: then the group's watchdog stops it) leaves no server process behind."""
    code = (
        "from capjudge.backends.registry import load_backend\n"
        f"b = load_backend('vllm:{fake['model']}', python={str(fake['python'])!r})\n"
        "print('started', flush=True)\n"
        f"{ending}\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "TMPDIR": str(fake["model"].parent / "logs")}
    Path(env["TMPDIR"]).mkdir()
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert "started" in out.stdout, out.stderr
    assert _gone(int(fake["child"].read_text()), within=20)
    if "SIGKILL" not in ending:  # a killed capjudge cannot remove its temporary log
        assert not list(Path(env["TMPDIR"]).iterdir())  # its temporary log removed too


def test_pad_square_off_sends_the_image_as_it_is(fake: dict[str, Path]) -> None:
    judge = Judge("vanilla", f"vllm:{fake['model']}?pad_square=false", backend_options={"python": str(fake["python"])})
    assert judge.score(CATS, "two cats").ok
    assert _sent_image(fake["body"]).size == PIL.Image.open(CATS).size and "pad_square" not in judge.backend.identity()
    judge.close()


def test_parity_says_padding_differs_only_when_it_does(example_images: list[Path]) -> None:
    """`capjudge parity` warns that an HF backend pads images where the other backend does not;
    a ``vllm:`` backend that pads as well gets no such note."""
    from capjudge.backends.scripted import ScriptedBackend
    from capjudge.parity import run_parity

    class Shown(ScriptedBackend):
        def __init__(self, kind: str, **identity: object) -> None:
            super().__init__("0.5")
            self.kind, self.extra = kind, identity

        def identity(self) -> dict[str, object]:
            return {**super().identity(), **self.extra}

    samples = [{"image": str(example_images[0]), "caption": "two cats"}]
    padded_hf = Shown("hf", pad_square=True)
    unpadded = run_parity(samples, padded_hf, Shown("openai-compatible"), method="vanilla")
    assert any("pads images to a square" in n for n in unpadded.notes)
    padded = run_parity(samples, padded_hf, Shown("vllm", pad_square=True), method="vanilla")
    assert not any("pads images to a square" in n for n in padded.notes)
