"""benchmarks/bench_engine.py's smallest shape, run as a user runs it: the tiny model on the
tests' hand-built data, one item per config. Its counting session wraps the package's
``ReadSession`` protocol, so a change of that protocol fails here (a counting wrapper with
an older signature printed ``error`` in every engine column and still exited 0)."""
from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

from conftest import needs

pytestmark = needs("torch", "transformers", install='pip install -e ".[hf]"')

SCRIPT = Path(__file__).parent.parent / "benchmarks" / "bench_engine.py"


def test_the_engine_bench_runs_on_a_tiny_shape(data_dir):
    done = subprocess.run([sys.executable, str(SCRIPT), "--model", "tiny", "--data", str(data_dir), "--lengths", "2k",
                           "--limit", "1"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    header = next(line for line in lines if line.startswith("set "))
    columns = header.split("  ")
    columns = [c.strip() for c in columns if c.strip()]
    rows = [line for line in lines if line.startswith("2k ") and "," not in line.split("  ")[0]]
    assert len(rows) == 3, done.stdout  # facts, tool_calls, the three rules configs
    assert "error" not in done.stdout, done.stdout
    for row in rows:
        name, rest = row[:21].strip(), row[21:].split()
        cells = dict(zip(columns[1:], rest))
        # the engine runs each distinct prefix once: exactly the prefix tree's token count
        assert cells["engine tokens"] == cells["lower bound"], row
        assert float(cells["engine/bound"]) == 1.0, row
        assert float(cells["tokens ratio"].rstrip("x")) >= 1.0, row  # the naive way runs every sequence whole
        for ratio in ("time ratio", "memory ratio"):  # measured, so only sane here: speed lives in the benchmark
            value = float(cells[ratio].rstrip("x"))
            assert math.isfinite(value) and value > 0, (name, ratio, row)
