"""What blame checks before it scores a hybrid: the rows it can blame, the baseline made from the original's
weights and with the tokenizer it reads the pair with, the two sides tokenizing alike, and no part holding
NaN or inf."""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from pytest_longctx.backends.hybrids.pair import CANDIDATE, ORIGINAL, Pair
from pytest_longctx.data.load import Dataset
from pytest_longctx.errors import LongctxError
from pytest_longctx.gate.blame.records import NonFinite
from pytest_longctx.gate.evaluation import Evaluation
from pytest_longctx.scoring.fingerprint import tokenizer_fingerprint
from pytest_longctx.scoring.scores_file import ScoresFile


def rows_items(dataset: Dataset, evaluation: Evaluation, rows: Sequence[str]) -> Dataset:
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
