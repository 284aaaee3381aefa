"""Context compressors and the faithfulness gate (docs/metrics.md#faithfulness-of-context-compressors).

An agent compresses its own context (drops old turns, trims tool output, prunes
tokens); the gate asks whether the compressed context still carries the fact a later
turn needs: Layer A by searching the compressed text (no model), Layer B by scoring the
answer teacher-forced under the full and the compressed context.
"""
