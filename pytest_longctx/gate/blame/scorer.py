"""How blame scores its models: as the gate read the candidate (``Reading``), each hybrid against the
baseline as the gate judges it (``Scorer``), within ``--budget`` and with the whole run's pace (``Budget``:
what is spent, what is left, when the run is expected to end)."""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Callable, Sequence

from pytest_longctx.backends.base import Backend
from pytest_longctx.backends.hybrids.pair import CANDIDATE, ORIGINAL, Pair, Part, can_record
from pytest_longctx.data.load import Dataset
from pytest_longctx.gate.blame.records import RowState, row_states
from pytest_longctx.gate.evaluation import Evaluation, evaluate
from pytest_longctx.gate.thresholds import Thresholds
from pytest_longctx.progress import Progress, clock_text
from pytest_longctx.scoring.cache import ScoreCache
from pytest_longctx.scoring.pipeline import compute_sets, score_items
from pytest_longctx.scoring.scores_file import ScoresFile


@dataclass(frozen=True)
class Reading:
    """How blame reads its models, as the gate read the candidate: ``beyond_context`` (texts longer than the
    model's window), and where the score cache is (``cache_dir``: None the user cache, 'off' none)."""

    beyond_context: bool = False
    cache_dir: str | None = "off"
    progress: bool = True

    def cache(self, backend: Backend, taken: Sequence[Part]) -> ScoreCache | None:
        """The score cache for a model as loaded (none taken: the candidate or the original, whose answers a
        gate run may hold), none for a hybrid: its answers are never asked for twice."""
        return None if taken else ScoreCache.for_backend(backend, self.cache_dir)


@dataclass
class Pace:
    """The models scored on the blamed items and their wall time; what the run is expected to score in all."""

    budget: int | None
    expected: int = 0
    seconds: list[float] = field(default_factory=list)

    @property
    def runs(self) -> int:
        return len(self.seconds)

    @property
    def per_model(self) -> float | None:
        return sum(self.seconds) / len(self.seconds) if self.seconds else None

    def left(self) -> float:
        return float("inf") if self.budget is None else self.budget - self.runs

    def spent(self) -> bool:
        return self.left() <= 0

    def detail(self, current: Progress) -> str:
        """The whole run's ETA on a hybrid's progress line: what this one has left, then the models still expected
        at the mean time of those scored (and at most, where a budget bounds them)."""
        per_model = self.per_model
        if per_model is None:
            return f"model {self.runs + 1} of about {self.expected}" + (f", at most {self.budget}" if self.budget else "")
        now = current.remaining()
        now = per_model if now != now else now  # NaN before this model's first token
        after = max(0, self.expected - self.runs - 1)
        text = f"model {self.runs + 1} of about {max(self.expected, self.runs + 1)}, whole run ETA {clock_text(now + after * per_model)}"
        if self.budget is not None:
            text += f" (at most {clock_text(now + max(0, self.budget - self.runs - 1) * per_model)}, --budget {self.budget})"
        return text


class Scorer:
    """Scores a pair's hybrids against the baseline as the gate judges them: on a whole selection
    (``gated``), or on the blamed rows' items, their row states (``__call__``, once ``blamed`` names them).
    ``before`` is called before each model is scored on the blamed items: the results file then holds what
    the models before it found."""

    def __init__(self, pair: Pair, baseline: ScoresFile, thresholds: Thresholds, reading: Reading, pace: Pace,
                 before: Callable[[], None] = lambda: None):
        self.pair, self.baseline, self.thresholds, self.reading, self.pace = pair, baseline, thresholds, reading, pace
        self.after = before
        self.rows: list[str] = []
        self.items = Dataset(source="", configs={})  # the blamed rows' items
        self.items_sets: dict = {}  # the baseline's sets on them
        self.reuse = False  # the pair starts the items' hybrids from its recorded boundaries
        self.held: dict[tuple[str, frozenset[str]], ScoresFile] = {}  # on the items, by base and parts taken

    @property
    def runs(self) -> int:
        """Models scored on the blamed items."""
        return self.pace.runs

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
        so that later hybrids start from them (a pair that ``RecordsBoundaries``); the original's rows, or
        None where the pair cannot."""
        pair = self.pair
        if not can_record(pair):
            return None
        found, reading = {}, self.reading
        self.reading = replace(reading, cache_dir="off")  # the score cache would answer without a forward pass to record
        try:
            for side in (CANDIDATE, ORIGINAL):
                with pair.recording(side, every):
                    found[side] = self(side, [], f"the {side}, its layer boundaries kept")
        finally:
            self.reading = reading
        self.reuse = True
        return found[ORIGINAL]

    def progress(self, shown: str, whole_run: bool) -> Callable[[int, int], Progress] | bool:
        """The progress display of one model's scoring: on the blamed items, with the whole run's ETA."""
        if not self.reading.progress:
            return False

        def factory(items: int, tokens: int) -> Progress:
            found = Progress(items, tokens, label=shown)
            if whole_run:
                found.detail = lambda: self.pace.detail(found)
            return found

        return factory

    def gated(self, base: str, taken: Sequence[Part], label: str, dataset: Dataset, shown: str,
              baseline_sets: dict | None = None, reuse: bool = False) -> tuple[ScoresFile, dict, Evaluation]:
        """The hybrid's scores on ``dataset`` against the baseline, their sets, and the gate's evaluation
        (``baseline_sets``: the baseline's on ``dataset``, where known; ``reuse``: ``dataset`` is the blamed
        items, whose boundaries the pair may hold). A hybrid scored on the blamed items is not scored on them again."""
        key = (base, frozenset(part.name for part in taken))
        on_items = dataset is self.items
        scores = self.held.get(key) if on_items else None
        if scores is None:
            if on_items:
                self.after()  # what the models before this one found, in the results file before this one starts
            started = time.monotonic()
            with self.pair.hybrid(base, taken, label, reuse=reuse) as backend:
                scores = score_items(backend, self.pair.tokenizer, dataset, self.baseline.mode, self.progress(shown, on_items),
                                     cache=self.reading.cache(backend, taken), beyond_context=self.reading.beyond_context,
                                     reference=self.baseline)
            if on_items:
                self.held[key] = scores
                self.pace.seconds.append(time.monotonic() - started)
        sets = compute_sets(dataset, scores, self.baseline, self.thresholds.min_effect)
        return scores, sets, evaluate(sets, baseline_sets or self.baseline_sets(dataset), self.thresholds)

    def baseline_sets(self, dataset: Dataset) -> dict:
        return compute_sets(dataset, self.baseline, None, self.thresholds.min_effect)
