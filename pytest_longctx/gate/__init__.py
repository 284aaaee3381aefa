"""The gate: thresholds, verdicts, losses and comparisons of a model against its baseline,
and the gate sessions the plugin drives."""
