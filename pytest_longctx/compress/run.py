"""The compressor gate: ``pytest --longctx-compressor module:function``.

Each item is compressed once per pytest run (the first time a test needs it) and its
fact looked for in the compressed messages; with ``--longctx-model`` its answer is also
read teacher-forced under both contexts. Rows compare the compressed context with the
full one; a row with a threshold is a test:

  retention-verbatim    facts kept, verbatim probes (standard suite)     >= 1.00 by default
  retention-paraphrase  facts kept, paraphrase probes (standard suite)   >= 0.95 by default
  retention, retention-low_surprisal, retention-tool_heavy, retention-expanded (a compressor
  that expands references), savings, content-savings, session-savings, answer-recall,
  answer-logprob: reported;
  ``--longctx-threshold 'KEY:METRIC=VALUE'`` (retention, savings; drop for the answers)
  makes any of them a test.

An item test (``faithfulness-<split>-<id>``) fails when its compression failed, or when
it lost a fact its row requires every item to keep (a row threshold of 1.00).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from pytest_longctx.backends.base import Backend, describe
from pytest_longctx.compress.cache import CompressionCache
from pytest_longctx.compress.evaluate import Reader, compress_all, read_answers
from pytest_longctx.compress.interface import parse_knobs, resolve
from pytest_longctx.compress.rows import ANSWER_ROWS, ROWS, RowSpec, row_values
from pytest_longctx.data.faithfulness import load_sessions, sessions
from pytest_longctx.data.records import FAITHFULNESS, FaithfulnessItem, ItemKey
from pytest_longctx.errors import LongctxError
from pytest_longctx.gate.gate_session import Case, Progress
from pytest_longctx.gate.keys import item_key
from pytest_longctx.gate.run_options import GateOptions
from pytest_longctx.gate.verdict import Verdict
from pytest_longctx.metrics.faithfulness import RETAINED_FACTS, Outcome, compression_metrics, labels
from pytest_longctx.numbers import meets
from pytest_longctx.scoring.cache import ScoreCache
from pytest_longctx.scoring.chat import chat_markup

METRIC = {"retention": "retention", "retention_expanded": "retention", "savings": "savings", "content_savings": "savings",
          "session_savings": "savings", "recall": "drop", "logprob": "drop"}


@dataclass
class Row:
    """A compressor-gate row: its value under the full and under the compressed context."""

    key: str
    label: str
    full: float | None  # the value under the full context
    compressed: float | None


@dataclass
class CompressionEvaluation:
    """The compressor gate's rows, verdicts and per-split metrics."""

    rows: list[Row]
    verdicts: list[Verdict]
    sets: dict[str, dict[str, dict[str, Any]]]

    def verdict(self, key: str) -> Verdict | None:
        return next((v for v in self.verdicts if v.key == key), None)


class CompressorRun:
    """The compressor gate's run (a ``GateSession``): items, the compressor, outcomes,
    verdicts. It needs no baseline: the full context is the reference."""

    baseline = None  # GateSession's: no baseline file

    def __init__(self, options: GateOptions, invocation_dir: Path):
        if options.compressor is None:
            raise LongctxError("the compressor gate needs --longctx-compressor module:function")
        self.options = options
        self.thresholds = options.thresholds
        self.dataset = load_sessions(options.data, options.limit)
        self.items: dict[ItemKey, FaithfulnessItem] = {(FAITHFULNESS, split, item.id): item for split, item in sessions(self.dataset)}
        self.compressor = resolve(options.compressor, parse_knobs(options.knobs, "--longctx-knob"), invocation_dir)
        self.outcomes: dict[ItemKey, Outcome] = {}
        self.needed: set[ItemKey] = set()
        self.meta: dict[str, Any] = {}
        self.failure: str | None = None
        self.reader: Reader | None = None
        self.cache: Any = None
        checks = {item_key(*key): {"retention"} for key in self.items}
        checks.update({spec.key: {METRIC[spec.value]} for spec in self.row_specs()})
        self.warnings: list[str] = self.thresholds.check_patterns(checks)

    # -------------------------------------------------------------- cases

    def row_specs(self) -> list[RowSpec]:
        expands = self.compressor.conventions.expand is not None
        present = [spec for spec in ROWS if any(spec.chosen(i) for i in self.items.values())
                   and (expands or spec.value != "retention_expanded")]
        return present + (list(ANSWER_ROWS) if self.options.model else [])

    def row_threshold(self, spec: RowSpec) -> float | None:
        default = {"retention-verbatim": self.options.min_retention_verbatim,
                   "retention-paraphrase": self.options.min_retention_paraphrase}.get(spec.key)
        found = self.thresholds.get(spec.key, METRIC[spec.value], default=False)
        return default if found is None else found

    def item_threshold(self, key: ItemKey) -> float | None:
        """An override for the item, else 1.00 when its row requires every fact kept."""
        found = self.thresholds.get(item_key(*key), "retention", default=False)
        if found is not None:
            return found
        required = [self.row_threshold(spec) for spec in ROWS if spec.value == "retention" and spec.chosen(self.items[key])]
        return 1.0 if any(t is not None and t >= 1.0 for t in required) else None

    def cases(self) -> list[Case]:
        found = [Case("item", item_key(*key), frozenset({key}), FAITHFULNESS, key[1], item_id=key[2]) for key in self.items]
        everything = frozenset(self.items)
        found += [Case("row", spec.key, everything, FAITHFULNESS) for spec in self.row_specs()
                  if self.row_threshold(spec) is not None]
        return found

    def select(self, cases: Iterable[Case]) -> None:
        self.needed = {key for case in cases for key in case.needs}

    def need_everything(self) -> None:
        self.needed = set(self.items)

    # -------------------------------------------------------------- compressing

    def ensure(self, units: Iterable[str], backend: Backend | None, progress: Progress = True) -> None:
        """Compress (and with a model, read) the needed items not done yet, once."""
        if self.failure:
            raise LongctxError(f"compression failed earlier in this session: {self.failure}")
        todo = [key for key in self.items if key in self.needed and key not in self.outcomes]
        if not todo:
            return
        try:
            if self.reader is None:
                self._start(backend)
            assert self.reader is not None
            done = compress_all(self.compressor, [(key[1], self.items[key]) for key in todo], self.reader)
            if self.reader.backend is not None:
                read_answers(self.reader, done, progress if callable(progress) else None, self.cache)
        except LongctxError as exc:
            self.failure = str(exc)
            raise
        for key, compressed in zip(todo, done):
            self.outcomes[key] = compressed.outcome

    def _start(self, backend: Backend | None) -> None:
        self.reader = Reader.of(backend, self.options.model)
        self.reader.cache = CompressionCache.at(self.options.cache_dir, self.warnings.append)
        if backend is not None:
            self.cache = ScoreCache.for_backend(backend, self.options.cache_dir, warn=self.warnings.append)
        self.meta = {"compressor": self.compressor.label, "tokenizer": self.reader.tokenizer_name,
                     "chat_markup": chat_markup(self.reader.tokenizer), "data_source": self.dataset.source,
                     **({"reader": describe(backend)} if backend is not None else {})}

    # -------------------------------------------------------------- evaluation

    def evaluate(self, configs: Iterable[str] | None = None) -> CompressionEvaluation:
        """Rows and verdicts once every item is done (before that: none; none either when
        ``configs`` leaves out faithfulness, the gate's one config)."""
        done = bool(self.items) and all(key in self.outcomes for key in self.items)
        if not done or (configs is not None and FAITHFULNESS not in configs):
            return CompressionEvaluation([], [], {})
        by_split: dict[str, dict[str, Any]] = {}
        for split in self.dataset.configs[FAITHFULNESS]:
            chosen = [(key, item) for key, item in self.items.items() if key[1] == split]
            by_split[split] = compression_metrics([item for _, item in chosen], {item.id: self.outcomes[key] for key, item in chosen})
        rows, verdicts = [], []
        for spec in self.row_specs():
            keys = [key for key, item in self.items.items() if spec.chosen(item)]
            row = self._row(spec, keys)
            rows.append(row)
            threshold = self.row_threshold(spec)
            if threshold is not None:
                verdicts.append(self._verdict(spec, row, threshold, keys))
        return CompressionEvaluation(rows, verdicts, {FAITHFULNESS: by_split})

    def _row(self, spec: RowSpec, keys: list[ItemKey]) -> Row:
        full, compressed = row_values(spec, [(self.items[key], self.outcomes[key]) for key in keys])
        return Row(spec.key, spec.label, full, compressed)

    def _verdict(self, spec: RowSpec, row: Row, value: float, keys: list[ItemKey]) -> Verdict:
        metric = METRIC[spec.value]
        if metric == "drop":
            threshold, rule = (row.full if row.full is not None else 0.0) - value, f"full context - {value:g}"
        else:
            threshold, rule = value, f"{metric} >= {value:g}"
        return Verdict(spec.key, spec.label, spec.value, row.compressed, row.full, threshold, rule,
                       self._losers(spec, keys), reference="full context")

    def _losers(self, spec: RowSpec, keys: list[ItemKey], top: int = 3) -> list[str]:
        """Items that lost their fact (or their answer); failed compressions first."""
        lost = []
        for key in keys:
            outcome, item = self.outcomes[key], self.items[key]
            if outcome["error"] is not None:
                lost.append((0, key, f"{item.id} failed"))
            elif spec.value == "retention" and outcome[RETAINED_FACTS] < outcome["facts"]:
                lost.append((1, key, f"{item.id} ({item.depth}, {item.placement}, {item.probe_type})"))
            elif spec.value in ("recall", "logprob") and _answer_lost(outcome):
                lost.append((1, key, f"{item.id} answer no longer recalled"))
        return [text for _, _, text in sorted(lost)[:top]]

    def item_report(self, key: ItemKey) -> tuple[list[str], dict[str, Any]]:
        """(problems: its compression failed, or it lost a fact its row requires every item
        to keep; properties: its labels and outcome) of one compressed item."""
        outcome, item = self.outcomes[key], self.items[key]
        properties = {**labels(item), **{k: v for k, v in outcome.items() if k not in ("full", "compressed")}}
        for context in ("full", "compressed"):
            record = outcome.get(context)
            if record and "hits" in record:
                properties[f"recalled_{context}"] = all(record["hits"])
        problems = [outcome["error"]] if outcome["error"] else []
        threshold = self.item_threshold(key)
        retention = outcome[RETAINED_FACTS] / outcome["facts"]
        if not problems and threshold is not None and not meets(retention, threshold):
            problems.append(f"the compressed context lost the fact {item.required_facts[0]!r} "
                            f"({item.depth}, {item.placement}, {item.probe_type} probe {item.probe!r})")
        return problems, properties

    # -------------------------------------------------------------- xdist

    def export(self) -> str:
        return json.dumps({"outcomes": [[list(k), o] for k, o in self.outcomes.items()], "meta": self.meta,
                           "failure": self.failure})

    def absorb(self, exported_text: str) -> None:
        exported = json.loads(exported_text)
        for key, outcome in exported["outcomes"]:
            self.outcomes[(key[0], key[1], key[2])] = outcome
        self.meta = self.meta or exported["meta"]
        self.failure = self.failure or exported["failure"]


def _answer_lost(outcome: Outcome) -> bool:
    full, compressed = outcome.get("full") or {}, outcome.get("compressed") or {}
    return "hits" in full and "hits" in compressed and all(full["hits"]) and not all(compressed["hits"])
