"""``longctx blame`` (docs/blame.md): which parts of a compression made the gate fail, and which to keep
from the original so that it passes.

The candidate is compared with the original's baseline as the gate compares it; the failing rows with
drift figures are blamed, whichever of their checks fails (drift: mean KL_K at far reads beyond the row's
threshold; or accuracy), since far drift is what is measured of each part. On those rows' items only,
each part is measured in two directions (``records``):

* restore: the candidate with the part taken back from the original; its share is how much of the
  candidate's far drift (and far excess: far minus near or control, gate/damage.py) disappears,
  (candidate - hybrid) / candidate;
* damage: the original with the part taken from the candidate; its share is how much of the candidate's
  far drift appears, hybrid / candidate.

A run (``run``) checks the pair and the baseline first (``checks``), says what it expects to cost, then
estimates every part's restore share to first order from one backward pass (``estimates``), and searches:
every part both ways (``--search exhaustive``); adaptive group testing in the model's order, the likelier
half first (``groups``); or, where the first halves and the estimate show the damage spread over most
parts, a bisection over the parts ranked by estimate for the smallest passing keep set (``cumulative``).
The greedy fix set (``fix_set``) follows the group search and is verified through the gate on the whole
selection. Every model is scored through ``scorer`` (as the gate read the candidate, within ``--budget``,
with the whole run's ETA), and the report is handed on after each one, so a run stopped early loses
nothing it measured.

The flow is the same for every backend: it asks a ``backends.hybrids.pair.Pair`` for the parts, their
cost, a backend reading each hybrid, the first-order estimate where it has a gradient, and the recipe of
the fix set (transformers: state-dict surgery on the loaded models; llama.cpp: GGUF files written with
the parts copied over)."""
from pytest_longctx.gate.blame.checks import choose_rows
from pytest_longctx.gate.blame.records import BlameReport, RowState
from pytest_longctx.gate.blame.run import blame_pair

__all__ = ["BlameReport", "RowState", "blame_pair", "choose_rows"]
