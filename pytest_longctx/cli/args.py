"""What several ``longctx`` subcommands read from their arguments the same way. The arguments
themselves are declared in options/table.py and made by ``options.fronts.add_command_arguments``."""
from __future__ import annotations

import argparse

from pytest_longctx.gate.thresholds import Thresholds, parse_overrides
from pytest_longctx.options.keys import split_settings
from pytest_longctx.options.table import THRESHOLD_FIELDS


def loaded(args: argparse.Namespace) -> list[tuple[str, str | None]]:
    """What a command reads the model from, as (flag, value): its model, data, tokenizer and score cache, each a name,
    an id, a URL, or a file or folder here (``paths.local_files`` keeps those)."""
    settings = split_settings("--backend-option", getattr(args, "backend_option", None) or [], "KEY=VALUE")
    return [("--model", getattr(args, "model", None)), ("--data", getattr(args, "data", None)),
            ("--backend-option tokenizer", settings.get("tokenizer")), ("--cache-dir", getattr(args, "cache_dir", None))]


def thresholds_of(args: argparse.Namespace) -> Thresholds:
    """The ``Thresholds`` the threshold options give (each option's dest is its field); a malformed
    --threshold is one line."""
    values = {name: getattr(args, name) for name in THRESHOLD_FIELDS}
    return Thresholds(**{**values, "overrides": parse_overrides(values["overrides"], THRESHOLD_FIELDS["overrides"].flag)})
