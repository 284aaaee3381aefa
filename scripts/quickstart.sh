#!/usr/bin/env bash
# One command from a fresh clone to the gate's table: a virtual environment (.venv) with the
# project, then the gate on the embedded default: SmolLM2-135M-Instruct on the builtin data
# at 2k tokens against the committed baseline (first 8 items of every config).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-venv.sh .venv hf,bench
exec .venv/bin/python -m pytest --longctx-only --longctx-model smollm2-135m \
    --longctx-baseline smollm2-135m --longctx-lengths 2k --longctx-limit 8 "$@"
