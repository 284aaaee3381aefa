"""After a failing model gate: the ``longctx blame`` command that blames its failing rows,
printed after the summary, and with ``--longctx-blame`` that blame run at once (docs/blame.md,
"From the gate"). Loaded only when a model gate runs (it imports the scoring engine).

The command blames the failing rows with drift figures, on the sets and lengths they come
from, with the run's backend (transformers or llama.cpp) and its options, data, limit, dtype, device,
--trust-remote-code, --allow-beyond-context and score cache (whose answers for the candidate
blame then reads instead of scoring it again), and the run's thresholds where they are not the
defaults (so it judges as the run judged); the original is ``--longctx-blame-reference``, else
the model the baseline was made from, as its meta names it, where this machine can load it."""
from __future__ import annotations

import fnmatch
import shlex
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import pytest

from pytest_longctx.backends.aliases import is_model_name
from pytest_longctx.backends.builtin import PAIRED
from pytest_longctx.backends.hybrids import load_models
from pytest_longctx.backends.hybrids.pair import Pair
from pytest_longctx.data.load import Dataset
from pytest_longctx.errors import LongctxError
from pytest_longctx.gate.blame import BlameReport, blame_pair, choose_rows
from pytest_longctx.gate.evaluation import Evaluation
from pytest_longctx.gate.keys import dataset_keys
from pytest_longctx.gate.model_run import GateRun
from pytest_longctx.gate.thresholds import Thresholds
from pytest_longctx.options.backend_keys import backend_options
from pytest_longctx.options.table import BUDGET, THRESHOLD_FIELDS
from pytest_longctx.paths import step_summary, write_text_atomically
from pytest_longctx.reports.blame import beside_drift, blame_markdown, blame_text
from pytest_longctx.reports.finish import append
from pytest_longctx.reports.format import markdown_code, visible
from pytest_longctx.reports.format import markdown_text as cell

UNNAMED = "<the original model>"  # the command's --reference where nothing names a loadable original


def threshold_arguments(thresholds: Thresholds, keys: Mapping[str, Iterable[str]]) -> list[str]:
    """The flags that make a blame whose checks are ``keys`` (key -> its metrics) judge as ``thresholds``
    do: each value that differs from the default, and the overrides that set a metric of one of ``keys``
    (the others judge nothing there, and the command would refuse them)."""
    defaults, arguments = Thresholds(), []
    for name, option in THRESHOLD_FIELDS.items():
        value, flag = getattr(thresholds, name), option.flag
        if name == "overrides":
            for override in value:
                if any(fnmatch.fnmatchcase(key, override.pattern) and override.metric in metrics for key, metrics in keys.items()):
                    arguments += [flag, f"{override.pattern}:{override.metric}={override.value!r}"]  # repr: the value exactly
        elif value != getattr(defaults, name):
            arguments += [flag, repr(value)]
    return arguments


class BlameAfterGate:
    """A plugin registered beside a model gate: after its summary, the blame command of its failing
    rows, and (``run_it``) that blame, its report in the terminal, after the markdown summary and in the HTML report."""

    def __init__(self, run: GateRun, config: pytest.Config, finished: Callable[[], Evaluation | None]):
        self.run, self.config, self.finished = run, config, finished
        self.reference: str | None = run.options.blame_reference  # as entered (a URL in it redacted)
        self.run_it = bool(config.getoption("longctx_blame"))

    def original(self) -> tuple[str, str | None]:
        """The original for ``--reference``; and why none could be named (else None)."""
        if self.reference:
            return self.reference, None
        named = str((self.run.baseline.meta if self.run.baseline else {}).get("model") or "")
        if named and (is_model_name(named) or (self.config.invocation_params.dir / named).exists()):
            return named, None
        why = (f"the baseline names its model {named!r}, which is no model id or alias and no file or folder here" if named
               else "the baseline names no model")
        return UNNAMED, why

    def evaluation(self) -> Evaluation:
        evaluation = self.finished()
        assert evaluation is not None, "blame follows a finished gate"
        return evaluation

    def blamed(self) -> list[str]:
        """The failing rows with drift figures, in the gate's order (none: nothing to blame)."""
        try:
            return choose_rows(self.evaluation(), None, f"baseline {self.run.baseline_path}")
        except LongctxError:
            return []

    def selection(self, rows: list[str]) -> tuple[list[str], list[str]]:
        """The configs and the lengths the rows come from."""
        sources = [self.evaluation().row_sources[r] for r in rows]
        return list(dict.fromkeys(s.config for s in sources)), list(dict.fromkeys(str(s.length) for s in sources))

    def items(self, rows: list[str]) -> Dataset:
        """The items of the configs and lengths the rows come from: what the blame scores."""
        configs, lengths = self.selection(rows)
        return self.run.dataset.select({(c, n, i.id) for c, n, i in self.run.dataset.items() if c in configs and n in lengths})

    def command(self, rows: list[str]) -> str:
        """The ``longctx blame`` command line that blames ``rows``, judging as this run judges."""
        options, (configs, lengths) = self.run.options, self.selection(rows)
        args = ["longctx", "blame", "--reference", self.original()[0], "--model", str(options.model),
                "--baseline", str(options.baseline)]
        if options.backend != "hf":
            args += ["--backend", options.backend]
        for setting in options.backend_options:
            args += ["--backend-option", setting]
        if options.data != "builtin":
            args += ["--data", options.data]
        args += ["--sets", ",".join(configs), "--lengths", ",".join(lengths)]
        if options.limit:
            args += ["--limit", str(options.limit)]
        args += ["--rows", ";".join(rows)]
        for flag, value in (("--dtype", options.dtype), ("--device", options.device)):
            if value != "auto" and options.backend == "hf":  # llama.cpp runs the files' own types
                args += [flag, value]
        for flag, given in (("--trust-remote-code", options.trust_remote_code),
                            ("--allow-beyond-context", options.allow_beyond_context)):
            if given:
                args.append(flag)
        if options.cache_dir:  # where the gate left the candidate's answers
            args += ["--cache-dir", options.cache_dir]
        args += threshold_arguments(options.thresholds, dataset_keys(self.items(rows)))
        return shlex.join(args)  # the options entered redacted: a server's user, password or key is not printed

    def notes(self) -> list[str]:
        """What the command leaves to the reader: the original where it is unnamed."""
        why = self.original()[1]
        return [f"{why}: put the original (uncompressed) model in --reference"] if why else []

    def cost(self, rows: list[str]) -> str:
        """What the printed command costs at most, before it is run: the default budget, in models scored on every
        one of the blamed rows' items, however many of them sequential reading read here (blame's own first line
        says how many models it expects, and their time)."""
        keys = [(c, n, item.id) for c, n, item in self.items(rows).items()]
        read = sum(map(self.run.is_read, keys))
        each = ("about this run's scoring time a model" if read == len(keys) else
                f"every one of them (this run read {read}: sequential reading settled the verdicts sooner)")
        return (f"it scores at most {BUDGET} models (--budget) on these rows' {len(keys)} item{'' if len(keys) == 1 else 's'}, "
                f"{each}; its first line says how many models it expects and how long")

    @pytest.hookimpl(trylast=True)  # after the gate's own summary
    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.finished() is None or self.run.baseline is None:
            return
        rows = self.blamed()
        if not rows:
            if self.run_it:
                why = "no failing row has drift figures" if self.evaluation().failing_rows() else "the gate passes"
                terminalreporter.write_line(f"longctx blame: {why}: nothing to blame")
            return
        command, notes, cost = self.command(rows), self.notes(), self.cost(rows)
        terminalreporter.write_line(visible(f"longctx: which parts of the model these rows' far drift comes from: {command}"))
        terminalreporter.write_line(f"longctx:   {cost}")
        for note in notes:
            terminalreporter.write_line(visible(f"longctx:   ({note})"))
        failures: list[str] = []  # the reports blame could not be added to
        markdown = ["", "### Which parts to blame", "", markdown_code(command), f"- {cell(cost)}",
                    *(f"- {cell(note)}" for note in notes)]
        if self.run_it:
            terminalreporter.section("longctx blame")
            try:
                found = self.blame(rows)
            except LongctxError as exc:
                terminalreporter.write_line(visible(f"longctx blame: {exc}"))
                markdown.append(f"- blame failed: {cell(str(exc))}")
            else:
                for line in blame_text(found).splitlines():
                    terminalreporter.write_line(line)
                markdown += ["", blame_markdown(found, level=3).rstrip()]
                failures += self.add_to_html(found)
        failures += self.append_markdown("\n".join(markdown) + "\n")
        for failure in failures:
            terminalreporter.write_line(visible(failure))

    def blame(self, rows: list[str]) -> BlameReport:
        """Blame ``rows`` on the items of their configs and lengths, with this run's thresholds."""
        options = self.run.options
        return blame_pair(self.pair(), self.items(rows), self.run.baseline, thresholds=options.thresholds, rows=rows,
                          beyond_context=options.allow_beyond_context, cache_dir=options.cache_dir)

    def pair(self) -> Pair:
        """The original and the candidate as the gate's backend loads its model (llama.cpp: the original with
        llama.cpp's own KV cache, as ``longctx blame`` runs it)."""
        options = self.run.options
        return load_models(options.backend, self.original()[0], str(options.model), options.dtype, options.device,
                           options.backend_options, trust_remote_code=options.trust_remote_code)

    def add_to_html(self, found: BlameReport) -> list[str]:
        """The blame's chart and tables in the gate's HTML report (``--longctx-html``), after its drift section."""
        path = self.run.options.html
        if not path:
            return []
        try:
            write_text_atomically(path, beside_drift(Path(path).read_text(encoding="utf-8"), found))
        except OSError as exc:
            return [f"longctx: blame NOT added to {path}: {exc.strerror or exc}"]
        return []

    def append_markdown(self, text: str) -> list[str]:
        """``text`` after the gate's markdown summary (``--longctx-markdown``) and the CI step summary;
        a line for each file it could not be added to."""
        failures = []
        for path in dict.fromkeys(p for p in (self.run.options.markdown, step_summary()) if p):
            try:
                append(path, text)
            except OSError as exc:
                failures.append(f"longctx: blame NOT added to {path}: {exc.strerror or exc}")
        return failures


def follow_up(run: GateRun, config: pytest.Config, finished: Callable[[], Evaluation | None]) -> BlameAfterGate | None:
    """The plugin that follows a model gate's summary; None where it has nothing to blame (updating
    the baseline, a backend blame makes no hybrids for, a KV-cache press or quantized KV cache). ``--longctx-blame`` where
    it cannot run: one line."""
    options = run.options
    kv_cache = backend_options(options.backend_options).get("kv-cache") if options.backend == "hf" else None
    context = (f"--longctx-kv-press {options.kv_press}" if options.kv_press
               else f"--longctx-backend-option kv-cache={kv_cache}" if kv_cache else None)
    if options.update_baseline or options.backend not in PAIRED or context:
        if config.getoption("longctx_blame"):
            why = ("this run makes the baseline: there is nothing to compare, so nothing to blame" if options.update_baseline
                   else f"it blames transformers checkpoints and GGUF files (--longctx-backend {' or '.join(PAIRED)}), "
                        f"not --longctx-backend {options.backend}" if options.backend not in PAIRED
                   else f"it blames the parts of a model's weights, and {context} changes its KV cache, not its weights")
            raise LongctxError(f"--longctx-blame: {why}; leave it out")
        return None
    found = BlameAfterGate(run, config, finished)
    why = found.original()[1]
    if found.run_it and run.baseline is not None and why:
        raise LongctxError(f"--longctx-blame: {why}; give the original (uncompressed) model with --longctx-blame-reference MODEL")
    return found
