"""What was judged: one record of the model as its backend ran it (weights, its config and runtime settings,
quantization as loaded, KV cache, press, dtype, device, libraries), kept in every scores file, baseline and results JSON
as ``meta["judged"]``, and the one comparison of a baseline's record with a candidate's
(docs/baselines.md#what-was-judged)."""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

from pytest_longctx.errors import without_credentials

# KV cache types that keep keys and values in full precision: llama.cpp's (k=f16 v=f16), vLLM's ``auto``
FULL_PRECISION_CACHE = {"", "auto", "f32", "f16", "bf16", "float32", "float16", "bfloat16"}
# a GGUF file's types whose weights are floats, not quantized (llama.cpp's file type names)
FLOAT_FILES = {"F32", "F16", "BF16", "ALL_F32", "MOSTLY_F16", "MOSTLY_BF16"}
LLAMA_CPP = "LlamaCppBackend"
# what may differ between a baseline and a run and leave the numbers comparable: said once, as a warning
ADVISORY = ("dtype", "device", "versions", "chunk_size", "backend")


def _kv_cache(text: str) -> str:
    """A KV cache as the record names it: empty for one in full precision (``k=f16 v=f16``, ``auto``)."""
    types = re.findall(r"[kv]=(\S+)", text) or [text]
    return "" if all(t.strip().lower() in FULL_PRECISION_CACHE for t in types) else text


def _quantization(meta: dict[str, Any]) -> str:
    stated = str(meta.get("quantization") or "")
    if stated and stated != "none" and not stated.startswith("none:"):
        return stated
    dtype = str(meta.get("dtype") or "")
    if meta.get("backend") == LLAMA_CPP and dtype and dtype.upper() not in FLOAT_FILES:
        return f"GGUF {dtype}"  # llama.cpp names a file's quantization as its file type
    return ""


@dataclass(frozen=True)
class Judged:
    """The model as its backend ran it: what a scores file's numbers were read from."""

    model: str
    backend: str
    weights: str | None  # a fingerprint of the weights' bits; None where the backend cannot know them (a server)
    # a digest of the model's config and the backend's settings that change its numbers (a sliding window, rope
    # scaling, the attention kernel, a server's settings): the same weights under another config compute another model
    config: str | None = None
    config_keys: dict[str, str] = field(default_factory=dict)  # a short digest of each key the config digest covers
    quantization: str = ""  # as loaded: what the library did to the modules; empty for none
    kv_cache: str = ""  # a KV cache in less than full precision; empty for the model's own
    press: str = ""  # a KV-cache press compressing each context; empty for none
    dtype: str = ""
    device: str = ""
    versions: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_meta(cls, meta: dict[str, Any], name: str = "") -> Judged:
        """The record a file's meta holds (``judged``), or the one its backend's own keys give (older files);
        ``name``: the model's name where the meta has none."""
        stored = meta.get("judged")
        if isinstance(stored, dict):
            known = {key: stored[key] for key in cls.__dataclass_fields__ if key in stored}
            return cls(**{"model": without_credentials(name), "backend": "", "weights": None, "config": meta.get("config"),
                          **known})
        versions = meta.get("versions")
        return cls(model=without_credentials(str(meta.get("model") or name)), backend=str(meta.get("backend") or ""),
                   weights=meta.get("weights"), config=meta.get("config"), quantization=_quantization(meta),
                   config_keys={str(k): str(v) for k, v in meta["config_keys"].items()}
                   if isinstance(meta.get("config_keys"), dict) else {},
                   kv_cache=_kv_cache(str(meta.get("kv_cache") or "")), press=str(meta.get("kv_press") or ""),
                   dtype=str(meta.get("dtype") or ""), device=str(meta.get("device") or ""),
                   versions={str(k): str(v) for k, v in versions.items()} if isinstance(versions, dict) else {})

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "compressed": self.compressions()}

    def compressions(self) -> list[str]:
        """What compresses the model as it ran: its quantization, its KV cache, its press; empty for none."""
        return [what for what in (self.quantization, self.kv_cache and f"KV cache {self.kv_cache.removeprefix('quantized KV cache ')}",
                                  self.press and f"KV-cache press {self.press}") if what]

    def describe(self) -> str:
        """``smollm2-135m (torchao int8 weight-only; KV cache fp8), float32 on cpu``: the same words in every report."""
        compressed = self.compressions()
        how = " ".join(filter(None, (self.dtype, f"on {self.device}" if self.device else "")))
        return (f"{self.model or 'an unnamed model'}" + (f" ({'; '.join(compressed)})" if compressed else "")
                + (f", {how}" if how else ""))

    def same_weights(self, other: Judged) -> bool:
        """The same weights' bits, compressed alike (whatever their config)."""
        return (self.weights is not None and self.weights == other.weights
                and self.compressions() == other.compressions())

    def same_setup(self, other: Judged) -> bool:
        """The same weights, compressed alike, under the same config and settings: a gate of one against the other
        compares a model with itself."""
        return self.same_weights(other) and self.config == other.config


@dataclass(frozen=True)
class Against:
    """A candidate's record against its baseline's: what a report says of the two."""

    warnings: list[str]  # what the user must know to read the verdict right
    note: str  # how the candidate stands to the baseline, for the reports' headers; empty when it is a compression of it


def compare_judged(baseline: dict[str, Any], candidate: dict[str, Any], side: str = "baseline") -> Against:
    """The one comparison of what a baseline was made from (its meta) with what a run judged: a baseline
    made under compression, a candidate that is the baseline's own model and setup, and the settings
    that differ without making the numbers incomparable (backend, dtype, device, versions). ``side``: how the
    lines name the file compared with (``longctx score`` calls it the reference, blame the original's baseline)."""
    theirs, mine = Judged.from_meta(baseline), Judged.from_meta(candidate)
    warnings = []
    if theirs.compressions():
        now = "; ".join(mine.compressions()) or "uncompressed"
        warnings.append(f"the {side} was itself made under compression ({'; '.join(theirs.compressions())}): the candidate "
                        f"({now}) is judged against a compressed reference, not the original model; make the {side} "
                        "from the uncompressed model unless this is meant")
    warnings += [f"the {side} differs in {d}" for d in advisory_differences(baseline, candidate)]
    if theirs.dtype != mine.dtype and all(baseline.get(k) == candidate.get(k) for k in ("model", "config")):
        warnings.append(f"the {side} is this model in {theirs.dtype}, this run in {mine.dtype}: a dtype change alone drifts by "
                        f"rounding (docs/performance.md#dtypes); make the {side} in the candidate's dtype (--longctx-dtype, --dtype) "
                        "to gate the model, not the rounding")
    if mine.same_setup(theirs):
        note = "the baseline's own model and setup (the same weights, compressed alike): it is compared with itself"
    elif mine.same_weights(theirs):
        note = config_change(baseline, candidate, side)
    elif (None not in (mine.weights, theirs.weights) and mine.weights != theirs.weights
          and not mine.compressions() and not theirs.compressions()):
        note = "its weights differ from the baseline's bit for bit, though neither loads a quantization"
    else:
        note = ""
    return Against(warnings, note)


def config_change(baseline: dict[str, Any], candidate: dict[str, Any], side: str = "baseline") -> str:
    """Where a candidate is the ``side``'s own weights (compressed alike) under another config, the one way every report
    and blame say so: both config digests, and the keys that differ where both records name them; else empty."""
    theirs, mine = Judged.from_meta(baseline), Judged.from_meta(candidate)
    if not mine.same_weights(theirs) or mine.config == theirs.config:
        return ""
    keys = (sorted(k for k in theirs.config_keys.keys() | mine.config_keys.keys()
                   if theirs.config_keys.get(k) != mine.config_keys.get(k)) if theirs.config_keys and mine.config_keys else [])
    return (f"the {side}'s own weights under another config: the model's config or the backend's settings differ (config "
            f"digest {(mine.config or 'unknown')[:8]} here, {(theirs.config or 'unknown')[:8]} there"
            + (f"; the keys that differ: {', '.join(keys)})" if keys else ")"))


def header(candidate: dict[str, Any], baseline: dict[str, Any] | None, against: str, name: str = "") -> str:
    """What every report's header says of the two sides: ``smollm2-135m (torchao int8 weight-only), float32 on
    cpu against baseline B: smollm2-135m (uncompressed), float32 on cpu``; ``against`` names the baseline (its
    path, or "itself"), ``name`` the candidate where its meta has none."""
    said = f"{Judged.from_meta(candidate, name).describe() if candidate else without_credentials(name)} against {against}"
    if baseline is None:
        return said
    note = compare_judged(baseline, candidate).note
    return f"{said}: {Judged.from_meta(baseline).describe()}" + (f" ({note})" if note else "")


def made_by(meta: dict[str, Any]) -> str:
    """The backend that made a scores file and its libraries' versions: ``VllmBackend (vllm 0.32.0)``."""
    versions = meta.get("versions") if isinstance(meta.get("versions"), dict) else {}
    named = ", ".join(f"{k} {v}" for k, v in versions.items())
    return f"{meta.get('backend') or 'an unnamed backend'}" + (f" ({named})" if named else "")


def advisory_differences(reference_meta: dict[str, Any], meta: dict[str, Any]) -> list[str]:
    """Differences that leave the numbers comparable but are worth a warning. Another backend
    (the original in transformers, the shipped artifact in vLLM or llama.cpp) is said once,
    with both sides' versions, instead of every setting the two backends name differently."""
    if reference_meta.get("backend") != meta.get("backend"):
        return [f"backend: made by {made_by(reference_meta)} there, read by {made_by(meta)} here"] + \
            [f"{key}: {reference_meta.get(key)} there, {meta.get(key)} here"
             for key in ("dtype",) if reference_meta.get(key) != meta.get(key)]
    found = [f"{key}: {reference_meta.get(key)} there, {meta.get(key)} here"
             for key in ADVISORY if key != "versions" and reference_meta.get(key) != meta.get(key)]
    theirs, mine = (m.get("versions") if isinstance(m.get("versions"), dict) else {} for m in (reference_meta, meta))
    # a library only one side uses (torchao for a candidate it quantized) is what it is judged with, not a difference
    changed = {name: (theirs[name], mine[name]) for name in theirs.keys() & mine.keys() if theirs[name] != mine[name]}
    if changed:
        found.append("versions: " + ", ".join(f"{name} {old} there, {new} here" for name, (old, new) in sorted(changed.items())))
    return found
