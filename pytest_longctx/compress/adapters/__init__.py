"""Context compressors of other libraries behind the gate's interface, each registered in
the ``pytest_longctx.compressors`` entry-point group and installed with its extra:
``ctxgate`` (ctx-gate's ContextCompressor), ``tooltrim`` (tooltrim's ToolCompressor on
tool outputs) and ``llmlingua`` (LLMLingua's PromptCompressor on a local causal model).
Each imports its library only when called (docs/compressors.md#adapters)."""
