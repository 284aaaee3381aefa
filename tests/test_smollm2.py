"""The gate on a real pretrained model: SmolLM2 passes against its committed baseline with no
drift at all, and the same weights with attention limited to a 512-token window fail the
far rows, their damage named far-specific."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from kit.needs import needs_smollm2
from kit.runs import run_pytest

ROOT = Path(__file__).parent.parent
BASELINE = ROOT / "baselines" / "smollm2-135m.json.gz"

pytestmark = [
    pytest.mark.slow,
    needs_smollm2,
]


def gate(model: str, folder: Path, *args: str) -> subprocess.CompletedProcess:
    return run_pytest(folder, f"--rootdir={folder}", f"--longctx-model={model}", f"--longctx-baseline={BASELINE}",
                      "--longctx-sets=facts,tool_calls", "--longctx-lengths=2k", "--longctx-limit=2", *args)


def test_smollm2_passes_and_its_local_window_variant_fails(tmp_path):
    from variants import build

    window = build("smollm2-135m", tmp_path / "variants", ("window512",))["window512"]
    itself = gate("smollm2-135m", tmp_path)
    assert itself.returncode == 0, itself.stdout[-3000:]
    rows = [line for line in itself.stdout.splitlines() if line.startswith(("Facts recalled at 2k", "Distant tool calls at 2k"))]
    for line in rows[len(rows) // 2:]:  # the drift table's lines (after the gate table's): far, near, control KL
        far, near, control = line.split(" tokens", 1)[1].split()[:3]
        assert far == control == "0.000" and near in ("0.000", "n/a"), line
    # every item read: where the damage lies (far-specific) needs more than the one item that settles the FAIL
    windowed = gate(str(window), tmp_path, "--longctx-sequential=off")
    assert windowed.returncode == 1, windowed.stdout[-3000:]
    failed = [line for line in windowed.stdout.splitlines() if line.startswith("FAILED") and "test_row[" in line]
    assert any("test_row[facts-2k]" in line for line in failed) and any("test_row[tool_calls-2k]" in line for line in failed)
    assert "Facts recalled at 2k tokens: far-specific: control drift 0.000 within 0.050" in windowed.stdout
