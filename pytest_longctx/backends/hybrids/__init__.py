"""The backend half of ``longctx blame`` (docs/blame.md): parts of two models and the hybrids
between them. parts.py: what blame asks of a backend (``Pair``) and how parts are named;
transformers.py: hybrids of two transformers checkpoints, made in place; gguf.py: hybrids of two
GGUF files, written for llama.cpp; pairs.py: the pair each backend loads. The search and the
shares are the gate's (gate/blame/)."""
