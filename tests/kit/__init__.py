"""What the tests share besides fixtures, a module for each kind of helper: which optional
modules a test needs (``needs``), tiny models and saving them (``models``), the naive scorer
(``naive``), hand-built benchmark items (``items``), quantized checkpoints read both ways
(``checkpoints``), the report tests' scored pair (``reports``), headless Chromium (``browser``),
the stand-in vLLM server (``vllm_standin``), tiny GGUF files (``gguf``), pytest run in a process
of its own (``runs``), a free loopback port (``ports``), one-line errors (``errors``) and blame on two models in memory
(``blame``).

Importable as ``kit`` in every import mode: pyproject.toml puts tests/ on pytest's ``pythonpath``."""
