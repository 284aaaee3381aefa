"""pytest hooks: the gate itself is built on the scoring engine (issue 4)."""
