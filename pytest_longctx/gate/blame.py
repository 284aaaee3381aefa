"""``longctx blame`` (docs/blame.md): which parts of a compression made the gate fail, and
which to keep from the original so that it passes.

The candidate is compared with the original's baseline as the gate compares it; the failing
rows with drift figures are blamed, whichever of their checks fails (drift: mean KL_K at far
reads beyond the row's threshold; or accuracy), since far drift is what is measured of each
part. On those rows' items only, each part is measured in two directions:

* restore: the candidate with the part taken back from the original; its share is how much
  of the candidate's far drift (and far excess: far minus near or control, gate/drift.py)
  disappears, (candidate - hybrid) / candidate;
* damage: the original with the part taken from the candidate; its share is how much of the
  candidate's far drift appears, hybrid / candidate.

Parts are ranked by restore share (the mean over the blamed rows). The fix set adds parts in
that order, re-scoring the combined hybrid each step, until every blamed row passes (its far
drift within its threshold and its other checks, accuracy among them), or no part left restores
anything; the combined hybrid is then run through the gate on the whole selection (the
verification: PASS or FAIL as the gate would say).

The flow is the same for every backend: it asks a ``backends.parts.Pair`` for the parts, their
cost, a backend reading each hybrid, and the recipe of the fix set (transformers: state-dict
surgery on the loaded models; llama.cpp: GGUF files written with the parts copied over).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Mapping, Sequence

from pytest_longctx.backends.base import Backend, describe
from pytest_longctx.backends.parts import CANDIDATE, ORIGINAL, Cost, Pair, Part, StateDictPair, select_parts
from pytest_longctx.data.load import Dataset
from pytest_longctx.errors import LongctxError
from pytest_longctx.gate.losses import losses
from pytest_longctx.gate.thresholds import Thresholds
from pytest_longctx.gate.verdicts import Evaluation, evaluate
from pytest_longctx.progress import Progress, labelled
from pytest_longctx.scoring.cache import ScoreCache
from pytest_longctx.scoring.fingerprint import tokenizer_fingerprint
from pytest_longctx.scoring.pipeline import compute_sets, needed_fingerprints, score_items, score_sets
from pytest_longctx.scoring.scores_file import ScoresFile, check_fits

RESTORE, DAMAGE = "restore", "damage"
DISAGREE = 0.25  # restore and damage shares further apart than this are said to differ (parts interact)


@dataclass(frozen=True)
class RowState:
    """A row's far drift (mean KL_K, nats), far excess (far minus near or control) and verdict in one model."""

    far: float | None
    excess: float | None
    threshold: float
    passed: bool  # the row's check as the gate judges it: drift and accuracy


def row_states(evaluation: Evaluation, rows: Sequence[str]) -> dict[str, RowState]:
    found, failing = {}, evaluation.failing_rows()
    for row in rows:
        drift = evaluation.drift.get(row)
        figures = (drift.far.kl, drift.difference, drift.threshold) if drift else (None, None, 0.0)
        found[row] = RowState(*figures, passed=row not in failing)
    return found


def _share(removed: float | None, of: float | None) -> float | None:
    return None if removed is None or of is None or of <= 0 else removed / of


@dataclass
class PartBlame:
    """One part: its cost and each blamed row's figures with it restored and with it damaged."""

    part: Part
    cost: Cost
    restore: dict[str, RowState] = field(default_factory=dict)
    damage: dict[str, RowState] = field(default_factory=dict)
    unchanged: bool = False  # the compression left it as it was: its hybrids are the candidate and the original


@dataclass
class Blame:
    """Everything ``longctx blame`` found; ``rows`` empty when the candidate passes."""

    reference: str
    model: str
    granularity: str
    passed: bool  # the candidate passes the gate: nothing to blame
    rows: list[str] = field(default_factory=list)  # the blamed rows, in the gate's order
    candidate: dict[str, RowState] = field(default_factory=dict)
    parts: list[PartBlame] = field(default_factory=list)  # ranked by restore share, largest first
    fix_set: list[str] = field(default_factory=list)
    fix_steps: list[dict[str, RowState]] = field(default_factory=list)  # the rows after each part added
    fixed: bool = False  # every blamed row passes with the fix set
    fix_cost: Cost | None = None
    recipe: list[str] = field(default_factory=list)  # how to make the fix set with the backend's own tools
    verification: dict[str, Any] | None = None  # the fix set's gate run on the whole selection
    notes: list[str] = field(default_factory=list)
    hybrids: int = 0  # the models scored on the blamed rows' items (parts, fix set steps, the original once if needed)

    def restore_share(self, part: PartBlame, row: str, figure: str = "far") -> float | None:
        before, after = getattr(self.candidate[row], figure), getattr(part.restore[row], figure)
        return _share(None if before is None or after is None else before - after, before)

    def damage_share(self, part: PartBlame, row: str, figure: str = "far") -> float | None:
        return _share(getattr(part.damage[row], figure), getattr(self.candidate[row], figure))

    def score(self, part: PartBlame) -> float:
        """The part's rank: its mean restore share of far drift over the blamed rows."""
        shares = [s for s in (self.restore_share(part, row) for row in self.rows) if s is not None]
        return sum(shares) / len(shares) if shares else 0.0

    def differ(self, part: PartBlame, row: str) -> bool:
        """Restore and damage tell different stories: the part interacts with the others."""
        restored, damaged = self.restore_share(part, row), self.damage_share(part, row)
        return restored is not None and damaged is not None and abs(restored - damaged) > DISAGREE

    def to_json(self) -> dict[str, Any]:
        def state(found: dict[str, RowState]) -> dict[str, Any]:
            return {row: asdict(s) for row, s in found.items()}

        return {
            "reference": self.reference, "model": self.model, "granularity": self.granularity, "passed": self.passed,
            "rows": self.rows, "candidate": state(self.candidate), "notes": self.notes,
            "parts": [{"part": p.part.name, "rank": n + 1, "score": self.score(p), "cost": asdict(p.cost), "unchanged": p.unchanged,
                       "restore": state(p.restore), "damage": state(p.damage),
                       "shares": {row: {"restore_far": self.restore_share(p, row),
                                        "restore_excess": self.restore_share(p, row, "excess"),
                                        "damage_far": self.damage_share(p, row),
                                        "damage_excess": self.damage_share(p, row, "excess"),
                                        "differ": self.differ(p, row)} for row in self.rows}}
                      for n, p in enumerate(self.parts)],
            "fix_set": {"parts": self.fix_set, "fixed": self.fixed, "steps": [state(s) for s in self.fix_steps],
                        "cost": asdict(self.fix_cost) if self.fix_cost else None, "recipe": self.recipe},
            "verification": self.verification, "hybrids": self.hybrids,
        }


@dataclass(frozen=True)
class Reading:
    """How blame reads its models, as the gate read the candidate: ``beyond_context`` (texts longer than the
    model's window), and where the score cache is (``cache_dir``: None the user cache, 'off' none)."""

    beyond_context: bool = False
    cache_dir: str | None = "off"
    progress: bool = True

    def factory(self, label: str) -> Callable[[int, int], Progress] | bool:
        return labelled(label) if self.progress else False

    def cache(self, backend: Backend, taken: Sequence[Part]) -> ScoreCache | None:
        """The score cache for a model as loaded (none taken: the candidate or the original, whose answers a
        gate run may hold), none for a hybrid: its answers are never asked for twice."""
        return None if taken else ScoreCache.for_backend(backend, self.cache_dir)


class Scorer:
    """Scores a pair's hybrids against the baseline as the gate judges them: on a whole selection
    (``gated``), or on the blamed rows' items, their row states (``__call__``, once ``blamed`` names them)."""

    def __init__(self, pair: Pair, baseline: ScoresFile, thresholds: Thresholds, reading: Reading):
        self.pair, self.baseline, self.thresholds, self.reading = pair, baseline, thresholds, reading
        self.rows: list[str] = []
        self.items = Dataset(source="", configs={})  # the blamed rows' items
        self.items_sets: dict = {}  # the baseline's sets on them
        self.runs = 0

    def blamed(self, rows: Sequence[str], items: Dataset) -> None:
        self.rows, self.items, self.items_sets = list(rows), items, self.baseline_sets(items)

    def __call__(self, base: str, taken: Sequence[Part], label: str) -> dict[str, RowState]:
        """The blamed rows with ``base`` (ORIGINAL or CANDIDATE) holding ``taken`` from the other side."""
        self.runs += 1
        _, _, evaluation = self.gated(base, taken, label, self.items, f"blame {label}", self.items_sets)
        return row_states(evaluation, self.rows)

    def gated(self, base: str, taken: Sequence[Part], label: str, dataset: Dataset, shown: str,
              baseline_sets: dict | None = None) -> tuple[ScoresFile, dict, Evaluation]:
        """The hybrid's scores on ``dataset`` against the baseline, their sets, and the gate's evaluation
        (``baseline_sets``: the baseline's on ``dataset``, where known)."""
        with self.pair.hybrid(base, taken, label) as backend:
            scores = score_items(backend, self.pair.tokenizer, dataset, self.baseline.mode, self.reading.factory(shown),
                                 cache=self.reading.cache(backend, taken), beyond_context=self.reading.beyond_context,
                                 reference=self.baseline)
        sets = compute_sets(dataset, scores, self.baseline, self.thresholds.min_effect)
        return scores, sets, evaluate(sets, baseline_sets or self.baseline_sets(dataset), self.thresholds)

    def baseline_sets(self, dataset: Dataset) -> dict:
        return compute_sets(dataset, self.baseline, None, self.thresholds.min_effect)


def _rows_items(dataset: Dataset, evaluation: Evaluation, rows: Sequence[str]) -> Dataset:
    """The items of the rows' sets (config and length): what the rows' drift is computed over."""
    wanted = {(evaluation.row_sources[r].config, evaluation.row_sources[r].length) for r in rows}
    return dataset.select({(c, n, item.id) for c, n, item in dataset.items() if (c, n) in wanted})


def choose_rows(evaluation: Evaluation, wanted: Sequence[str] | None, baseline: str) -> list[str]:
    """The failing rows with drift figures (``--rows`` narrows them), in the gate's order: whichever of
    their checks fails (drift, accuracy), far drift is what blame measures of each part."""
    failing = evaluation.failing_rows()
    measured = [r for r in evaluation.row_sources if r in failing and r in evaluation.drift]
    if not measured:
        raise LongctxError(f"the failing rows ({', '.join(sorted(failing))}) have no drift figures: blame measures drift "
                           f"against the baseline's most likely tokens, which {baseline} does not hold for them; "
                           "re-make the baseline with this version")
    if wanted is None:
        return measured
    unknown = [r for r in wanted if r not in measured]
    if unknown:
        raise LongctxError(f"--rows {unknown[0]!r}: not a failing row with drift figures; they are: {'; '.join(measured)}")
    return [r for r in measured if r in wanted]


def check_made_by(baseline: ScoresFile, reference: Mapping[str, Any], name: str) -> None:
    """The baseline is the reference's own, where both name their weights' fingerprint: against another
    model's baseline (same data and tokenizer) blame would share out damage the compression never did."""
    theirs, mine = baseline.meta.get("weights"), reference.get("weights")
    if not theirs or not mine or theirs == mine:
        return
    dtype, loaded = baseline.meta.get("dtype"), reference.get("dtype")
    hint = (f"it was made at {dtype}, where --reference loads at {loaded} (--dtype)" if dtype != loaded
            else "make it from --reference (longctx score --model REFERENCE --save_scores FILE), or leave --baseline out "
                 "to score the original now")
    raise LongctxError(f"--baseline {baseline.path}: made from other weights ({baseline.meta.get('model')}, weights "
                       f"{str(theirs)[:12]}) than --reference {name} (weights {str(mine)[:12]}): blame needs the baseline of "
                       f"the original the candidate was made from; {hint}")


def blame(original: Any, candidate: Any, tokenizer: Any, dataset: Dataset, baseline: ScoresFile | None, *,
          names: tuple[str, str] = ("original", "candidate"), **options: Any) -> Blame:
    """Blame the parts of ``candidate`` (a transformers model) for its failing rows against
    ``original``'s ``baseline``; ``blame_pair``'s options. Both models are changed in place
    while hybrids are scored, and are as loaded again on return."""
    return blame_pair(StateDictPair(original, candidate, tokenizer, names), dataset, baseline, **options)


def blame_pair(pair: Pair, dataset: Dataset, baseline: ScoresFile | None, *, thresholds: Thresholds | None = None,
               granularity: str = "layer", parts: Sequence[str] | None = None, rows: Sequence[str] | None = None,
               verify: bool = True, progress: bool = True, beyond_context: bool = False, cache_dir: str | None = "off",
               ) -> Blame:
    """Blame the parts of the pair's candidate for its failing rows against the original's
    ``baseline`` (None: the original is scored on ``dataset`` first), reading the models as
    ``Reading`` says (the candidate's answers from the score cache in ``cache_dir`` where a gate
    run left them)."""
    thresholds = thresholds or Thresholds()
    reading = Reading(beyond_context, cache_dir, progress)
    names, tokenizer = pair.names, pair.tokenizer
    chosen = select_parts(pair.parts(granularity), parts, granularity)
    with pair.hybrid(ORIGINAL, [], names[0]) as backend:
        if baseline is None:
            baseline = score_sets(backend, tokenizer, dataset, progress=progress, cache=reading.cache(backend, []),
                                  beyond_context=beyond_context).as_baseline()
            where = f"the original {names[0]}, scored now"
        else:
            where = f"baseline {baseline.path}"
            if not baseline.has_drift:
                raise LongctxError(f"--baseline {baseline.path}: holds no drift blocks (the most likely tokens at every "
                                   "read, written since scores file version 2): re-make it from the original")
            check_fits(baseline, baseline.mode, tokenizer_fingerprint(tokenizer, baseline.mode),
                       needed_fingerprints(dataset), what="--baseline")
            check_made_by(baseline, describe(backend), names[0])
    scorer = Scorer(pair, baseline, thresholds, reading)
    _, _, evaluation = scorer.gated(CANDIDATE, [], names[1], dataset, f"blame: the candidate {names[1]}")
    found = Blame(names[0], names[1], granularity, passed=not evaluation.failing_rows())
    if found.passed:
        return found
    found.rows = choose_rows(evaluation, rows, where)
    found.candidate = row_states(evaluation, found.rows)
    scorer.blamed(found.rows, _rows_items(dataset, evaluation, found.rows))
    found.parts = [PartBlame(part, pair.cost([part]), unchanged=pair.unchanged(part)) for part in chosen]
    changed = [entry for entry in found.parts if not entry.unchanged]
    for direction, base in ((RESTORE, CANDIDATE), (DAMAGE, ORIGINAL)):
        for entry in changed:
            label = f"{scorer.runs + 1}/{2 * len(changed)} {direction} {entry.part.name}"
            getattr(entry, direction).update(scorer(base, [entry.part], label))
    if len(changed) < len(found.parts):  # restoring such a part reads as the candidate, damaging with it as the original
        original = scorer(ORIGINAL, [], "the original, for the parts the compression left unchanged")
        for entry in found.parts:
            if entry.unchanged:
                entry.restore.update(found.candidate)
                entry.damage.update(original)
    found.parts.sort(key=lambda p: -found.score(p))  # stable: equal shares keep the model's order
    _fix(found, scorer, dataset, verify, every_part=parts is None)
    found.hybrids = scorer.runs
    return found


def _fix(found: Blame, scorer: Scorer, dataset: Dataset, verify: bool, every_part: bool) -> None:
    """The greedy fix set, its cost and recipe, and (``verify``) its gate run on the whole selection."""
    states = found.candidate
    kept: list[Part] = []
    for entry in found.parts:
        if all(s.passed for s in states.values()) or found.score(entry) <= 0:  # a part that restores nothing is no fix
            break
        kept.append(entry.part)
        found.fix_set.append(entry.part.name)
        # the first step is the part's own restore hybrid, scored already
        states = entry.restore if len(kept) == 1 else scorer(CANDIDATE, kept, f"fix set {len(found.fix_set)}: + {entry.part.name}")
        found.fix_steps.append(states)
    found.fixed = all(s.passed for s in states.values())
    elsewhere = "in how the parts interact" if every_part else "in parts not measured (--parts) or in how the parts interact"
    if not found.fix_set:
        found.notes.append(f"no part measured restores any of the far drift: the damage lies {elsewhere}")
    elif not found.fixed:
        found.notes.append(f"with every part that restores any far drift kept ({len(found.fix_set)} of {len(found.parts)} "
                           f"measured), a blamed row still fails: the rest of the damage lies {elsewhere}")
    found.fix_cost = scorer.pair.cost(kept)
    found.recipe = scorer.pair.recipe(kept) if kept else []
    if verify and found.fix_set:
        found.verification = _verify(kept, scorer, dataset)


def _verify(kept: Sequence[Part], scorer: Scorer, dataset: Dataset) -> dict[str, Any]:
    """The candidate with ``kept`` from the original (the fix set's hybrid) through the gate on the whole selection."""
    scores, sets, evaluation = scorer.gated(CANDIDATE, kept, "fix set", dataset, "blame: verifying the fix set")
    items, _ = losses(scores, scorer.baseline, sets, scorer.baseline_sets(dataset), scorer.thresholds, dataset)
    failing = [v.message() for v in evaluation.verdicts if v.applicable and not v.passed]
    failing += [f"{i.key}: mean loss {i.loss:.3f} nats, needs <= {i.threshold:.3f}" for i in items if not i.passed]
    return {"passed": not failing, "failing": failing, "checks": len([v for v in evaluation.verdicts if v.applicable])}
