"""What ``longctx compare`` reads: the results side (a results JSON or a scores file) and
the items they were scored on (for the text around each target)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_longctx.data.load import Dataset, load_dataset
from pytest_longctx.data.records import FAITHFULNESS, ItemKey
from pytest_longctx.errors import LongctxError
from pytest_longctx.scoring.fingerprint import item_fingerprint
from pytest_longctx.scoring.scores_file import (
    FORMAT,
    ScoresFile,
    check_drift_blocks,
    checked_body,
    checked_scores,
    read_json_file,
    scores_from_json,
)

FIX = ("give a results JSON (longctx score --out, pytest --longctx-out) or a scores file "
       "(longctx score --save_scores, a baseline)")


@dataclass
class ResultsFile:
    """The side under test: raw scores when the file has them, the metrics it stored."""

    path: str
    mode: str
    meta: dict[str, Any]
    scores: ScoresFile | None
    sets: dict[str, Any] | None
    reference: str | None  # what its stored rules metrics were measured against
    sequential: dict[str, Any] | None = None  # what a sequential reading read of its selection (its totals), if it did
    not_judged: str | None = None  # why the gate run that wrote it did not judge every selected check (gate/outcome.py)


def read_results(path: str) -> ResultsFile:
    """A results JSON or a scores file; damage is one line naming the file (and item and
    field) and the fix. Its own non-finite values are kept: they fail its checks."""
    where = Path(path)
    body = read_json_file(where, "results", FIX)
    if isinstance(body, dict) and body.get("format") == FORMAT:
        whole = checked_scores(body, where, "results")
        return ResultsFile(path, whole.mode, whole.meta, whole, whole.sets, None)
    if not isinstance(body, dict) or not {"rows", "sets", "mode", "meta"} <= set(body):
        raise LongctxError(f"results {path}: neither a results JSON nor a scores file; {FIX}")
    again = "write it again with this version of pytest-longctx"
    checked_body(body, f"results {path}", again)
    scores = scores_from_json(body, path) if "scores" in body else None
    if scores is not None:
        check_drift_blocks(scores, "results", again)
    if not body["sets"] and not (scores is not None and any(True for _ in scores.items())):
        why = body.get("not_judged") or "nothing was scored"
        raise LongctxError(f"results {path}: holds no scores and no metrics: the run that wrote it judged nothing ({why}); "
                           "there is nothing to compare: give the results of a run that scored the model")
    sequential = body.get("sequential")
    totals = sequential.get("totals") if isinstance(sequential, dict) else None
    not_judged = body.get("not_judged")
    return ResultsFile(path, body["mode"], dict(body["meta"]), scores, body["sets"], body.get("reference"),
                       totals if isinstance(totals, dict) else None, not_judged if isinstance(not_judged, str) else None)


def find_data(explicit: str | None, needed: dict[ItemKey, str], results: ResultsFile,
              baseline: ScoresFile) -> tuple[Dataset | None, str | None]:
    """(the scored items, None) or (None, why the texts cannot be shown).

    The data is ``explicit`` (``--data``), else the one named in the results' or the
    baseline's meta. Every needed item must be in it with the fingerprint it was scored
    with; an explicit ``--data`` that fails is an error, a data source from the meta that
    fails only leaves the texts out.
    """
    source = explicit or results.meta.get("data_source") or baseline.meta.get("data_source")
    if not source:
        return None, "the results name no data (meta data_source); pass --data DIR to see the text around each target"
    named = "--data" if explicit else "the data named in the results' meta"

    def refuse(problem: str) -> tuple[None, str]:
        message = f"{named} {source}: {problem}"
        if explicit:
            raise LongctxError(message + "; pass the data the results were scored on")
        return None, f"{message}; the texts around targets are left out (pass --data DIR, the data the results were scored on)"

    configs = sorted({c for c, _, _ in needed})
    # the faithfulness config's splits (``train``) are not lengths: load_dataset reads all of them
    lengths = sorted({n for c, n, _ in needed if c != FAITHFULNESS})
    try:
        dataset = load_dataset(source, sets=configs, lengths=lengths)
    except LongctxError as exc:
        return refuse(f"not available ({exc})")
    chosen = dataset.select(set(needed))
    found = {(c, n, item.id): item_fingerprint(item) for c, n, item in chosen.items()}
    for key, fingerprint in sorted(needed.items()):
        if key not in found:
            return refuse(f"has no item {'/'.join(key)}")
        if found[key] != fingerprint:
            return refuse(f"item {'/'.join(key)} differs from the one scored (fingerprint {found[key]}, "
                          f"scored {fingerprint})")
    return chosen, None
