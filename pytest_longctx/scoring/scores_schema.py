"""What a scores file's body holds, field by field (docs/metrics.md#files): each field of the type the format gives
it, or ``Malformed`` naming the item and field and what is there. ``scores_file.checked_body`` turns that into the
one line that names the file and what to do."""
from __future__ import annotations

from typing import Any

from pytest_longctx.data.records import RULES_CONFIGS

_JSON_TYPES = ((bool, "true/false"), (str, "a string"), (int, "a number"), (float, "a number"), (list, "a list"),
               (dict, "an object"), (type(None), "null"))


def _kind(value: Any) -> str:
    return next(name for t, name in _JSON_TYPES if isinstance(value, t))


def _number(value: Any) -> bool:
    """A number, or null (how a non-finite one is stored)."""
    return value is None or (isinstance(value, (int, float)) and not isinstance(value, bool))


class Malformed(Exception):
    """Where a body is not what a scores file holds, and what is found there."""


def _expect(value: Any, wanted: type, where: str, what: str) -> Any:
    if not isinstance(value, wanted) or (wanted is int and isinstance(value, bool)):
        raise Malformed(f"{where}: {_kind(value)}, not {what}")
    return value


def _record(config: str, record: Any, where: str) -> None:
    """One target's or control read's record (metrics/raw.py), the kind its config has."""
    _expect(record, dict, where, "an object")
    if "unaligned" in record:
        _expect(record["unaligned"], str, f"{where} 'unaligned'", "a string (why it could not be scored)")
        return
    names = ("score_without", "score_with") if config in RULES_CONFIGS else ("hits", "logprobs")
    for name in names:
        if name not in record:
            raise Malformed(f"{where}: no {name!r}")
    if config in RULES_CONFIGS:
        for name in names:
            if not _number(record[name]):
                raise Malformed(f"{where} {name!r}: {_kind(record[name])}, not a number")
        return
    hits = _expect(record["hits"], list, f"{where} 'hits'", "a list")
    logprobs = _expect(record["logprobs"], list, f"{where} 'logprobs'", "a list")
    if len(hits) != len(logprobs):
        raise Malformed(f"{where}: {len(hits)} 'hits' for {len(logprobs)} 'logprobs'")
    for n, (hit, value) in enumerate(zip(hits, logprobs)):
        _expect(hit, bool, f"{where} 'hits'[{n}]", "true/false")
        if not _number(value):
            raise Malformed(f"{where} 'logprobs'[{n}]: {_kind(value)}, not a number")


def _item(config: str, item: Any, where: str) -> None:
    _expect(item, dict, where, "an object")
    for name in ("fingerprint", "targets"):
        if name not in item:
            raise Malformed(f"{where}: no {name!r}")
    _expect(item["fingerprint"], str, f"{where} 'fingerprint'", "a string")
    for name in ("targets", "controls"):
        for n, record in enumerate(_expect(item.get(name, []), list, f"{where} {name!r}", "a list")):
            _record(config, record, f"{where} {name}[{n}]")
    if item.get("drift") is not None:
        _expect(item["drift"], dict, f"{where} 'drift'", "an object")


def check_body(body: dict[str, Any], scores_file: bool) -> None:
    """Malformed where ``body`` (a scores file's when ``scores_file``, else a results JSON's, whose ``scores`` are
    optional) holds a field of another type than the format gives it."""
    for name in ("mode", "meta", "scores"):
        if name not in body and (name != "scores" or scores_file):
            raise Malformed(f"no {name!r}")
    _expect(body["mode"], str, "'mode'", "a string")
    for key, value in _expect(body["meta"], dict, "'meta'", "an object").items():
        if key in ("model", "backend", "tokenizer", "mode", "data", "data_source") and not isinstance(value, (str, type(None))):
            raise Malformed(f"'meta' {key!r}: {_kind(value)}, not a string")
    for config, by_length in _expect(body.get("scores", {}), dict, "'scores'", "an object").items():
        for length, by_item in _expect(by_length, dict, f"'scores' {config}", "an object").items():
            for item_id, item in _expect(by_item, dict, f"'scores' {config}/{length}", "an object").items():
                _item(config, item, f"{config}/{length}/{item_id}")
    if body.get("rows") is not None:
        for name, value in _expect(body["rows"], dict, "'rows'", "an object").items():
            if not _number(value):
                raise Malformed(f"'rows' {name!r}: {_kind(value)}, not a number")
    if body.get("sets") is not None:
        for config, by_length in _expect(body["sets"], dict, "'sets'", "an object").items():
            for length, metrics in _expect(by_length, dict, f"'sets' {config}", "an object").items():
                if "per_item" not in _expect(metrics, dict, f"'sets' {config}/{length}", "an object"):
                    raise Malformed(f"'sets' {config}/{length}: no 'per_item'")
                _expect(metrics["per_item"], dict, f"'sets' {config}/{length} 'per_item'", "an object")
