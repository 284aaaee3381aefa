"""``longctx compare BASELINE RESULTS``: a model against its baseline, every row and cell
side by side, the gate's verdicts and what was lost, as text, markdown, JSON or HTML.
Exit status 1 when a check fails, as the gate would."""
from __future__ import annotations

import argparse
import json
import sys

from pytest_longctx.cli.args import thresholds_of
from pytest_longctx.errors import LongctxError
from pytest_longctx.gate.comparison import Comparison, compare_files
from pytest_longctx.gate.keys import check_keys
from pytest_longctx.gate.results_file import read_results
from pytest_longctx.paths import check_outputs, local_files, write_text_atomically
from pytest_longctx.reports.html import html_report
from pytest_longctx.reports.markdown import markdown_report
from pytest_longctx.reports.tables import text_report
from pytest_longctx.scoring.scores_file import load_scores


def render(comparison: Comparison, fmt: str, top: int) -> str:
    if fmt == "markdown":
        return markdown_report(comparison, top)
    if fmt == "json":
        return json.dumps(comparison.to_json(top), indent=2, allow_nan=False) + "\n"
    if fmt == "html":
        return html_report(comparison)

    return text_report(comparison, top)


def run(args: argparse.Namespace) -> int:
    thresholds = thresholds_of(args)
    check_outputs([("--out", args.out)], [("BASELINE", args.baseline), ("RESULTS", args.results), *local_files([("--data", args.data)])])
    baseline = load_scores(args.baseline, "baseline")
    comparison = compare_files(baseline, read_results(args.results), args.data, thresholds)
    evaluated = {config: {length: metrics["per_item"] for length, metrics in by_length.items()}
                 for config, by_length in comparison.evaluation.sets.items()}
    thresholds.check_patterns(check_keys(evaluated))  # a pattern naming nothing is refused, as by the plugin
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
