"""``longctx merge PART... [--out] [--junitxml] [--markdown] [--html] [--baseline]``: the parts of a split
(``--longctx-shard K/N``) joined into the verdicts, reports and exit status of one
run of the whole selection (gate/merge.py), or, for the parts of a baseline update, into the one baseline. Exit status
0 when every test passes, 1 when one fails, 2 for bad input: a part missing, doubled or foreign is never a verdict."""
from __future__ import annotations

import argparse
from pathlib import Path

from pytest_longctx.errors import LongctxError
from pytest_longctx.gate.merge import merge_gate
from pytest_longctx.gate.shard_file import read_part
from pytest_longctx.gate.verdict import FAIL
from pytest_longctx.paths import check_outputs
from pytest_longctx.reports.finish import finish
from pytest_longctx.reports.junit_xml import JunitCase, JunitFile
from pytest_longctx.reports.text import summary_lines


def run(args: argparse.Namespace) -> int:
    outputs = [("--out", args.out), ("--junitxml", args.junitxml), ("--markdown", args.markdown), ("--html", args.html),
               ("--baseline", args.baseline)]
    for option, path in outputs:
        if path and Path(path).exists():
            raise LongctxError(f"{option} {path}: it exists; longctx merge writes new files only, over none: remove it "
                               "or give another path")
    check_outputs(outputs, inputs=[("PART", path) for path in args.shards])
    parts = [read_part(path) for path in args.shards]
    gate = merge_gate(parts, Path.cwd(), args.out, args.markdown, args.html, args.baseline)
    junit = JunitFile() if args.junitxml else None
    finished = finish(gate, junit)
    failed = bool(finished.failed)
    for case in (case for case in gate.cases() if case.key in gate.tests):
        outcome = gate.judge(case)
        failed = failed or outcome.word == FAIL
        if junit is not None:
            junit.add(JunitCase(f"test_{case.kind}[{case.key}]", outcome.word, outcome.lines, outcome.properties))
    if junit is not None:
        try:
            junit.write(args.junitxml)
            finished.notes.append(f"longctx: junit XML written to {args.junitxml}")
        except OSError as exc:
            finished.notes.append(f"longctx: junit XML NOT written to {args.junitxml}: {exc.strerror or exc}")
            failed = True
    print(f"longctx merge: {len(parts)} parts of one split joined")
    print("\n".join(summary_lines(gate, finished)))
    return 1 if failed else 0
