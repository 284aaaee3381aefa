#!/usr/bin/env bash
# Make (or refresh) the environment gptqmodel runs in, beside the main one:
#   scripts/setup-gptqmodel-venv.sh DIR        e.g. scripts/setup-gptqmodel-venv.sh .gptqmodel-venv
# transformers runs checkpoints in the GPTQ and AWQ formats (quant_method gptq, awq) through
# gptqmodel, and gptqmodel 7.6 pins numpy 2.2.6, older than the main environment's; 7.7 needs
# torch >= 2.14.1. So they are gated here: the same package, transformers and torch as the main
# environment, the builtin benchmark, auto-round to make such checkpoints (benchmarks/quantized_variants.py
# --only gptq-g64,awq-g64) and gptqmodel to run them. torch is pinned and installed first, as in
# setup-venv.sh (an unpinned torch pulls a CUDA build); gptqmodel builds from its source
# distribution against it (no build isolation: its setup imports torch). GPTQMODEL_SPEC chooses
# another gptqmodel.
set -euo pipefail
dir=${1:?usage: scripts/setup-gptqmodel-venv.sh DIR}
cd "$(dirname "$0")/.."
python3 -m venv "$dir"
"$dir/bin/python" -m pip install --quiet --upgrade pip setuptools wheel
"$dir/bin/python" -m pip install --quiet "${TORCH_SPEC:-torch==2.13.0}"
"$dir/bin/python" -m pip install --quiet --no-build-isolation "${GPTQMODEL_SPEC:-gptqmodel==7.6.0}"
"$dir/bin/python" -m pip install --quiet -e ".[hf,bench,auto-round,gptqmodel,test]"
