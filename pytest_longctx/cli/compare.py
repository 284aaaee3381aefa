"""``longctx compare BASELINE RESULTS``: a model against its baseline, every row and cell
side by side, the gate's verdicts and what was lost, as text, markdown, JSON or HTML.
Exit status 1 when a check fails, as the gate would."""
from __future__ import annotations

import argparse
import json
import sys

from pytest_longctx.cli.args import level
from pytest_longctx.data.records import config_kind
from pytest_longctx.errors import LongctxError
from pytest_longctx.gate.comparison import Comparison, compare_files
from pytest_longctx.gate.results import read_results
from pytest_longctx.gate.thresholds import Thresholds, parse_overrides
from pytest_longctx.gate.verdicts import Evaluation, cell_key, cells, item_key
from pytest_longctx.parse import finite_nonnegative
from pytest_longctx.paths import check_outputs, write_text_atomically
from pytest_longctx.reports.html import html_report
from pytest_longctx.reports.markdown import markdown_report
from pytest_longctx.reports.tables import text_report
from pytest_longctx.scoring.scores_file import load_scores

FORMATS = ("text", "markdown", "json", "html")


def _nonnegative(value: str) -> float:
    try:
        return finite_nonnegative(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r}: expected a finite number >= 0") from None


def register(sub: argparse._SubParsersAction) -> None:
    defaults = Thresholds()
    p = sub.add_parser("compare", help="compare results with a baseline: rows, cells, verdicts, what was lost",
                       description="Compare a model's results with its baseline, as the gate judges them, and show "
                                   "the items and targets that lost the most, with the text around each target.")
    p.add_argument("baseline", metavar="BASELINE", help="the baseline or reference scores file (.json.gz)")
    p.add_argument("results", metavar="RESULTS",
                   help="the model's results JSON (longctx score --out, pytest --longctx-out) or scores file (--save_scores)")
    p.add_argument("--format", choices=FORMATS, default="text", help="text (default), markdown, json or html")
    p.add_argument("--out", metavar="PATH", help="write the report here instead of to stdout")
    p.add_argument("--data", metavar="DIR", help="the data both were scored on (default: the one named in their meta)")
    p.add_argument("--top", type=int, default=10, metavar="N", help="items and targets shown (default 10; 0: all)")
    p.add_argument("--max-drop", type=_nonnegative, default=defaults.drop,
                   help=f"largest allowed accuracy drop, facts and distant tool calls (default {defaults.drop:g})")
    p.add_argument("--min-retained", type=_nonnegative, default=defaults.retained,
                   help=f"lowest allowed retained rule effect per cell (default {defaults.retained:g})")
    p.add_argument("--min-follow", type=_nonnegative, default=defaults.follow,
                   help=f"lowest allowed share of rules followed (default {defaults.follow:g})")
    p.add_argument("--item-max-drop", type=_nonnegative, default=defaults.item_drop,
                   help=f"largest allowed mean loss of one item, nats (default {defaults.item_drop:g})")
    p.add_argument("--max-kl", type=_nonnegative, default=defaults.kl, metavar="NATS",
                   help=f"largest allowed mean KL_K at far reads, facts and tool calls (drift; default {defaults.kl:g})")
    p.add_argument("--threshold", action="append", default=[], metavar="PATTERN:METRIC=VALUE",
                   help="per row, cell or item, as the plugin's --longctx-threshold; repeatable")
    p.add_argument("--alpha", type=level, metavar="A",
                   help="fail a row or cell only when its shortfall beyond the threshold is significant at level A "
                        "(one-sided paired bootstrap over items; default: the point estimate decides)")
    p.add_argument("--min-effect", type=_nonnegative, default=defaults.min_effect, metavar="NATS",
                   help=f"rules: the baseline's rule effect a target needs to be counted (default {defaults.min_effect:g} nats; "
                        "applies when the metrics are recomputed from raw scores)")
    p.set_defaults(run=run)


def check_keys(evaluation: Evaluation) -> list[str]:
    """The key of every check the comparison can make, thresholded or not: its rows, items and
    rules cells (what a ``--threshold`` pattern may name, as the plugin's check keys)."""
    keys = [source.key for source in evaluation.row_sources.values()]
    for config, by_length in evaluation.sets.items():
        keys += [item_key(config, length, i) for length, metrics in by_length.items() for i in metrics.get("per_item", {})]
        if config_kind(config) == "rules":
            keys += [cell_key(*cell) for cell in cells(config, list(by_length))]
    return keys


def render(comparison: Comparison, fmt: str, top: int) -> str:
    if fmt == "markdown":
        return markdown_report(comparison, top)
    if fmt == "json":
        return json.dumps(comparison.to_json(top), indent=2, allow_nan=False) + "\n"
    if fmt == "html":
        return html_report(comparison)

    return text_report(comparison, top)


def run(args: argparse.Namespace) -> int:
    thresholds = Thresholds(drop=args.max_drop, retained=args.min_retained, follow=args.min_follow,
                            item_drop=args.item_max_drop, kl=args.max_kl, overrides=parse_overrides(args.threshold, "--threshold"),
                            alpha=args.alpha, min_effect=args.min_effect)
    check_outputs([("--out", args.out)], inputs=[("BASELINE", args.baseline), ("RESULTS", args.results)])
    baseline = load_scores(args.baseline, "baseline")
    comparison = compare_files(baseline, read_results(args.results), args.data, thresholds)
    thresholds.check_patterns(check_keys(comparison.evaluation))  # a pattern naming nothing is refused, as by the plugin
    report = render(comparison, args.format, args.top)
    if args.out:
        try:
            write_text_atomically(args.out, report)
        except OSError as exc:
            raise LongctxError(f"--out {args.out}: cannot write it ({exc.strerror})") from None
        print(f"longctx: {args.format} report written to {args.out}", file=sys.stderr)
    else:
        sys.stdout.write(report)
    return 0 if comparison.passed else 1
