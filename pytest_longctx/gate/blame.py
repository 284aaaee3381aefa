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

Which parts are measured alone (``--search``): ``exhaustive`` measures every changed part both ways;
``groups`` (the default from ``GROUPS_FROM`` changed parts) tests groups first (adaptive group testing),
so that k parts that matter among n cost on the order of k·log2(n) hybrids instead of 2n. The changed
parts, in model order, are halved; restoring one of the two first halves is damaging the original with
the other (the unchanged parts are the same in both models), so they are judged both ways from two
hybrids. A group carries when it moves some blamed row's far drift by ``CARRY`` of it or more, either
way, or makes a row pass (restore) or fail (damage); a group that carries is halved in the direction
that showed it most, and its halves tested that way, the one whose hybrid starts higher (runs fewer
layers) first: where it moves the drift as much as the whole group (within ``CARRY``), the other is not
tested. Where neither half of a restored group
carries, each may mask the other (each enough for the damage the other leaves): both are tested in the
damage direction too. A part alone that carries is kept and then measured alone both ways; the rest are
cleared unmeasured. Where the kept parts' fix set does not make the rows pass, a second round tests
the cleared parts in the same way, restored in the candidate with the fix set restored already and
judged against that hybrid (a part whose drift is small beside another's is then seen), and the fix set
is searched again. ``budget`` caps the models scored on the blamed items; what it leaves is untested.

A pair one of whose sides holds NaN or inf in its weights is not blamed at all: no hybrid with such a part
reads anything but NaN, so the parts that hold them are the finding (``NonFinite``), before anything is scored.

Parts are ranked by restore share (the mean over the blamed rows). The fix set is searched, not
sorted: a greedy that, at each step, scores the candidate with the parts kept so far plus each
part still in question (the marginal gain of adding it to the current hybrid) and keeps the best,
until every blamed row passes (its far drift within its threshold and its other checks, accuracy
among them), the parts in question run out or the search's budget of hybrids ends. The parts in
question are the changed ones with a positive restore *or* damage share: a part whose damage the
others' cancels restores nothing alone (its single restore share may be negative) and is only
seen with them. Once the rows pass, each part kept before the last is tried without (the others
may have made it needless). The combined hybrid is then run through the gate on the whole
selection (the verification: PASS or FAIL as the gate would say).

With enough changed parts, each side's residual stream is kept at the layer boundaries on the
blamed items (``Scorer.record``), and every hybrid on them starts from the boundary below its first
changed part (transformers only: ``backends.hybrids.transformers.Boundaries``); the figures are the
same bit for bit.

The flow is the same for every backend: it asks a ``backends.hybrids.parts.Pair`` for the parts,
their cost, a backend reading each hybrid, and the recipe of the fix set (transformers: state-dict
surgery on the loaded models; llama.cpp: GGUF files written with the parts copied over).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any, Callable, Mapping, Sequence

from pytest_longctx.backends.base import Backend, describe
from pytest_longctx.backends.hybrids.pair import CANDIDATE, ORIGINAL, Cost, Pair, Part, non_finite_kind, select_parts
from pytest_longctx.backends.hybrids.transformers import StateDictPair
from pytest_longctx.data.load import Dataset
from pytest_longctx.errors import LongctxError
from pytest_longctx.gate.losses import losses
from pytest_longctx.gate.thresholds import Thresholds
from pytest_longctx.gate.verdicts import Evaluation, evaluate
from pytest_longctx.options.table import CARRY, FIX_BUDGET, GROUPS_FROM
from pytest_longctx.progress import Progress, labelled
from pytest_longctx.scoring.cache import ScoreCache
from pytest_longctx.scoring.fingerprint import tokenizer_fingerprint
from pytest_longctx.scoring.pipeline import compute_sets, needed_fingerprints, score_items, score_sets
from pytest_longctx.scoring.scores_file import ScoresFile, check_fits

RESTORE, DAMAGE = "restore", "damage"
DISAGREE = 0.25  # restore and damage shares further apart than this are said to differ (parts interact)
FIX_WIDTH = 8  # the fix set search's candidates per step (after the first): the leading parts not kept, by their larger share
REUSE_FROM = 4  # changed parts from which the two scorings that record the layer boundaries pay for themselves


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
    restore: dict[str, RowState] = field(default_factory=dict)  # empty: not measured alone (the group search)
    damage: dict[str, RowState] = field(default_factory=dict)
    unchanged: bool = False  # the compression left it as it was: its hybrids are the candidate and the original
    searched: str = ""  # the group search's word for a part it did not measure both ways: "cleared" or "untested"


@dataclass(frozen=True)
class NonFinite:
    """A part whose tensors hold NaN or inf on one side of the pair: ``tensors`` maps each to what it holds."""

    side: str  # ORIGINAL or CANDIDATE
    part: str
    tensors: dict[str, str]

    @property
    def kind(self) -> str:
        """``NaN``, ``inf`` or ``NaN and inf``: what the part's tensors hold in all."""
        held = " and ".join(self.tensors.values())
        return non_finite_kind("NaN" in held, "inf" in held)


@dataclass
class GroupTest:
    """One hybrid of the group search: ``parts`` restored in the candidate (or damaging the original), the
    blamed rows with it, and whether the group moves their far drift enough to be split."""

    parts: list[str]
    direction: str
    states: dict[str, RowState]
    carries: bool
    shares: list[float | None]  # per blamed row; in a second round, of the far drift left with the fix set restored
    second: bool = False  # a second round's: the group restored with the first round's fix set

    @property
    def name(self) -> str:
        return group_name(self.parts)


def group_name(parts: Sequence[str]) -> str:
    """A group of parts as the report and the progress line name it: ``layer.0..layer.5 (6 parts)``."""
    return parts[0] if len(parts) == 1 else f"{parts[0]}..{parts[-1]} ({len(parts)} parts)"


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
    fix_steps: list[dict[str, RowState]] = field(default_factory=list)  # the rows after each part added or dropped
    fix_moves: list[str] = field(default_factory=list)  # '+ part (best of N)', then '- part' or 'without part: fails'
    fix_hybrids: int = 0  # the hybrids the fix set search scored (its first step reads the parts' own restore hybrids)
    fixed: bool = False  # every blamed row passes with the fix set
    fix_cost: Cost | None = None
    recipe: list[str] = field(default_factory=list)  # how to make the fix set with the backend's own tools
    recipe_tool: str = ""  # whose: "llama.cpp" (a llama-quantize command), "llm-compressor" (a recipe in YAML) or "transformers" (Python)
    verification: dict[str, Any] | None = None  # the fix set's gate run on the whole selection
    notes: list[str] = field(default_factory=list)
    hybrids: int = 0  # the models scored on the blamed rows' items (parts, fix set steps, the original once if needed)
    search: str = "exhaustive"  # how the parts measured alone were chosen (SEARCHES)
    groups: list[GroupTest] = field(default_factory=list)  # the group search's hybrids, in the order scored
    exhaustive: int = 0  # the hybrids measuring every changed part both ways would take (2 per part)
    reuse: dict[str, int] | None = None  # token-layers on the items: all hybrids' ("items"), skipped from the boundaries
    non_finite: list[NonFinite] = field(default_factory=list)  # parts holding NaN or inf: nothing was scored or blamed

    def restore_share(self, part: PartBlame, row: str, figure: str = "far") -> float | None:
        return self.shares(part.restore, RESTORE, row, figure)

    def damage_share(self, part: PartBlame, row: str, figure: str = "far") -> float | None:
        return self.shares(part.damage, DAMAGE, row, figure)

    def shares(self, states: Mapping[str, RowState], direction: str, row: str, figure: str = "far",
               against: Mapping[str, RowState] | None = None) -> float | None:
        """The share of the candidate's far drift (or excess; ``against``: another hybrid's) that a hybrid's
        ``states`` remove (restore) or cause (damage); None where the row was not measured."""
        before = getattr((against or self.candidate)[row], figure)
        after = getattr(states[row], figure) if row in states else None
        if direction == DAMAGE:
            return _share(after, before)
        return _share(None if before is None or after is None else before - after, before)

    def score(self, part: PartBlame) -> float:
        """The part's rank: its mean restore share of far drift over the blamed rows."""
        shares = [s for s in (self.restore_share(part, row) for row in self.rows) if s is not None]
        return sum(shares) / len(shares) if shares else 0.0

    def prior(self, part: PartBlame) -> float:
        """How much the part may matter to the fix set: the larger of its mean restore and damage shares."""
        damaged = [s for s in (self.damage_share(part, row) for row in self.rows) if s is not None]
        return max(self.score(part), sum(damaged) / len(damaged) if damaged else 0.0)

    def gain(self, states: Mapping[str, RowState]) -> tuple[int, float]:
        """How good a hybrid is for the fix set: its blamed rows that pass, then its mean restore share of far drift."""
        shares = [_share(None if self.candidate[row].far is None or states[row].far is None
                         else self.candidate[row].far - states[row].far, self.candidate[row].far) for row in self.rows]
        known = [s for s in shares if s is not None]
        return sum(states[row].passed for row in self.rows), sum(known) / len(known) if known else 0.0

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
                       "searched": p.searched,
                       "restore": state(p.restore), "damage": state(p.damage),
                       "shares": {row: {"restore_far": self.restore_share(p, row),
                                        "restore_excess": self.restore_share(p, row, "excess"),
                                        "damage_far": self.damage_share(p, row),
                                        "damage_excess": self.damage_share(p, row, "excess"),
                                        "differ": self.differ(p, row)} for row in self.rows}}
                      for n, p in enumerate(self.parts)],
            "fix_set": {"parts": self.fix_set, "fixed": self.fixed, "steps": [state(s) for s in self.fix_steps],
                        "moves": self.fix_moves, "hybrids": self.fix_hybrids,
                        "cost": asdict(self.fix_cost) if self.fix_cost else None, "recipe": self.recipe,
                        "recipe_tool": self.recipe_tool},
            "verification": self.verification, "hybrids": self.hybrids, "reuse": self.reuse,
            "non_finite": [asdict(n) for n in self.non_finite],
            "search": {"mode": self.search, "exhaustive": self.exhaustive,
                       "groups": [{"parts": g.parts, "direction": g.direction, "carries": g.carries, "shares": g.shares,
                                   "second_round": g.second,
                                   "states": state(g.states)} for g in self.groups]},
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
        self.runs = 0  # models scored on the blamed items
        self.reuse = False  # the pair starts the items' hybrids from its recorded boundaries
        self.scored: dict[tuple[str, frozenset[str]], ScoresFile] = {}  # on the items, by base and parts taken

    def blamed(self, rows: Sequence[str], items: Dataset) -> None:
        self.rows, self.items, self.items_sets = list(rows), items, self.baseline_sets(items)

    def covers(self, dataset: Dataset) -> bool:
        """``dataset`` holds the blamed items and no others."""
        return {(c, n, item.id) for c, n, item in dataset.items()} == {(c, n, item.id) for c, n, item in self.items.items()}

    def __call__(self, base: str, taken: Sequence[Part], label: str) -> dict[str, RowState]:
        """The blamed rows with ``base`` (ORIGINAL or CANDIDATE) holding ``taken`` from the other side."""
        _, _, evaluation = self.gated(base, taken, label, self.items, f"blame {label}", self.items_sets, self.reuse)
        return row_states(evaluation, self.rows)

    def start(self, base: str, taken: Sequence[Part]) -> int:
        """The decoder layer a hybrid on the blamed items starts at (0 before the sides are recorded)."""
        return self.pair.start(base, taken) if self.reuse else 0

    def record(self, every: int = 1) -> dict[str, RowState] | None:
        """Score each side on the blamed items while the pair records its residual stream at layer boundaries,
        so that later hybrids start from them (transformers only: ``StateDictPair.recording``); the
        original's rows, or None where the pair cannot."""
        recording, able = getattr(self.pair, "recording", None), getattr(self.pair, "can_reuse", lambda: False)
        if recording is None or not able():
            return None
        found, reading = {}, self.reading
        self.reading = replace(reading, cache_dir="off")  # the score cache would answer without a forward pass to record
        try:
            for side in (CANDIDATE, ORIGINAL):
                with recording(side, every):
                    found[side] = self(side, [], f"the {side}, its layer boundaries kept")
        finally:
            self.reading = reading
        self.reuse = True
        return found[ORIGINAL]

    def gated(self, base: str, taken: Sequence[Part], label: str, dataset: Dataset, shown: str,
              baseline_sets: dict | None = None, reuse: bool = False) -> tuple[ScoresFile, dict, Evaluation]:
        """The hybrid's scores on ``dataset`` against the baseline, their sets, and the gate's evaluation
        (``baseline_sets``: the baseline's on ``dataset``, where known; ``reuse``: ``dataset`` is the blamed
        items, whose boundaries the pair may hold). A hybrid scored on the blamed items is not scored on them again."""
        key = (base, frozenset(part.name for part in taken))
        scores = self.scored.get(key) if dataset is self.items else None
        if scores is None:
            with self.pair.hybrid(base, taken, label, reuse=reuse) as backend:
                scores = score_items(backend, self.pair.tokenizer, dataset, self.baseline.mode, self.reading.factory(shown),
                                     cache=self.reading.cache(backend, taken), beyond_context=self.reading.beyond_context,
                                     reference=self.baseline)
            if dataset is self.items:
                self.scored[key] = scores
                self.runs += 1
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


def _tokenizes(tokenizer: Any) -> str:
    """How ``tokenizer`` tokenizes, as the text mode's fingerprint says (one that gives no character offsets, a
    slow tokenizer: its vocabulary)."""
    try:
        return tokenizer_fingerprint(tokenizer, "text")
    except NotImplementedError:
        return repr(sorted(tokenizer.get_vocab().items()))


def check_tokenizers(pair: Pair) -> None:
    """The candidate tokenizes as the original, where both have a tokenizer of their own: blame reads the original,
    the candidate and every hybrid of the two with one tokenizer (``Pair.tokenizer``), the candidate's."""
    (reference, model), (mine, theirs) = pair.names, pair.tokenizers
    if mine is None or theirs is None or mine is theirs or _tokenizes(mine) == _tokenizes(theirs):
        return
    raise LongctxError(f"--model {model}: tokenizes otherwise than --reference {reference} (another vocabulary, or the "
                       "same texts cut into other tokens): blame reads the original, the candidate and every hybrid of the "
                       "two with the candidate's tokenizer, so the two must tokenize alike; give the candidate the "
                       "original's tokenizer files, or blame it against the original it was made from")


def check_baseline_tokenizer(baseline: ScoresFile, pair: Pair) -> None:
    """The baseline was made with the tokenizer blame reads the pair with (in the baseline's mode), once the two
    sides agree (``check_tokenizers``): where it was not, the baseline is what differs."""
    (reference, model), made = pair.names, baseline.meta.get("tokenizer")
    if pair.tokenizer is None:
        if baseline.mode == "ids":
            return
        raise LongctxError(f"--baseline {baseline.path}: scored in the text mode, with a tokenizer ({made}), and neither "
                           f"--reference {reference} nor --model {model} holds one: add the original's tokenizer files to "
                           "both, or leave --baseline out to score the original now")
    now = tokenizer_fingerprint(pair.tokenizer, baseline.mode)
    if made == now:
        return
    mine, theirs = (tokenizer is not None for tokenizer in pair.tokenizers)
    sides = (f"--reference {reference} and --model {model} tokenize with" if mine and theirs
             else f"--reference {reference} tokenizes with (--model {model} holds no tokenizer of its own: it is read "
                  "with the original's)" if mine
             else f"--model {model} tokenizes with (--reference {reference} holds no tokenizer of its own: it is read with "
                  "the candidate's)")
    raise LongctxError(f"--baseline {baseline.path}: made with another tokenizer ({made}) than {sides} ({now}): blame "
                       "needs the baseline of the original as it reads it; make it from --reference (longctx score --model "
                       "REFERENCE --save_scores FILE), or leave --baseline out to score the original now")


def non_finite_parts(pair: Pair, granularity: str) -> list[NonFinite]:
    """The parts whose tensors hold NaN or inf, the candidate's, then the original's."""
    found = []
    for side in (CANDIDATE, ORIGINAL):
        tensors = pair.non_finite(side)
        for part in pair.parts(granularity) if tensors else []:
            held = {name: tensors[name] for name in part.parameters if name in tensors}
            if held:
                found.append(NonFinite(side, part.name, held))
    return found


def blame(original: Any, candidate: Any, tokenizer: Any, dataset: Dataset, baseline: ScoresFile | None, *,
          names: tuple[str, str] = ("original", "candidate"), **options: Any) -> Blame:
    """Blame the parts of ``candidate`` (a transformers model) for its failing rows against
    ``original``'s ``baseline``; ``blame_pair``'s options. Both models are changed in place
    while hybrids are scored, and are as loaded again on return."""
    return blame_pair(StateDictPair(original, candidate, tokenizer, names), dataset, baseline, **options)


def blame_pair(pair: Pair, dataset: Dataset, baseline: ScoresFile | None, *, thresholds: Thresholds | None = None,
               granularity: str = "layer", parts: Sequence[str] | None = None, rows: Sequence[str] | None = None,
               verify: bool = True, progress: bool = True, beyond_context: bool = False, cache_dir: str | None = "off",
               fix_budget: int = FIX_BUDGET, reuse: bool | None = None, reuse_every: int = 1, search: str = "groups",
               budget: int | None = None) -> Blame:
    """Blame the parts of the pair's candidate for its failing rows against the original's
    ``baseline`` (None: the original is scored on ``dataset`` first), reading the models as
    ``Reading`` says (the candidate's answers from the score cache in ``cache_dir`` where a gate
    run left them); ``search`` chooses the parts measured alone (``SEARCHES``; "groups" with fewer than
    ``GROUPS_FROM`` changed parts measures every one), ``budget`` (None: no end) caps the models scored on
    the blamed items, and the fix set search scores at most ``fix_budget`` hybrids of them. ``reuse`` (None: with
    ``REUSE_FROM`` changed parts or more): where the pair can (transformers), each side's residual stream
    is kept at every ``reuse_every``-th layer boundary on the blamed items, and each hybrid on them starts
    from the boundary below its first changed part."""
    thresholds = thresholds or Thresholds()
    reading = Reading(beyond_context, cache_dir, progress)
    names, tokenizer = pair.names, pair.tokenizer
    chosen = select_parts(pair.parts(granularity), parts, granularity)
    check_tokenizers(pair)
    broken = non_finite_parts(pair, granularity)
    if broken:  # no hybrid of such a model reads anything but NaN: its parts' shares would be figures of nothing
        return Blame(names[0], names[1], granularity, passed=False, non_finite=broken)
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
            check_baseline_tokenizer(baseline, pair)
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
    found.exhaustive = 2 * len(changed)
    found.search = "groups" if search == "groups" and len(changed) >= GROUPS_FROM else "exhaustive"
    limit = Limit(budget, scorer)
    original = scorer.record(reuse_every) if (len(changed) >= REUSE_FROM if reuse is None else reuse) else None
    _measure(found, scorer, _search_groups(found, scorer, changed, limit) if found.search == "groups" else changed, limit)
    # restoring an unchanged part reads as the candidate, damaging with it as the original (recorded, or scored once)
    if len(changed) < len(found.parts) and (original or not limit.spent()):
        original = original or scorer(ORIGINAL, [], "the original, for the parts the compression left unchanged")
        for entry in found.parts:
            if entry.unchanged:
                entry.restore.update(found.candidate)
                entry.damage.update(original)
    found.notes += _budget_notes(found, budget)
    found.parts.sort(key=lambda p: (not p.restore, -found.score(p)))  # stable: equal shares keep the model's order
    _fix(found, scorer, dataset, verify, every_part=parts is None, limit=limit, fix_budget=fix_budget, changed=changed)
    found.hybrids = scorer.runs
    if scorer.reuse:
        figures = scorer.pair.reuse_figures()
        found.reuse = {**figures, "every": reuse_every, "items": scorer.runs * figures["scoring"]}
    return found


def _budget_notes(found: Blame, budget: int | None) -> list[str]:
    """What the budget left unmeasured, as the table marks it: the parts measured in neither direction (no figures,
    not in the fix set), and those measured in one only (no share in the other)."""
    untested = [p for p in found.parts if p.searched == "untested"]
    ended = f"the budget of {budget} hybrids (--budget) ended before"
    notes = []
    unmeasured = [p.part.name for p in untested if not p.restore and not p.damage]
    if unmeasured:
        notes.append(f"{ended} {len(unmeasured)} changed part(s) were measured: {', '.join(unmeasured)}; they are in "
                     "neither the ranking's figures nor the fix set")
    doing = {RESTORE: "restored in the candidate", DAMAGE: "damaging the original"}
    for measured, missing in ((RESTORE, DAMAGE), (DAMAGE, RESTORE)):
        names = [p.part.name for p in untested if getattr(p, measured) and not getattr(p, missing)]
        if names:
            one = len(names) == 1
            # the fix set's first step reads the parts' own restore hybrids: a part without one is not in it
            outside = "" if measured == RESTORE else f", and {'it is' if one else 'they are'} not in the fix set"
            notes.append(f"{ended} {', '.join(names)} {'was' if one else 'were'} measured {doing[missing]}: the table "
                         f"shows {'its' if one else 'their'} figures {doing[measured]} alone, no {missing} share{outside}")
    return notes


@dataclass(frozen=True)
class Limit:
    """``--budget``: the models the scorer may score on the blamed items in all (None: no end)."""

    budget: int | None
    scorer: Scorer

    def spent(self) -> bool:
        return self.left() <= 0

    def left(self) -> float:
        return float("inf") if self.budget is None else self.budget - self.scorer.runs

    def within(self, fix_budget: int) -> tuple[int, str]:
        """The fix set search's budget and the flag that sets it: ``fix_budget`` or what ``--budget`` leaves."""
        left = None if self.budget is None else max(0, self.budget - self.scorer.runs)
        return (fix_budget, "--fix-budget") if left is None or fix_budget <= left else (left, "--budget")


BASES = {RESTORE: CANDIDATE, DAMAGE: ORIGINAL}  # the model a hybrid of each direction takes parts into


def _measure(found: Blame, scorer: Scorer, entries: Sequence[PartBlame], limit: Limit) -> None:
    """Each part of ``entries`` alone, restored and damaging, where not measured yet; parts left when the budget
    ends are marked untested."""
    plan = [(direction, entry) for direction in (RESTORE, DAMAGE) for entry in entries if not getattr(entry, direction)]
    for n, (direction, entry) in enumerate(plan):
        if limit.spent():
            for _, left in plan[n:]:
                left.searched = left.searched or "untested"
            return
        label = f"{n + 1}/{len(plan)} {direction} {entry.part.name}"
        getattr(entry, direction).update(scorer(BASES[direction], [entry.part], label))


def _halves(entries: Sequence[PartBlame]) -> list[list[PartBlame]]:
    middle = (len(entries) + 1) // 2
    return [list(entries[:middle]), list(entries[middle:])]


def _search_groups(found: Blame, scorer: Scorer, changed: Sequence[PartBlame], limit: Limit, base: Sequence[PartBlame] = (),
                   against: Mapping[str, RowState] | None = None) -> list[PartBlame]:
    """Adaptive group testing (the module's docstring): the parts of ``changed`` each of whose groups, down to
    the part alone, moves the far drift; the others are marked cleared (or untested where the budget ends).
    Each family is a carrying group's two halves, the direction it carried in, and that test. A second round
    restores its groups in the candidate with ``base`` restored already, judged against that hybrid's rows
    (``against``)."""
    families: list[tuple[list[list[PartBlame]], str, GroupTest | None]] = [(_halves(changed), RESTORE, None)]
    kept: list[PartBlame] = []
    first_round = not base

    def test(group: list[PartBlame], direction: str) -> GroupTest:
        names = [e.part.name for e in group]
        label = (f"hybrid {scorer.runs + 1}, group search{'' if first_round else ', second round'} (every part both "
                 f"ways: {found.exhaustive}): {direction} {group_name(names)}")
        states = scorer(BASES[direction], [e.part for e in [*base, *group]], label)
        if len(group) == 1 and first_round:
            getattr(group[0], direction).update(states)
        found.groups.append(replace(_judged(found, names, direction, states, against), second=not first_round))
        return found.groups[-1]

    while families:
        if limit.spent():
            for entry in (e for halves, _, _ in families for group in halves for e in group):
                entry.searched = "untested"
            break
        halves, direction, parent = families.pop(0)
        # the half whose hybrid runs fewer layers first: where it does what the whole group does, the other is not run
        starts = [scorer.start(BASES[direction], [e.part for e in [*base, *half]]) for half in halves]
        one = 1 if starts[1] > starts[0] else 0
        first = test(halves[one], direction)
        carriers: list[GroupTest | None] = [None, None]
        if parent is not None and _same(found, first, parent):  # this half restores what the group does
            carriers[one] = first if first.carries else None
        elif limit.spent():
            carriers[one] = first if first.carries else None
            for entry in halves[1 - one]:
                entry.searched = "untested"
        else:
            tests = [first, first]  # in the halves' order
            tests[1 - one] = test(halves[1 - one], direction)
            if first_round and len(found.groups) == 2:  # the first halves: restoring one is damaging the original with the other
                tests += [_judged(found, mine.parts, DAMAGE, other.states) for mine, other in zip(tests, tests[::-1])]
            elif first_round and direction == RESTORE and not any(t.carries for t in tests):  # each masks the other?
                if limit.left() >= 2:
                    tests += [test(group, DAMAGE) for group in halves]
                else:
                    for entry in (e for group in halves for e in group):
                        entry.searched = "untested"
            # a half that carries is split in the direction that shows it most (restore, or damage where others mask it)
            carriers = [max((t for t in tests[n::2] if t.carries), key=_strength, default=None) for n in range(2)]
        for group, carrier in zip(halves, carriers):
            if carrier is None:
                for entry in group:
                    entry.searched = entry.searched or "cleared"
            elif len(group) == 1:
                group[0].searched = ""
                kept.append(group[0])
            else:
                families.append((_halves(group), carrier.direction, carrier))
    return kept


def _strength(test: GroupTest) -> float:
    return max(abs(share or 0.0) for share in test.shares)


def _same(found: Blame, half: GroupTest, group: GroupTest) -> bool:
    """``half`` carries and moves every blamed row's far drift as much as its whole ``group`` (a group that
    carries only by passing or failing a row has a share under ``CARRY``: a half that carries nothing is not it)."""
    return half.carries and all(a is not None and b is not None and abs(a - b) < CARRY for a, b in zip(half.shares, group.shares))


def _judged(found: Blame, names: list[str], direction: str, states: dict[str, RowState],
            against: Mapping[str, RowState] | None = None) -> GroupTest:
    """A group's hybrid judged: it carries when it moves some blamed row's far drift by ``CARRY`` of it or more,
    or makes a blamed row pass (restore) or fail (damage)."""
    shares = [found.shares(states, direction, row, against=against) for row in found.rows]
    # the blamed rows fail in the candidate and pass in the original: a restore that passes one, a damage that fails one
    flipped = any(states[row].passed == (direction == RESTORE) for row in found.rows)
    return GroupTest(names, direction, states, flipped or any(s is not None and abs(s) >= CARRY for s in shares), shares)


def _fix(found: Blame, scorer: Scorer, dataset: Dataset, verify: bool, every_part: bool, limit: Limit,
         fix_budget: int, changed: Sequence[PartBlame]) -> None:
    """The fix set (``_search``), its cost and recipe, and (``verify``) its gate run on the whole selection.
    Where the group search's parts do not make the rows pass, the parts it cleared are searched again from the
    fix set's hybrid (a second round), and the fix set searched again with what it finds."""
    def search() -> tuple[list[Part], int, int, str]:
        budget, flag = limit.within(fix_budget)
        return (*_search(found, scorer, budget, flag), budget, flag)

    kept, left, budget, flag = search()
    rest = [p for p in changed if p.searched]  # in the model's order
    if found.search == "groups" and not found.fixed and rest and not limit.spent():
        base = [p for p in found.parts if p.part in kept]
        more = _search_groups(found, scorer, rest, limit, base, found.fix_steps[-1] if found.fix_steps else found.candidate)
        if more:
            _measure(found, scorer, more, limit)
            found.fix_steps, found.fix_moves = [], []
            kept, left, budget, flag = search()
    unmeasured = [*(["in parts the budget left unmeasured (--budget)"] if any(p.searched == "untested" for p in found.parts) else []),
                  *([] if every_part else ["in parts not measured (--parts)"])]
    elsewhere = " or ".join([*unmeasured, "in how the parts interact"])
    if not found.fix_set:
        found.notes.append(f"no part measured restores or causes any of the far drift: the damage lies {elsewhere}")
    elif not found.fixed and left:
        found.notes.append(f"the fix set search spent its budget of {budget} hybrids with a blamed row still failing "
                           f"({len(found.fix_set)} parts kept, {left} in question not tried with them): a larger budget "
                           f"({flag}) may find more")
    elif not found.fixed:
        measured = sum(bool(p.restore or p.damage) for p in found.parts)
        found.notes.append(f"with every part that restores or causes any far drift kept ({len(found.fix_set)} of "
                           f"{measured} measured), a blamed row still fails: the rest of the damage lies {elsewhere}")
    cleared = sum(p.searched == "cleared" for p in found.parts)
    if not found.fixed and cleared:
        found.notes.append(f"the group search cleared {cleared} parts in groups that moved the far drift by less than "
                           f"{CARRY:.0%}: where parts' damage cancels or masks within a group, one of them may matter; "
                           "--search exhaustive measures every part alone")
    found.fix_cost = scorer.pair.cost(kept)
    found.recipe = scorer.pair.recipe(kept) if kept else []
    found.recipe_tool = scorer.pair.recipe_tool if found.recipe else ""
    if verify and found.fix_set:
        found.verification = _verify(kept, scorer, dataset)


def _search(found: Blame, scorer: Scorer, budget: int, flag: str) -> tuple[list[Part], int]:
    """The greedy fix set: each step adds, of the parts in question not kept yet, the one whose hybrid
    with the parts kept is best (``Blame.gain``), until every blamed row passes, the parts in question
    run out or ``budget`` hybrids are spent; then each part kept before the last is dropped where the
    rest still pass. The first step reads the parts' own restore hybrids, scored already. Sets the fix set,
    the hybrids it took and whether it passes; returns the parts kept and how many parts in question were
    left untried."""
    # in question: changed parts that restore or cause some far drift, the one that matters most first
    pool = sorted((p for p in found.parts if not p.unchanged and p.restore and found.prior(p) > 0), key=lambda p: -found.prior(p))
    kept: list[PartBlame] = []
    states, spent = found.candidate, 0

    def passing(found_states: Mapping[str, RowState]) -> bool:
        return all(s.passed for s in found_states.values())

    def with_parts(parts: list[Part], label: str) -> dict[str, RowState]:
        """The candidate with ``parts`` restored; ``spent`` counts it where it was scored (not read again)."""
        nonlocal spent
        runs = scorer.runs
        found_states = scorer(CANDIDATE, parts, label)
        spent += scorer.runs - runs
        return found_states

    while pool and not passing(states) and (not kept or spent < budget):
        if kept:
            tried = pool[:min(FIX_WIDTH, budget - spent)]
            scored = []
            for n, entry in enumerate(tried):
                label = f"fix set step {len(kept) + 1}: + {entry.part.name} ({n + 1}/{len(tried)})"
                scored.append((entry, with_parts([p.part for p in kept] + [entry.part], label)))
                if passing(scored[-1][1]):
                    break  # nothing beats a pass: the search stops here
        else:
            tried = pool
            scored = [(entry, entry.restore) for entry in pool]  # the parts' own restore hybrids
        best, states = max(scored, key=lambda found_entry: found.gain(found_entry[1]))  # the first of equals
        kept.append(best)
        pool.remove(best)
        found.fix_steps.append(states)
        found.fix_moves.append(f"+ {best.part.name} (best of {len(scored)})")
    if passing(states):
        for entry in list(kept[:-1]):  # the last one made them pass; an earlier one may be needless with it
            if spent >= budget:
                found.notes.append(f"the fix set search spent its budget of {budget} hybrids before trying each part "
                                   f"without the others: it may hold a part they make needless ({flag})")
                break
            rest = [p.part for p in kept if p is not entry]
            trial = with_parts(rest, f"fix set: without {entry.part.name}")
            if passing(trial):
                kept.remove(entry)
                found.fix_steps.append(trial)
            found.fix_moves.append(f"- {entry.part.name}" if passing(trial) else f"without {entry.part.name}: fails")
    found.fix_set, found.fix_hybrids, found.fixed = [p.part.name for p in kept], spent, passing(states)
    return [p.part for p in kept], 0 if passing(states) else len(pool)


def _verify(kept: Sequence[Part], scorer: Scorer, dataset: Dataset) -> dict[str, Any]:
    """The candidate with ``kept`` from the original (the fix set's hybrid) through the gate on the whole selection
    (where it is the blamed items, as the fix set's search scored that hybrid on them)."""
    same = scorer.covers(dataset)
    baseline_sets = scorer.items_sets if same else scorer.baseline_sets(dataset)
    scores, sets, evaluation = scorer.gated(CANDIDATE, kept, "fix set", scorer.items if same else dataset,
                                            "blame: verifying the fix set", baseline_sets, reuse=same and scorer.reuse)
    items, _ = losses(scores, scorer.baseline, sets, baseline_sets, scorer.thresholds, dataset)
    failing = [v.message() for v in evaluation.verdicts if v.applicable and not v.passed]
    failing += [f"{i.key}: mean loss {i.loss:.3f} nats, needs <= {i.threshold:.3f}" for i in items if not i.passed]
    return {"passed": not failing, "failing": failing, "checks": len([v for v in evaluation.verdicts if v.applicable])}
