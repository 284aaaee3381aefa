"""What a model gate run judges against, loaded and checked before any model is (``GateInputs``): the selected
data, the baseline (or why there is none), each item's fingerprint, the configs left out, and every file the run
was checked against the ones it reads by the front end (``GateOptions.files``)."""
from __future__ import annotations

from pathlib import Path

from pytest_longctx.backends.aliases import is_model_name
from pytest_longctx.data.load import Dataset, load_dataset
from pytest_longctx.data.records import ItemKey
from pytest_longctx.errors import LongctxError, without_credentials
from pytest_longctx.gate.run_options import GateOptions
from pytest_longctx.scoring.fingerprint import item_fingerprint
from pytest_longctx.scoring.scores_file import ScoresFile, UnknownLoss, check_coverage, dropped_items, load_scores


class GateInputs:
    """The data and the baseline of one gate run (see the module docstring)."""

    def __init__(self, options: GateOptions, invocation_dir: Path):
        self.options = options
        # the baseline comes first: one that is missing or cannot be read is said before any data is built
        self.baseline_path = options.baseline_file(invocation_dir)
        if options.update_baseline and self.baseline_path is None and options.shard is None:
            raise LongctxError("--longctx-update-baseline: also give the file to write, --longctx-baseline PATH "
                               "(e.g. baselines/my-model.json.gz)")
        # a file there that cannot be read is refused now, not once the scoring is done (a shard of an update may name
        # none: longctx merge --baseline writes the baseline)
        if options.update_baseline and self.baseline_path is not None:
            try:
                dropped_items(self.baseline_path, lambda key: True)
            except UnknownLoss as exc:
                raise LongctxError(f"--longctx-update-baseline: baseline {exc}") from None
        self.baseline: ScoresFile | None = None
        self.missing_baseline: str | None = None
        if not options.update_baseline:
            if self.baseline_path is None or not self.baseline_path.exists():
                self.missing_baseline = self._missing_baseline_message()
            else:
                self.baseline = load_scores(self.baseline_path, "baseline")
        # without a baseline the one test says how to make it: no data is built for it
        self.dataset = (load_dataset(options.data, options.sets, options.lengths, options.limit) if not self.missing_baseline
                        else Dataset(str(options.data)))
        self.warnings = self._leave_out_configs_without_baseline()
        if self.baseline is not None and not self.baseline.has_drift:
            self.warnings.append(f"baseline {self.baseline_path} keeps no most likely tokens (made before drift rows, or by a "
                                 "backend without top_k), so there are no drift rows; recreate it (--longctx-update-baseline) "
                                 "to compare distributions at every read")
        self.fingerprints: dict[ItemKey, str] = {(c, n, item.id): item_fingerprint(item) for c, n, item in self.dataset.items()}
        if self.baseline is not None:  # before any model is loaded: a baseline of a narrower selection, or stale
            check_coverage(self.baseline, self.fingerprints, "baseline")

    def _leave_out_configs_without_baseline(self) -> list[str]:
        """Without --longctx-sets, a config the baseline has no scores for at all (a baseline made before the
        config existed, e.g. faithfulness) is left out with a warning."""
        if self.baseline is None or self.options.sets:
            return []
        lacking = [c for c in self.dataset.configs if c not in self.baseline.scores]
        for config in lacking:
            del self.dataset.configs[config]
        return [f"config {config}: it has none of its scores, so {config} is not gated; recreate the baseline "
                "(--longctx-update-baseline) to gate it" for config in lacking]

    def _missing_baseline_message(self) -> str:
        path = self.options.baseline or "baselines/<original-model>.json.gz"
        # a local path in the hint would be copied into CI, where it names nothing: name the
        # model as given only when it is an id or alias
        named = is_model_name(str(self.options.model))
        model = self.options.model if named else "<original-model-id-or-alias>"
        command = " ".join(["pytest", f"--longctx-model {model}", f"--longctx-baseline {path}",
                            "--longctx-update-baseline", *self.options.data_args()])
        where = (
            f"baseline {self.baseline_path} does not exist"
            if self.baseline_path
            else "no baseline given (--longctx-baseline or ini longctx_baseline)"
        )
        return (
            f"{where}; create it from the original (uncompressed) model, then commit it: {command} "
            + ("(put the original model's id in --longctx-model if this one is a compressed candidate)" if named else
               f"(in --longctx-model put the original model's hub id or alias, not a local path like "
               f"{without_credentials(str(self.options.model))})")
        )

    def keys(self, config: str, length: str | None = None) -> frozenset[ItemKey]:
        """The items of a config (of one length)."""
        return frozenset(k for k in self.fingerprints if k[0] == config and length in (None, k[1]))
