"""The plugin's options, read from the declared table (options/table.py) and validated into
``GateOptions``: what to gate, on which data, against which baseline, how strictly."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from pytest_longctx.backends.builtin import check_backend_settings
from pytest_longctx.errors import LongctxError
from pytest_longctx.gate.thresholds import Thresholds, parse_overrides
from pytest_longctx.options.fronts import Given, read_plugin_options
from pytest_longctx.options.keys import split_settings
from pytest_longctx.options.table import THRESHOLD_FIELDS, LadderOrder, Sequential, plugin_option
from pytest_longctx.parse import Shard
from pytest_longctx.paths import local_files
from pytest_longctx.shipped_baselines import baseline_file

Files = list[tuple[str, "str | Path | None"]]  # (option, path) of what a run writes or reads; None: not asked for


@dataclass(frozen=True)
class GateOptions:
    """The plugin's options, validated: what to gate, on which data, against which baseline, how
    strictly."""

    model: str | None  # the model this run judges (a ladder's first candidate until each rung's own options are made)
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
    markdown: str | None = None  # reports (reports/finish.py)
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
    sequential: Sequential = Sequential.EXACT  # --longctx-sequential: read until each verdict is settled (gate/sequential/)
    shard: Shard | None = None  # --longctx-shard K/N: read this part of the selection for longctx merge (gate/shards.py)
    candidates: tuple[str, ...] = ()  # --longctx-model given several times: a ladder's candidates (gate/ladder_run.py)
    ladder_order: LadderOrder = LadderOrder.DIGEST  # --longctx-ladder-order: how its candidates after the first read

    blame_reference: str | None = None  # --longctx-blame-reference: the original a failing gate's blame loads

    def baseline_file(self, here: Path) -> Path | None:
        """The baseline file (a path relative to ``here``, the folder pytest runs in, or a shipped baseline's
        name); None without one."""
        return baseline_file(self.baseline, here, "--longctx-baseline", self.update_baseline) if self.baseline else None

    def files(self, here: Path) -> tuple[Files, Files]:
        """(what the run writes, what it reads), each as (option, path), for the one check of the two against each
        other (paths.check_outputs) before anything is read: the reports, and the baseline when it is updated; the
        baseline otherwise, and the data, the model, its tokenizer, blame's original and the score cache where they are
        files or folders here (a hub id, an alias or a URL is none)."""
        file = self.baseline_file(here)
        # as given where it is a path here (compared at the start, in the folder pytest runs in); else the shipped file
        baseline = [("--longctx-baseline", self.baseline if file == here / str(self.baseline) else file)] if file else []
        written: Files = [("--longctx-out", self.out), ("--longctx-markdown", self.markdown), ("--longctx-html", self.html)]
        settings = split_settings("--longctx-backend-option", self.backend_options, "KEY=VALUE")
        models = [("--longctx-model", model) for model in self.candidates or (self.model,)]
        local = [("--longctx-data", self.data), *models, ("--longctx-blame-reference", self.blame_reference),
                 ("--longctx-backend-option tokenizer", settings.get("tokenizer")), ("--longctx-cache-dir", self.cache_dir)]
        read: Files = local_files(local, here)
        return (baseline + written, read) if self.update_baseline else (written, read + baseline)

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


def read_options(getoption: Callable[[str], Any], getini: Callable[[str], Any], inipath: Any) -> GateOptions:
    """The plugin's options (options/table.py), each from the command line, else the ini file, else
    its default; every KEY=VALUE inside one checked by its owner's table before anything is loaded."""
    values = read_plugin_options(getoption, getini, inipath)
    if values["knob"] and not values["compressor"]:
        raise LongctxError(f"--longctx-knob {' '.join(values['knob'])}: knobs set a context compressor's "
                           "parameters; name the compressor with --longctx-compressor")
    if values["narrow-baseline"] and not values["update-baseline"]:
        raise LongctxError("--longctx-narrow-baseline: it lets an update drop items of the baseline it replaces; "
                           "give it with --longctx-update-baseline, or leave it out")
    models = _models(values["model"], values["update-baseline"], values["compressor"], values["blame"])
    check_backend_settings(values["backend"], values["backend-option"], "--longctx-backend-option")
    sequential = _sequential(values, values["update-baseline"], bool(values["compressor"]))
    _check_shard(values)
    threshold = plugin_option("threshold")
    overrides = (*parse_overrides(getini(threshold.plugin_dest) or [], f"ini option {threshold.plugin_dest} in {inipath}",
                                  strict=False),
                 *parse_overrides(getoption(threshold.plugin_dest) or [], f"{threshold.plugin_flag} on the command line"))
    return GateOptions(
        model=models[0] if models else None, candidates=models if len(models) > 1 else (), data=values["data"],
        sets=values["sets"], lengths=values["lengths"], limit=values["limit"],
        mode=values["mode"], baseline=values["baseline"], update_baseline=values["update-baseline"],
        narrow_baseline=values["narrow-baseline"], out=values["out"], only=values["only"],
        allow_beyond_context=values["allow-beyond-context"], dtype=values["dtype"], device=values["device"],
        backend=values["backend"], backend_options=tuple(values["backend-option"]),
        trust_remote_code=values["trust-remote-code"], kv_press=values["kv-press"], cache_dir=values["cache-dir"],
        thresholds=Thresholds(**{field: values[option.name] for field, option in THRESHOLD_FIELDS.items()
                                 if field != "overrides"}, overrides=overrides),
        markdown=values["markdown"], html=values["html"], compressor=values["compressor"], knobs=tuple(values["knob"]),
        min_retention_verbatim=values["min-retention-verbatim"], min_retention_paraphrase=values["min-retention-paraphrase"],
        sequential=sequential, blame_reference=values["blame-reference"], shard=values["shard"],
        ladder_order=_ladder_order(values["ladder-order"], models),
    )


def _models(given: list[str], update_baseline: bool, compressor: str | None, blame: bool) -> tuple[str, ...]:
    """--longctx-model, once or several times (a ladder of candidates against the one baseline); a ladder refuses
    what judges or writes for one model only."""
    twice = sorted({model for model in given if given.count(model) > 1})
    if twice:
        raise LongctxError(f"--longctx-model {twice[0]}: given {given.count(twice[0])} times; name each candidate of "
                           "the ladder once")
    if len(given) > 1:
        one_model = [(update_baseline, "--longctx-update-baseline: a baseline is made from one model, the original"),
                     (bool(compressor), "--longctx-compressor: the compressor gate reads with one model"),
                     (blame, "--longctx-blame: blames one failing candidate; run it on that candidate alone")]
        refused = next((why for given_too, why in one_model if given_too), None)
        if refused:
            raise LongctxError(f"{refused}; give --longctx-model once (given {len(given)} times: {', '.join(given)})")
    return tuple(given)


def _ladder_order(given: str | None, models: tuple[str, ...]) -> LadderOrder:
    """--longctx-ladder-order: digest unless given, and given for a ladder only."""
    if given and len(models) < 2:
        raise LongctxError(f"--longctx-ladder-order {given}: orders the reading of a ladder's candidates; give "
                           "--longctx-model once per candidate, or leave it out")
    return LadderOrder(given) if given else LadderOrder.DIGEST


def _check_shard(values: Given) -> None:
    """--longctx-shard K/N: a part of the model gate's selection, written to --longctx-out for longctx merge, which
    judges the whole selection and writes its reports."""
    shard = values["shard"]
    if shard is None:
        return
    flag = values.said("shard")
    if len(values["model"]) > 1:
        raise LongctxError(f"{flag}: a shard is a part of one model's run; give --longctx-model once (a ladder of "
                           f"{len(values['model'])} candidates is not split), and run each candidate's shards apart")
    if values["compressor"]:
        raise LongctxError(f"{flag}: it splits the model gate's items; the compressor gate (--longctx-compressor) "
                           "compresses every session in one run, leave it out")
    if not values["out"]:
        raise LongctxError(f"{flag}: give the file this part is written to, --longctx-out PATH (e.g. "
                           f"part-{shard.index}-of-{shard.count}.json); longctx merge joins the parts")
    for name in ("markdown", "html", "blame"):
        if values[name]:
            raise LongctxError(f"{flag}: --longctx-{name} is about the whole selection, which no shard holds: longctx "
                               f"merge PARTS writes it{f' (--{name} PATH)' if name != 'blame' else ''}; leave it out here")


def _sequential(values: Given, update_baseline: bool, compressor: bool) -> Sequential:
    """--longctx-sequential (or its ini option): exact unless given; a baseline update reads every item, so it takes
    off only, and the compressor gate compresses every session. A mode refused is named as it was given."""
    given = values["sequential"]
    if given in (None, Sequential.OFF):
        return Sequential.OFF if compressor or update_baseline else Sequential(given or Sequential.EXACT)
    where = ("; the ini file sets it for every run: give --longctx-sequential off on this command line"
             if "sequential" in values.ini else "; leave it out, or give off")
    if compressor:
        raise LongctxError(f"{values.said('sequential')}: how much the model gate reads; the compressor gate "
                           f"(--longctx-compressor) compresses every session{where}")
    if update_baseline:
        raise LongctxError(f"{values.said('sequential')}: a baseline update (--longctx-update-baseline) reads every item, "
                           f"so a baseline holds them all{where}")
    return Sequential(given)
