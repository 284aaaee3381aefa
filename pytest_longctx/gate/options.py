"""The plugin's options: one table, each option on the command line and (where it makes
sense) in the ini file, validated into ``GateOptions`` with errors that name the option
and where its value came from."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from pytest_longctx.errors import LongctxError
from pytest_longctx.gate.thresholds import Override, Thresholds, parse_overrides
from pytest_longctx.parse import at_least_one, comma_list, finite_nonnegative, significance_level


@dataclass(frozen=True)
class Option:
    """One plugin option: on the command line as ``--longctx-<name>`` and, where it makes sense, in
    the ini file."""

    name: str  # --longctx-<name>; ini longctx_<name with _>
    help: str
    default: Any = None
    ini: bool = True
    kind: str = "str"  # str, csv, int, float, level, flag, lines, pairs

    @property
    def flag(self) -> str:
        return f"--longctx-{self.name}"

    @property
    def dest(self) -> str:
        return "longctx_" + self.name.replace("-", "_")


OPTIONS = (
    Option("model", "the model to gate: hub id, local folder, .gguf file or alias; without it the plugin does nothing", ini=False),
    Option("data", "benchmark data: 'builtin' (default), a local folder in the HF layout, or a hub id", "builtin"),
    Option("sets", "configs to gate, comma-separated (default: all)", kind="csv"),
    Option("lengths", "lengths to gate, comma-separated, e.g. 2k,8k (default: all in the data)", kind="csv"),
    Option("limit", "the first N items of each config and length", kind="int"),
    Option("mode", "tokenization: auto, ids or text", "auto"),
    Option("baseline", "the baseline file (scores of the original model), e.g. baselines/my-model.json.gz"),
    Option("update-baseline", "score the model as the reference and (re)write --longctx-baseline", False, ini=False, kind="flag"),
    Option("narrow-baseline", "with --longctx-update-baseline: let the new baseline hold fewer items, lengths or configs "
           "than the one it replaces (refused by default)", False, ini=False, kind="flag"),
    Option("out", "write the results JSON here", ini=False),
    Option("only", "run only the gate's tests (deselect the others collected)", False, ini=False, kind="flag"),
    Option("allow-beyond-context", "score texts longer than the model's context window (refused by default)", False,
           ini=False, kind="flag"),
    # reports (reports/files.py)
    Option("markdown", "write the markdown summary here (also appended to $GITHUB_STEP_SUMMARY when set)", ini=False),
    Option("html", "write the HTML report here (one self-contained file)", ini=False),
    Option("dtype", "auto (float32 on CPU), float32, bfloat16, float16", "auto"),
    Option("device", "auto, cpu, cuda, cuda:N (under xdist, auto gives worker i GPU i)", "auto"),
    Option("trust-remote-code", "let a model that needs its own Python code (auto_map in its config) run it; refused by "
           "default", False, ini=False, kind="flag"),
    Option("backend", "'hf' (transformers), 'llama.cpp' (a .gguf file), 'vllm' (in process), 'vllm-server' (a running vLLM "
           "server) or module:factory", "hf"),
    Option("backend-option", "a setting of the backend, KEY=VALUE (llama.cpp: cache-type-k=q8_0, threads=4, …); repeatable",
           ini=False, kind="pairs"),
    Option("kv-press", "compress each read's context with a kvpress press in the transformers backend, NAME[:key=value,...] "
           "(snapkv:compression_ratio=0.5, streaming_llm:compression_ratio=0.75,n_sink=4, knorm, tova, expected_attention) or "
           "module:object; the baseline is the same model without it"),
    Option("cache-dir", "where answers of past forward passes are kept (default: the user cache; 'off' to disable)"),
    Option("max-drop", "facts and distant tool calls: largest allowed accuracy drop below the baseline", 0.05, kind="float"),
    Option("min-retained", "rules: lowest allowed retained effect in every cell", 0.90, kind="float"),
    Option("min-follow", "rules: lowest allowed share followed per length (system prompt)", 0.90, kind="float"),
    Option("item-max-drop", "one item: largest allowed mean loss against the baseline, in nats", 1.0, kind="float"),
    Option("max-kl", "facts and tool calls: largest allowed mean KL_K at far reads against the baseline's most likely "
           "tokens, in nats (drift)", 0.05, kind="float"),
    Option("alpha", "fail a row or cell only when its shortfall beyond the threshold is significant at this level "
           "(one-sided paired bootstrap over items, e.g. 0.05); default: the point estimate decides", kind="level"),
    Option("min-effect", "rules: the baseline's rule effect a target needs to be counted, in nats", 1.0, kind="float"),
    Option("threshold", "per row, cell or item: PATTERN:METRIC=VALUE (METRIC: drop, retained, follow, item_drop, kl; "
           "compressor gate: retention, savings, drop); repeatable", kind="lines"),
    # the compressor gate (compress/run.py)
    Option("compressor", "gate a context compressor, module:function or a built-in (last_tokens, last_messages, "
           "message_relevance, sentence_relevance, selective_context, identity); --longctx-model adds Layer B", ini=False),
    Option("knob", "a keyword knob of the compressor, NAME=VALUE (e.g. ratio=0.5); repeatable", ini=False, kind="pairs"),
    Option("min-retention-verbatim", "compressor gate: lowest allowed share of facts kept, verbatim probes", 1.0, kind="float"),
    Option("min-retention-paraphrase", "compressor gate: lowest allowed share of facts kept, paraphrase probes", 0.95,
           kind="float"),
)
BY_NAME = {option.name: option for option in OPTIONS}
CHOICES = {"mode": ("auto", "ids", "text"), "dtype": ("auto", "float32", "bfloat16", "float16")}
# the option that sets each field of ``Thresholds``, in the fields' order; the ``longctx`` subcommands that judge
# (compare, blame) take the same options (``subcommand_flag``), and a failing gate's blame command writes them so
THRESHOLD_OPTIONS = {"drop": "max-drop", "retained": "min-retained", "follow": "min-follow", "item_drop": "item-max-drop",
                     "kl": "max-kl", "overrides": "threshold", "alpha": "alpha", "min_effect": "min-effect"}


def subcommand_flag(name: str) -> str:
    """The plugin's option ``name`` as the ``longctx`` subcommands spell it: ``--longctx-max-kl`` is ``--max-kl``."""
    return f"--{name}"


def add_options(parser: Any) -> None:
    group = parser.getgroup("longctx", "long-context regression gate (pytest-longctx)")
    for option in OPTIONS:
        kwargs: dict[str, Any] = {"dest": option.dest, "help": option.help}
        if option.kind == "flag":
            kwargs["action"] = "store_true"
        elif option.kind == "lines":
            kwargs.update(action="append", metavar="PATTERN:METRIC=VALUE")
        elif option.kind == "pairs":
            kwargs.update(action="append", metavar="NAME=VALUE")
        group.addoption(option.flag, **kwargs)
        if option.ini:
            parser.addini(option.dest, option.help, type="linelist" if option.kind == "lines" else "string")


@dataclass(frozen=True)
class GateOptions:
    """The plugin's options, validated: what to gate, on which data, against which baseline, how
    strictly."""

    model: str | None
    data: str
    sets: list[str] | None
    lengths: list[str] | None
    limit: int | None
    mode: str
    baseline: str | None
    update_baseline: bool
    out: str | None
    only: bool
    dtype: str
    device: str
    backend: str
    cache_dir: str | None
    thresholds: Thresholds
    markdown: str | None = None  # reports (reports/files.py)
    html: str | None = None
    compressor: str | None = None  # the compressor gate (compress/run.py)
    knobs: tuple[str, ...] = ()
    allow_beyond_context: bool = False
    min_retention_verbatim: float = 1.0
    min_retention_paraphrase: float = 0.95
    backend_options: tuple[str, ...] = ()  # --longctx-backend-option KEY=VALUE
    kv_press: str | None = None  # --longctx-kv-press NAME[:key=value,...]
    trust_remote_code: bool = False  # --longctx-trust-remote-code: a model's own code may run
    narrow_baseline: bool = False  # an update may drop what the old baseline holds

    def data_args(self) -> list[str]:
        """The command-line options that select the data, to repeat in a hint."""
        args = []
        if self.data != "builtin":
            args.append(f"--longctx-data {self.data}")
        for name, value in (("sets", self.sets), ("lengths", self.lengths)):
            if value:
                args.append(f"--longctx-{name} {','.join(value)}")
        if self.limit:
            args.append(f"--longctx-limit {self.limit}")
        if self.mode != "auto":
            args.append(f"--longctx-mode {self.mode}")
        return args


def _convert(option: Option, raw: Any) -> Any:
    if option.kind == "pairs":
        return tuple(raw)
    if option.kind == "csv":
        return comma_list(str(raw))
    if option.kind == "int":
        return at_least_one(raw)
    if option.kind == "float":
        return finite_nonnegative(raw)
    if option.kind == "level":
        return significance_level(raw)
    if option.name in CHOICES and raw not in CHOICES[option.name]:
        raise ValueError(f"expected one of {', '.join(CHOICES[option.name])}")
    return raw


def read_options(getoption: Callable[[str], Any], getini: Callable[[str], Any], inipath: Any) -> GateOptions:
    """Each value from the command line, else the ini file, else the default."""
    values: dict[str, Any] = {}
    overrides: list[Override] = []
    for option in OPTIONS:
        raw, source = getoption(option.dest), "on the command line"
        if option.kind == "lines":
            if option.ini:
                overrides.extend(parse_overrides(getini(option.dest) or [], f"ini option {option.dest} in {inipath}",
                                                 strict=False))
            overrides.extend(parse_overrides(raw or [], f"{option.flag} on the command line"))
            continue
        if raw is None and option.ini and getini(option.dest) not in (None, ""):
            raw, source = getini(option.dest), f"from ini option {option.dest} in {inipath}"
        if raw is None or raw is False:
            values[option.dest] = option.default
            continue
        try:
            values[option.dest] = _convert(option, raw)
        except ValueError as exc:
            raise LongctxError(f"{option.flag} {raw!r} ({source}): {exc}") from None
    if values["longctx_knob"] and not values["longctx_compressor"]:
        raise LongctxError(f"--longctx-knob {' '.join(values['longctx_knob'])}: knobs set a context compressor's "
                           "parameters; name the compressor with --longctx-compressor")
    if values["longctx_narrow_baseline"] and not values["longctx_update_baseline"]:
        raise LongctxError("--longctx-narrow-baseline: it lets an update drop items of the baseline it replaces; "
                           "give it with --longctx-update-baseline, or leave it out")
    return GateOptions(
        model=values["longctx_model"], data=values["longctx_data"], sets=values["longctx_sets"],
        lengths=values["longctx_lengths"], limit=values["longctx_limit"], mode=values["longctx_mode"],
        baseline=values["longctx_baseline"], update_baseline=bool(values["longctx_update_baseline"]),
        narrow_baseline=bool(values["longctx_narrow_baseline"]),
        out=values["longctx_out"], only=bool(values["longctx_only"]),
        allow_beyond_context=bool(values["longctx_allow_beyond_context"]), dtype=values["longctx_dtype"], device=values["longctx_device"],
        backend=values["longctx_backend"], backend_options=values["longctx_backend_option"] or (),
        trust_remote_code=bool(values["longctx_trust_remote_code"]), kv_press=values["longctx_kv_press"],
        cache_dir=values["longctx_cache_dir"],
        thresholds=Thresholds(**{field: values[BY_NAME[name].dest] for field, name in THRESHOLD_OPTIONS.items()
                                 if field != "overrides"}, overrides=tuple(overrides)),
        markdown=values["longctx_markdown"], html=values["longctx_html"],
        compressor=values["longctx_compressor"], knobs=values["longctx_knob"] or (),
        min_retention_verbatim=values["longctx_min_retention_verbatim"],
        min_retention_paraphrase=values["longctx_min_retention_paraphrase"],
    )
