"""The picture of the HTML report in docs/evidence.md: ``longctx compare BASELINE RESULTS --format
html``, then a screenshot of the page's top in headless Chromium (Debian's package).

    # from any run: a baseline (or --save_scores file) and the model's results
    longctx score --model smollm2-135m --lengths 8k --save_scores base.json.gz
    longctx score --model ./smollm2-int4 --lengths 8k --reference_scores base.json.gz --out mine.json
    PYTHONPATH=tests python benchmarks/report_picture.py base.json.gz mine.json --out docs/report.png

    # the picture in docs/evidence.md today: SmolLM2 with attention limited to its last 512
    # tokens, against the committed baseline (the results the validity study leaves)
    python benchmarks/gate_validity.py --lengths 2k,8k --limit 4 --only window512
    PYTHONPATH=tests python benchmarks/report_picture.py baselines/smollm2-135m.json.gz variants/results/window512.json \
           --model-name variants/window512

    # without a model at hand: the tests' tiny trained qwen3 and a noisy copy of it, on the
    # tests' hand-built items (about a minute on a CPU)
    PYTHONPATH=tests python benchmarks/report_picture.py --tiny --out report.png

Run it from the repository root, with the tests' helpers (tests/kit/: the browser, the tiny models) on
the import path; the file names given are the ones the page shows.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

from kit import browser

TINY_NOISE = 0.3  # weight noise of the tiny "compressed" model: it forgets some, not all


def tiny_inputs(folder: Path) -> tuple[str, str, str]:
    """(baseline, results, data) of the tiny models, written into ``folder``."""
    from kit.items import build_rows, write_split
    from kit.models import perturbed, trained_qwen3, training_sequences

    from pytest_longctx.backends.hf import TransformersBackend
    from pytest_longctx.data.qwen import qwen35_tokenizer
    from pytest_longctx.reports.format import write_json
    from pytest_longctx.scoring.pipeline import score_sets

    tokenizer = qwen35_tokenizer()
    rows = build_rows(tokenizer, lengths=("2k", "8k"))
    for (config, split), split_rows in rows.items():
        write_split(folder / "data", config, split, split_rows)
    original = trained_qwen3(training_sequences(rows, tokenizer), len(tokenizer))
    noisy = perturbed(original, TINY_NOISE, seed=3)
    reference = score_sets(TransformersBackend(original, tokenizer, name="tiny-qwen3"), tokenizer, str(folder / "data"))
    candidate = score_sets(TransformersBackend(noisy, tokenizer, name="tiny-qwen3-noisy"), tokenizer,
                           str(folder / "data"), reference=reference.scores)
    reference.as_baseline().save(folder / "tiny-qwen3.json.gz")
    write_json(folder / "tiny-qwen3-noisy.json", candidate.to_json())
    return "tiny-qwen3.json.gz", "tiny-qwen3-noisy.json", "data"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("baseline", nargs="?", help="baseline or reference scores file")
    parser.add_argument("results", nargs="?", help="the model's results JSON or scores file")
    parser.add_argument("--data", help="the data both were scored on (default: the one named in their meta)")
    parser.add_argument("--tiny", action="store_true", help="make the inputs from the tests' tiny models")
    parser.add_argument("--out", default="docs/report.png", help="the PNG to write (default docs/report.png)")
    parser.add_argument("--size", default="1200,1700", help="browser window, width,height in CSS pixels")
    parser.add_argument("--model-name", help="the name the page gives the model (default: the one in the results' meta)")
    args = parser.parse_args()
    if not args.tiny and not (args.baseline and args.results):
        parser.error("give BASELINE and RESULTS, or --tiny")
    out = Path(args.out).resolve()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        if args.tiny:
            os.environ.setdefault("LONGCTX_CACHE", str(work / "cache"))
            args.baseline, args.results, args.data = tiny_inputs(work)
            os.chdir(work)  # the page names the files as given: short names, no temporary paths
        from pytest_longctx.cli import main as longctx

        if args.model_name:  # e.g. a variant's folder, named as in docs/evidence.md rather than by its path here
            results = json.loads(Path(args.results).read_text())
            results["meta"]["model"] = args.model_name
            args.results = str(work / Path(args.results).name)
            Path(args.results).write_text(json.dumps(results))

        html = work / "report.html"
        command = ["compare", args.baseline, args.results, "--format", "html", "--out", str(html)]
        code = longctx(command + (["--data", args.data] if args.data else []))
        if code not in (0, 1):  # 1: a check failed, which is what the picture shows
            return code
        out.parent.mkdir(parents=True, exist_ok=True)
        browser.chromium(work / "profile", f"--window-size={args.size}", f"--screenshot={out}", html.as_uri())
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
