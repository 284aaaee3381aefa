"""Every option of the pytest plugin and of the ``longctx`` subcommands, declared once: its
name, the kind of value it takes (with its range or choices), its default, its help, which
front ends take it and whether an ini file may set it. The plugin's options
(``--longctx-<name>``, ini ``longctx_<name>``), the subcommands' arguments (``--<name>``),
``--help`` and the option tables of docs/options.md are all made from this table.

An option that means something else in one command (``--model``: the candidate in ``blame``)
is declared again for that command, with its own help; no command takes one name twice."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pytest_longctx.data.builtin.plan import DEFAULT_LENGTHS, DEFAULT_SEED
from pytest_longctx.data.records import ALL_CONFIGS, SUITES, Name
from pytest_longctx.options.values import (
    COUNT,
    FOLDER,
    INTEGER,
    LENGTHS,
    LEVEL,
    NUMBER,
    PATH,
    ROWS,
    SHARD,
    Value,
    choice,
    names,
    text,
    whole,
)

PYTEST = "pytest"  # the plugin: --longctx-<name>
CONFIG_NAMES = names("facts,tool_calls")
SCORE, COMPARE, BLAME, GGUF_FIX_SET, BUILD, VALIDATE, BENCH = ("score", "compare", "blame", "gguf-fix-set", "build", "validate",
                                                          "compress-bench")
MERGE, LADDER = "merge", "ladder"
COMMANDS = (SCORE, COMPARE, MERGE, LADDER, BLAME, GGUF_FIX_SET, BUILD, VALIDATE, BENCH)
PLUGIN_SPELLED = (LADDER,)  # the commands that take every option of the plugin as pytest spells it (--longctx-out)

# choices and defaults the features that implement them import from here
MODES = ("auto", "ids", "text")
DTYPES = ("auto", "float32", "bfloat16", "float16")
REPORT_FORMATS = ("text", "markdown", "json", "html")
GRANULARITIES = ("layer", "block", "tensor")  # blame's parts
SEARCHES = ("groups", "exhaustive")  # blame's searches
# the backends blame makes hybrids for: those whose record in backends/builtin.py, above the options, loads a
# pair (tests/test_builtin_backends.py holds the two together)
PAIR_BACKENDS = ("hf", "llama.cpp")
FIX_BUDGET = 32  # the hybrids blame's fix set search may score by default (its steps and the pruning after)
BUDGET = 40  # the models blame scores on the blamed items by default: the dense case's search ends well within it
GROUPS_FROM = 8  # changed parts from which blame's group search measures fewer hybrids than every part both ways
CARRY = 0.05  # a group that moves some blamed row's far drift by this share of it or more, either way, is split
COMPRESSORS = ("identity", "last_tokens", "last_messages", "message_relevance", "sentence_relevance", "selective_context")
MIN_EFFECT = 1.0  # rules: the reference's rule effect a target needs to be counted, in nats (the card's)


class Sequential(Name):
    """How much of the selection is read (--longctx-sequential, docs/metrics.md#sequential-reading)."""

    EXACT = "exact"  # until no unread item can change a verdict
    CONFIDENT = "confident"  # until an anytime-valid test shows each verdict
    OFF = "off"  # every item


SEQUENTIAL_MODES = tuple(mode.value for mode in Sequential)


class LadderOrder(Name):
    """The order a ladder's candidates after the first read each set's items in (--longctx-ladder-order,
    docs/reports.md#the-ladder)."""

    DIGEST = "digest"  # by the digest of each item's key, as a run of one model reads them
    DRIFT = "drift"  # first the items the candidates before it drifted most on
SEQUENTIAL_ALPHA = 0.05  # the level of confident's tests where --longctx-alpha is not given



class Metric(Name):
    """What a threshold sets (``--longctx-threshold PATTERN:METRIC=VALUE``; the model gate's are also options of
    their own, whose ``dest`` each is)."""

    DROP = "drop"
    RETAINED = "retained"
    FOLLOW = "follow"
    ITEM_DROP = "item_drop"
    KL = "kl"
    RETENTION = "retention"  # the compressor gate's (compress/run.py): no global value, defaults per row
    SAVINGS = "savings"


# what each metric bounds
METRICS = {
    Metric.DROP: "largest allowed drop of accuracy below the baseline (facts, distant tool calls, agent sessions)",
    Metric.RETAINED: "lowest allowed retained rule effect (1.00 = as the baseline)",
    Metric.FOLLOW: "lowest allowed share of rules followed",
    Metric.ITEM_DROP: "largest allowed mean log-probability loss of one item, in nats",
    Metric.KL: "largest allowed mean KL_K at far reads against the baseline's most likely tokens, in nats (drift)",
    Metric.RETENTION: "lowest allowed share of facts kept by a context compressor",
    Metric.SAVINGS: "lowest allowed realized token savings of a context compressor",
}

MODEL_SECTION, REPORTS, BLAME_SECTION, THRESHOLDS, COMPRESSOR = "model", "reports", "blame", "thresholds", "compressor"


@dataclass(frozen=True)
class Option:
    """One option. In the plugin ``--longctx-<name>`` (dest and ini name ``longctx_<name_>``); in the
    commands ``--<name>`` (dest ``dest`` or ``<name_>``), or a positional argument."""

    name: str
    help: str
    value: Value | None = None  # None: a flag, on when given
    default: Any = None
    takes: tuple[str, ...] = (PYTEST,)  # the front ends: PYTEST and the subcommands
    ini: bool = False  # the plugin also reads it from the ini file
    repeat: bool = False  # may be given several times: a list
    required: bool = False  # in the commands
    positional: bool = False  # in the commands: an argument, not a flag
    also: tuple[str, ...] = ()  # other spellings in the commands (--save-scores)
    dest: str = ""  # the commands' attribute; empty: the name with underscores
    section: str = MODEL_SECTION  # where docs/options.md lists the plugin's option
    keys: str = ""  # what its KEY=VALUE settings are checked against (options/backend_keys.py, METRICS, ...)
    doc: str = ""  # the meaning docs/options.md gives, in markdown with links; empty: the help

    @property
    def plugin_flag(self) -> str:
        return f"--longctx-{self.name}"

    @property
    def plugin_dest(self) -> str:
        return "longctx_" + self.name.replace("-", "_")

    @property
    def flag(self) -> str:
        """How the commands spell it: ``--max-kl``, or a positional argument's metavar."""
        return (self.value.metavar if self.value else self.name.upper()) if self.positional else f"--{self.name}"

    @property
    def command_dest(self) -> str:
        return self.dest or self.name.replace("-", "_")

    def shown_default(self) -> str:
        """The default as help and docs say it; empty for none."""
        if self.default is None or self.default is False or self.default == []:
            return ""
        if isinstance(self.default, (list, tuple)):
            return ",".join(map(str, self.default))
        return f"{self.default:g}" if isinstance(self.default, float) else str(self.default)


@dataclass(frozen=True)
class Command:
    """A ``longctx`` subcommand: the line ``longctx --help`` lists it with, and what ``longctx NAME --help`` says first."""

    name: str
    help: str
    description: str


COMMAND_TEXTS = (
    Command(SCORE, "score a model teacher-forced on the benchmark",
            "Score a causal LM teacher-forced; print the headline rows and write the results JSON."),
    Command(COMPARE, "compare results with a baseline: rows, cells, verdicts, what was lost",
            "Compare a model's results with its baseline, as the gate judges them, and show the items and targets that "
            "lost the most, with the text around each target."),
    Command(MERGE, "join the parts of a sharded run into its verdicts and reports (or its baseline)",
            "Join the parts of a split run (pytest --longctx-shard K/N) into the verdicts, reports and exit status of one "
            "run of the whole selection; the parts of a baseline update into the one baseline (--baseline)."),
    Command(LADDER, "gate several candidates against one baseline in one run, and name the smallest that passes",
            "Gate several candidates against one baseline in one run and name the smallest that passes: the plugin's "
            "ladder, run by pytest in this folder (pytest --longctx-only --longctx-model A --longctx-model B ...), with "
            "the plugin's options as pytest spells them and its ini file; exit status 0 when every candidate passes, 1 "
            "when one fails."),
    Command(BLAME, "which parts of a compressed model make the gate fail, and what to keep",
            "Build hybrids of an original and its compressed candidate (transformers checkpoints of one architecture, or "
            "two GGUF files of one model) and measure, on the failing rows' items, how much of the far drift each part "
            "accounts for; then the parts to keep so that it passes."),
    Command(GGUF_FIX_SET, "write a llama.cpp blame's fix set as a GGUF file, with llama.cpp's quantizer",
            "Run the llama-quantize command of a llama.cpp blame's fix set (its --out file's fix_set.recipe) through "
            "llama-cpp-python's quantizer: the candidate's file type with the fix set's parts at the original's types."),
    Command(BUILD, "build the benchmark (all six configs) from the shipped real texts",
            "Build the builtin benchmark into a folder, in the published layout (<config>/<length>-00000-of-00001.parquet "
            "and a README.md dataset card): facts, tool calls, rules in three languages and faithfulness sessions, "
            "generated from the real texts shipped in the package, the same bytes for the same --seed. The gate builds "
            "what it needs by itself, once, into the user cache; this is for a copy of your own."),
    Command(VALIDATE, "check a benchmark folder against the schema and for internal consistency",
            "Check every item of a benchmark folder (builtin or published) against the schema and for internal "
            "consistency (character spans, targets, stored Qwen3.5 ids against the text): one line per problem, exit "
            "status 1 when there is any."),
    Command(BENCH, "compare context compressors at matched savings (knob sweeps, Pareto table)",
            "Run context compressors over the faithfulness sessions, each over a sweep of one knob; print retention "
            "(Layer A), realized savings and, with --model, the change in the answer's teacher-forced recall and "
            "log-probability (Layer B) per point, the Pareto front, and each method's retention at matched savings."),
)


LOADING = (PYTEST, SCORE, BLAME, BENCH)  # the front ends that load a model
READING = (PYTEST, SCORE, BENCH)  # ... and name its backend freely
SELECTING = (PYTEST, SCORE, BLAME)
JUDGING = (PYTEST, COMPARE, BLAME)  # the thresholds

OPTIONS: tuple[Option, ...] = (
    # ------------------------------------------------------------------ the model and the data
    Option("model", "the model to gate: hub id, local folder, .gguf file or alias; without it the plugin does nothing; "
           "given several times, a ladder of candidates, each gated against the one baseline", text("MODEL"), repeat=True,
           doc="the model to gate: a hub id, a local folder, a `.gguf` file or an alias (such as `smollm2-135m`); without "
               "it the plugin does nothing. Given several times, each is a candidate of one ladder, gated against the one "
               "baseline, and the run names the smallest that passes ([reports.md](reports.md#the-ladder))"),
    Option("model", "the model to score: hub id, local folder, .gguf file or alias", text("MODEL"), takes=(SCORE,),
           required=True),
    Option("model", "the compressed model: hub id, folder or alias", text("CANDIDATE"), takes=(BLAME,), required=True),
    Option("model", "the reader for Layer B and the tokenizer for savings (else Qwen3.5, Layer A only)", text("MODEL"),
           takes=(BENCH,)),
    Option("reference", "the original model: hub id, folder or alias", text("ORIGINAL"), takes=(BLAME,), required=True),
    Option("data", "benchmark data: 'builtin' (default), a local folder in the HF layout, or a hub id", text("DATA"),
           "builtin", takes=(PYTEST, SCORE, BLAME), ini=True,
           doc="the benchmark data: `builtin`, a local folder in the Hugging Face layout, or a hub id "
               "([data.md](data.md))"),
    Option("data", "the data both were scored on (default: the one named in their meta)", FOLDER, takes=(COMPARE,)),
    Option("data", "'builtin' (default), a benchmark folder, the faithfulness dataset's folder or file, or a hub id",
           text("DATA"), "builtin", takes=(BENCH,)),
    Option("sets", "configs to gate, comma-separated (default: all present)", CONFIG_NAMES, takes=SELECTING, ini=True),
    Option("sets", f"configs to build, comma-separated (default: all of {', '.join(ALL_CONFIGS)})", CONFIG_NAMES, takes=(BUILD,)),
    Option("lengths", "lengths, comma-separated, e.g. 2k,8k (default: all in the data)", LENGTHS, takes=SELECTING, ini=True),
    Option("lengths", "lengths in Qwen3.5 tokens, comma-separated", LENGTHS, list(DEFAULT_LENGTHS), takes=(BUILD,)),
    Option("limit", "the first N items of each config and length", COUNT, takes=SELECTING, ini=True),
    Option("limit", "at most N items (rules: sessions) per config and length, for quick builds (faithfulness: 300 by "
           "default)", COUNT, takes=(BUILD,)),
    Option("limit", "the first N sessions (the builtin order covers every probe type x depth x placement evenly)", COUNT,
           takes=(BENCH,)),
    Option("mode", "tokenization: auto, ids or text (docs/metrics.md#tokenization-modes)", choice(*MODES), "auto",
           takes=(PYTEST, SCORE), ini=True, doc="tokenization: `ids` feeds the stored Qwen3.5 ids (models with that vocabulary); `text` "
               "tokenizes with the model's tokenizer and maps targets by character offset; `auto` picks `ids` "
               "when the tokenizer reproduces the stored ids ([metrics.md](metrics.md#tokenization-modes))"),
    Option("baseline", "the baseline file (scores of the original model), e.g. baselines/my-model.json.gz, or the name of "
           "one shipped in the package (smollm2-135m)", PATH, ini=True,
           doc="the baseline file (scores of the original model), e.g. `baselines/my-model.json.gz`, or the name of "
               "one shipped in the package, `smollm2-135m` ([baselines.md](baselines.md#the-shipped-smollm2-baseline))"),
    Option("baseline", "the original's baseline scores (.json.gz, with drift blocks); default: score the original now",
           PATH, takes=(BLAME,), doc="the original's baseline (with drift blocks), made from the weights `--reference` loads (else "
               "refused); default: the original is scored now"),
    Option("baseline", "the baseline or reference scores file (.json.gz)", text("BASELINE"), takes=(COMPARE,),
           positional=True),
    Option("results", "the model's results JSON (longctx score --out, pytest --longctx-out) or scores file (--save_scores)",
           text("RESULTS"), takes=(COMPARE,), positional=True),
    Option("update-baseline", "score the model as the reference and (re)write --longctx-baseline"),
    Option("narrow-baseline", "with --longctx-update-baseline: let the new baseline hold fewer items, lengths or configs "
           "than the one it replaces (refused by default)"),
    Option("narrow-baseline", "with --save_scores: let the file written hold fewer items, lengths or configs than the one "
           "it replaces (refused by default)", takes=(SCORE,)),
    Option("save_scores", "write reference scores (.json.gz)", PATH, takes=(SCORE,), also=("--save-scores",),
           doc="keep every per-target score, to serve as a reference later (an existing file is not narrowed: "
        "[baselines.md](baselines.md#making-a-baseline))"),
    Option("reference_scores", "the reference model's saved scores: the rules effects are measured against it", PATH,
           takes=(SCORE,), also=("--reference-scores",)),
    Option("only", "run only the gate's tests (the repository's own test modules are not imported)"),
    Option("shard", "read only the K-th of N parts of the selection (split by the items' reading order, balanced by "
           "tokens) and write it to --longctx-out, for longctx merge to judge with the others", SHARD,
           doc="read only the K-th of N parts of the selection, a split fixed by the items' reading order and balanced "
               "by tokens, and write the part to `--longctx-out`; `longctx merge` joins every part into the one "
               "verdict and the reports of an unsharded run ([scaling.md](scaling.md)); with "
               "`--longctx-update-baseline`, a part of a baseline that `longctx merge --baseline` joins"),
    Option("models", "the candidates: hub ids, local folders, .gguf files or aliases (two or more; also as "
           "--longctx-model, repeated)", text("MODEL"), takes=(LADDER,), positional=True, repeat=True),
    Option("shards", "the shard files to join: every part of one split, each written by --longctx-shard K/N "
           "(--longctx-out)", text("SHARD"), takes=(MERGE,), positional=True,
           repeat=True),
    Option("sequential", "how much is read: exact (items one at a time until no outcome of the unread ones can change a "
           "row's or cell's verdict), confident (until an anytime-valid test at --longctx-alpha settles it), off (every "
           "item); default: exact, off for --longctx-update-baseline", choice(*SEQUENTIAL_MODES), ini=True,
           doc="how much of the selection is read ([metrics.md](metrics.md#sequential-reading)): `exact` reads items "
               "one at a time, in a fixed order, until no outcome of the unread ones can change any selected row's or "
               "cell's verdict (the verdicts are those of `off`); `confident` until an anytime-valid test at "
               f"`--longctx-alpha` ({SEQUENTIAL_ALPHA:g} when not given) shows each check within or beyond its "
               "threshold, reporting `not settled` where the selection runs out first; `off` reads every selected item. "
               "Default: `exact`; a baseline update (`--longctx-update-baseline`) reads every item, and refuses another mode"),
    Option("sequential", "with --reference_scores: stop reading once the gate's checks, at their default thresholds, are "
           "settled (exact: no outcome of the unread items changes a verdict; confident: an anytime-valid test at alpha "
           f"{SEQUENTIAL_ALPHA:g}); off: every item; not with --save_scores", choice(*SEQUENTIAL_MODES), "off",
           takes=(SCORE,),
           doc="with `--reference_scores`: read items one at a time and stop once the gate's checks (at their default "
               "thresholds) are settled, `exact` or `confident` ([metrics.md](metrics.md#sequential-reading)); the "
               "results JSON keeps the stopping record; a file saved with `--save_scores` must hold every item, so "
               "that takes `off` only"),
    Option("ladder-order", "a ladder's candidates after the first read each set's items by digest (as a run of one "
           "model; default) or by drift (first the items the candidates before drifted most on)",
           choice(*(order.value for order in LadderOrder)), ini=True,
           doc="with `--longctx-model` given several times: the order in which each candidate after the first reads "
               "each set's items. `digest` (the default): by the digest of each item's key, as a run of one model. "
               "`drift`: first the items the candidates before it drifted most on, fixed before it reads, so exact "
               "reading still gives the verdicts of reading every item ([reports.md](reports.md#the-ladder))"),
    Option("allow-beyond-context", "score texts longer than the model's context window (refused by default)",
           takes=LOADING, doc="score texts longer than the model's context window (`max_position_embeddings`, or the GGUF's "
               "context length; a model with RoPE scaling configured has no limit here). Without it such a run "
               "is refused before the first forward pass, naming the item, its length and the window"),
    Option("dtype", "auto (float32 on CPU, the checkpoint's on a GPU), float32, bfloat16, float16", choice(*DTYPES), "auto",
           takes=LOADING, ini=True),
    Option("device", "auto, cpu, cuda, cuda:N (under xdist, auto gives worker i GPU i)", text("DEVICE"), "auto", ini=True),
    Option("device", "auto, cpu, cuda or cuda:N", text("DEVICE"), "auto", takes=(SCORE, BLAME, BENCH)),
    Option("trust-remote-code", "let a model that needs its own Python code (auto_map in its config) run it; refused by "
           "default", takes=LOADING, doc="let a model that needs its own Python code (`auto_map` in its config) run it; without it such a "
               "model is refused in one line, and nothing is asked on stdin "
               "([backends.md](backends.md#the-transformers-backend))"),
    Option("backend", "'hf' (transformers), 'llama.cpp' (a .gguf file), 'vllm' (in process), 'vllm-server' (a running "
           "vLLM server) or module:factory", text("BACKEND"), "hf", takes=READING, ini=True,
           doc="`hf` (transformers), `llama.cpp` (a `.gguf` file), `vllm` (vLLM in process), `vllm-server` (a "
               "running vLLM server: `--longctx-model http://HOST:PORT/v1`, or several replicas' URLs, "
               "comma-separated), a backend registered as an entry "
               "point, or `module:factory` ([backends.md](backends.md))"),
    Option("backend", "hf: transformers checkpoints, hybrids made in place; llama.cpp: two .gguf files, hybrids written "
           "as GGUF files and run by llama.cpp", choice(*PAIR_BACKENDS), "hf", takes=(BLAME,),
           doc="`hf`: transformers checkpoints, hybrids made in place; `llama.cpp`: two GGUF files of one "
               "model, hybrids written as GGUF files and run by llama.cpp, the fix set also printed as "
               "`llama-quantize --tensor-type` arguments ([blame.md](blame.md#llamacpp-gguf-files))"),
    Option("backend-option", "a setting of the backend, KEY=VALUE (llama.cpp: cache-type-k=q8_0, threads=4; transformers: "
           "device-map=auto, kv-cache=fp8; vllm: its engine arguments, tensor-parallel-size=2; vllm-server: "
           "tokenizer=FOLDER); repeatable", text("KEY=VALUE"), takes=READING, repeat=True, keys="backend",
           doc="a setting of the backend, repeatable; each built-in backend's keys are in [the tables "
               "below](#backend-settings), a backend of your own checks its own"),
    Option("backend-option", "a setting of the backend both models load with, KEY=VALUE (transformers: device-map=auto, "
           "kv-cache=fp8; llama.cpp: cache-type-k=q8_0, threads=4); repeatable", text("KEY=VALUE"), takes=(BLAME,),
           repeat=True, keys="backend",
           doc="a setting of the backend both models load with, repeatable: the transformers or llama.cpp keys of "
               "[the tables below](#backend-settings)"),
    Option("reference-option", "llama.cpp: how the original runs where it differs from --backend-option; its KV cache "
           "types are llama.cpp's f16 unless given here (a quantized cache of the candidate is then one more part); "
           "repeatable", text("KEY=VALUE"), takes=(BLAME,), repeat=True, keys="backend"),
    Option("kv-press", "compress each read's context with a kvpress press in the transformers backend, NAME[:key=value,...] "
           "(snapkv:compression_ratio=0.5, streaming_llm:compression_ratio=0.75,n_sink=4, knorm, tova, "
           "expected_attention) or module:object; the baseline is the same model without it",
           text("NAME[:KEY=VALUE,...]"), takes=READING, ini=True, keys="press",
           doc="compress each read's context with a kvpress press in the transformers backend, "
               "`NAME[:key=value,...]` (`snapkv:compression_ratio=0.5`, "
               "`streaming_llm:compression_ratio=0.75,n_sink=4`, `knorm`, `tova`, `expected_attention`) or "
               "`module:object`; the baseline is the same model without it "
               "([backends.md](backends.md#kv-cache-presses-kvpress), "
               "[metrics.md](metrics.md#kv-cache-presses))"),
    Option("cache-dir", "where answers of past forward passes are kept (default: the user cache; 'off' to disable)",
           FOLDER, takes=LOADING, ini=True, doc="where answers of past forward passes are kept (a vLLM server's only under a name the user "
               "declares, `reuse-scores=NAME`: [backends.md](backends.md#vllm)), and the outputs of compressors "
               "that ask for it (under `compressed/`); `off` to disable; default: the user cache "
               "([performance.md](performance.md))"),
    Option("quiet", "no progress on stderr", takes=(SCORE, BLAME, BENCH)),
    # ------------------------------------------------------------------ reports
    Option("out", "write the results JSON here", PATH, takes=(PYTEST, SCORE, BLAME, MERGE), section=REPORTS,
           doc="write the results JSON ([metrics.md](metrics.md#files))"),
    Option("out", "write the report here instead of to stdout", PATH, takes=(COMPARE,)),
    Option("out", "the GGUF file to write (default: fixed.gguf, as the command names it)", text("FILE"), "fixed.gguf",
           takes=(GGUF_FIX_SET,)),
    Option("out", "folder to write <config>/<length>-00000-of-00001.parquet and README.md into", FOLDER, takes=(BUILD,),
           required=True),
    Option("out", "write every point's metrics (with breakdowns) as JSON", PATH, takes=(BENCH,)),
    Option("markdown", "write the markdown summary here (also appended to $GITHUB_STEP_SUMMARY when set)", PATH,
           takes=(PYTEST, MERGE), section=REPORTS,
           doc="write the markdown summary; on GitHub Actions it is also appended to `$GITHUB_STEP_SUMMARY` "
               "([reports.md](reports.md))"),
    Option("markdown", "write the report in markdown (e.g. for a CI step summary)", PATH, takes=(BLAME,)),
    Option("html", "write the HTML report here (one self-contained file)", PATH, takes=(PYTEST, MERGE), section=REPORTS,
           doc="write the HTML report, one self-contained file ([reports.md](reports.md))"),
    Option("html", "write the report as HTML, with a bar chart of the shares", PATH, takes=(BLAME,),
           doc="write the report as one self-contained HTML file with a bar chart of the restore and damage "
        "shares ([blame.md](blame.md#reports))"),
    Option("junitxml", "write the junit XML of every test of the gate here, with its properties, as pytest --junitxml "
           "does", PATH, takes=(MERGE,)),
    Option("baseline", "join the parts of a baseline update (--longctx-update-baseline --longctx-shard K/N) into this "
           "new baseline file, identical to one made whole; a path that exists is refused", PATH, takes=(MERGE,)),
    Option("format", "text (default), markdown, json or html", choice(*REPORT_FORMATS), "text", takes=(COMPARE,)),
    Option("top", "items and targets shown (0: all)", whole(0), 10, takes=(COMPARE,)),
    # ------------------------------------------------------------------ blame
    Option("blame", "after a failing model gate, run longctx blame on its failing rows' items", section=BLAME_SECTION,
           doc="after the summary of a failing model gate (transformers or llama.cpp backend), run `longctx "
        "blame` on its failing rows' items: its ranked table in the terminal, its markdown after the "
        "markdown summary and in `$GITHUB_STEP_SUMMARY`, its chart and tables in the HTML report "
        "([blame.md](blame.md#from-the-gate)). Without it a failing gate still prints the blame command"),
    Option("blame-reference", "the original model blame compares with (default: the model the baseline's meta names)",
           text("MODEL"), section=BLAME_SECTION,
           doc="the original model blame compares with (hub id, folder or alias); default: the model the "
               "baseline's meta names, where that is a model id, an alias or a folder here"),
    Option("granularity", "layer: each decoder layer; block: attention, MLP and norms within each; tensor: every "
           "parameter; the embeddings, the LM head and the final norm are parts at each", choice(*GRANULARITIES), "layer",
           takes=(BLAME,)),
    Option("parts", "only these parts, comma-separated (e.g. layer.3,lm_head)", names("layer.3,lm_head"), takes=(BLAME,)),
    Option("rows", "only these failing rows, ';'-separated, as the gate names them", ROWS, takes=(BLAME,)),
    Option("search", f"groups (with {GROUPS_FROM} changed parts or more): restore halves of the changed parts, then halves "
           f"of the halves that move the far drift by {CARRY:.0%} or more, down to single parts, and measure those alone "
           "both ways; where the first halves and the first-order estimate show the damage spread over most parts, "
           "keep parts by their estimate until the rows pass instead; exhaustive: every changed part both ways",
           choice(*SEARCHES), "groups", takes=(BLAME,),
           doc=f"which parts are measured alone: `groups` (from {GROUPS_FROM} changed parts) tests halves of the "
               f"changed parts and splits only those that move the far drift by {CARRY:.0%} or more, and turns to a "
               "cumulative search where the damage is spread ([blame.md](blame.md#spread-damage)); "
               f"`exhaustive` measures every changed part both ways ([blame.md](blame.md#the-search))"),
    Option("budget", "the most models scored on the blamed items in all (groups, parts, fix set); where it ends, the "
           "report says what was left unmeasured; raise it for a longer search", COUNT, BUDGET, takes=(BLAME,),
           doc="the most models scored on the blamed items in all (groups, parts, fix set; the verification "
               "runs beyond it); blame's first line says how many it expects; the report names the parts it left "
               "untested ([blame.md](blame.md#cost))"),
    Option("fix-budget", "the hybrids the fix set search may score after the parts' own: each step tries the leading "
           "parts with the ones kept so far", COUNT, FIX_BUDGET, takes=(BLAME,),
           doc="the hybrids the fix set search may score beyond the parts' own; where it runs out, the report "
               "says what it left untried ([blame.md](blame.md#the-fix-set))"),
    Option("boundary-every", "transformers: keep each side's residual stream on the blamed items at every N-th layer "
           "boundary and start each hybrid from the one below its first changed part (with 4 changed parts or more); "
           "0: none, every hybrid runs from the first layer", whole(0), 1, takes=(BLAME,),
           doc="transformers: keep each side's residual stream on the blamed items at every N-th layer boundary "
               "(0: none) and start each hybrid there, with 4 changed parts or more; the figures are the same "
               "bit for bit, the memory is in [blame.md](blame.md#cost)"),
    Option("work-dir", "llama.cpp: the folder the hybrids' GGUF files are written in, one at a time, each removed when "
           "read (default: the system's temporary folder)", FOLDER, takes=(BLAME,),
           doc="llama.cpp only: the folder the hybrids' GGUF files are written in, each in a folder of its own, "
               "removed (and llama.cpp's hold on it let go) as soon as it is read, and on SIGTERM; each is the "
               "size of its base file (default: the system's temporary folder, `$TMPDIR`)"),
    # ------------------------------------------------------------------ quantize, build, validate
    Option("fixed-by", "the results JSON of longctx blame --backend llama.cpp", text("BLAME_JSON"), takes=(GGUF_FIX_SET,),
           required=True),
    Option("original", "the original GGUF file (default: the file the command names, as blame was given it)",
           text("FILE"), takes=(GGUF_FIX_SET,)),
    Option("threads", "the quantizer's threads (default: every core this process may run on)", COUNT, takes=(GGUF_FIX_SET,)),
    Option("seed", "the same seed gives the same bytes", INTEGER, DEFAULT_SEED, takes=(BUILD,)),
    Option("force", "build into a folder that is not empty, replacing its README.md and the parquet files built",
           takes=(BUILD,)),
    Option("dir", "the benchmark folder (builtin or published)", text("DIR"), takes=(VALIDATE,), positional=True),
    # ------------------------------------------------------------------ thresholds
    Option("max-drop", "facts and distant tool calls: largest allowed accuracy drop below the baseline", NUMBER, 0.05,
           takes=JUDGING, ini=True, dest=Metric.DROP.value, section=THRESHOLDS),
    Option("min-retained", "rules: lowest allowed retained effect in every cell", NUMBER, 0.90, takes=JUDGING, ini=True,
           dest=Metric.RETAINED.value, section=THRESHOLDS),
    Option("min-follow", "rules: lowest allowed share followed per length (system prompt)", NUMBER, 0.90, takes=JUDGING,
           ini=True, dest=Metric.FOLLOW.value, section=THRESHOLDS),
    Option("item-max-drop", "one item: largest allowed mean loss against the baseline, in nats", NUMBER, 1.0,
           takes=JUDGING, ini=True, dest=Metric.ITEM_DROP.value, section=THRESHOLDS),
    # calibrated on SmolLM2 (docs/evidence.md, "Why 0.05 nats"): the model itself 0, int8 far below it
    Option("max-kl", "facts and tool calls: largest allowed mean KL_K at far reads against the baseline's most likely "
           "tokens, in nats (drift)", NUMBER, 0.05, takes=JUDGING, ini=True, dest=Metric.KL.value, section=THRESHOLDS,
           doc="facts and distant tool calls: largest allowed mean KL_K at far reads against the baseline's "
               "most likely tokens, in nats (drift; bfloat16 against a float32 baseline of the same model "
               "alone: 0.0006 on SmolLM2-135M, [performance.md](performance.md#dtypes))"),
    Option("threshold", "per row, cell or item: PATTERN:METRIC=VALUE (METRIC: drop, retained, follow, item_drop, kl; "
           "compressor gate: retention, savings, drop); repeatable", text("PATTERN:METRIC=VALUE"), takes=JUDGING,
           ini=True, repeat=True, dest="overrides", section=THRESHOLDS, keys="metric",
           doc="per row, cell or item: `PATTERN:METRIC=VALUE`, e.g. `'rules_*-32k-user-*:retained=0.8'` "
               "(repeatable; in the ini file one per line); see [Keys and overrides](#keys-and-overrides)"),
    Option("alpha", "fail a row or cell only when its shortfall beyond the threshold is significant at this level "
           "(one-sided paired bootstrap over items, e.g. 0.05); default: the point estimate decides", LEVEL,
           takes=JUDGING, ini=True, section=THRESHOLDS,
           doc="the verdict rule: fail a row or cell only when its shortfall beyond the threshold is "
               "significant at level A, above 0 and below 0.5 (one-sided paired bootstrap over items; "
               "[metrics.md](metrics.md#uncertainty)); default: the point estimate decides"),
    Option("min-effect", "rules: the baseline's rule effect a target needs to be counted, in nats", NUMBER, MIN_EFFECT,
           takes=(*JUDGING, SCORE), ini=True, dest="min_effect", section=THRESHOLDS,
           doc="rules: the baseline's rule effect a target needs to be counted, in nats (the card's; recorded "
               "in the results JSON's `meta.min_effect`; `longctx compare` applies it where the metrics are "
               "recomputed from raw scores)"),
    # ------------------------------------------------------------------ the compressor gate
    Option("compressor", "gate a context compressor, module:function or a built-in (" + ", ".join(COMPRESSORS[1:-1])
           + f", {COMPRESSORS[-1]}, {COMPRESSORS[0]}); --longctx-model adds Layer B", text("COMPRESSOR"),
           section=COMPRESSOR),
    Option("knob", "a keyword knob of the compressor, NAME=VALUE (e.g. ratio=0.5); repeatable", text("NAME=VALUE"),
           repeat=True, section=COMPRESSOR, keys="knob",
           doc="a keyword knob of the compressor, repeatable. VALUE is a Python literal (`ratio=0.5`, "
               "`keep=True`, `method='lead'`: a string is quoted); an unquoted word, a value of another kind "
               "than the knob's default (or, for a default of None, than its annotation), a value out of the "
               "knob's range (an adapter's ranges in [compressors.md](compressors.md#adapters)) or a knob "
               "without `--longctx-compressor` is one error line, before any session is compressed"),
    Option("min-retention-verbatim", "compressor gate: lowest allowed share of facts kept, verbatim probes", NUMBER, 1.0,
           ini=True, section=COMPRESSOR),
    Option("min-retention-paraphrase", "compressor gate: lowest allowed share of facts kept, paraphrase probes", NUMBER,
           0.95, ini=True, section=COMPRESSOR),
    Option("methods", f"comma-separated built-ins, adapters (ctxgate, tooltrim, llmlingua) or module:function (default: "
           f"{', '.join(COMPRESSORS)}; selective_context only with --model)", names("last_tokens,ctxgate"), takes=(BENCH,)),
    Option("sweep", "the knob values to run a method with, METHOD:KNOB=V1,V2,... (replaces its default sweep; several for "
           "one method run every combination); repeatable", text("METHOD:KNOB=V1,V2,..."), takes=(BENCH,), repeat=True),
    Option("suites", f"only the sessions of these suites ({', '.join(SUITES)}), after --limit", names(",".join(SUITES[:2])),
           takes=(BENCH,)),
)


def taken_by(front: str) -> list[Option]:
    """The options ``front`` (PYTEST or a subcommand) takes, in the table's order."""
    return [option for option in OPTIONS if front in option.takes]


def plugin_option(name: str) -> Option:
    return next(option for option in OPTIONS if option.name == name and PYTEST in option.takes)


# the option that sets each field of ``Thresholds``, in the fields' order; the commands that judge take them
# by the same names less ``longctx-``, and a failing gate's blame command writes them so
THRESHOLD_FIELDS = {option.command_dest: option for option in OPTIONS if option.section == THRESHOLDS and PYTEST in option.takes}
