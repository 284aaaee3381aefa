"""``longctx ladder``: several candidates gated against one baseline from the command line. It is the plugin's ladder,
run by pytest in this folder (``pytest --longctx-only --longctx-model A --longctx-model B ...``), so it takes the
plugin's own options as pytest spells them (``--longctx-baseline``, ``--longctx-out``, ...), reads the same ini file,
refuses what the plugin refuses, and ends with pytest's exit status: 0 when every candidate passes, 1 when one fails."""
from __future__ import annotations

import argparse

import pytest

from pytest_longctx.errors import LongctxError
from pytest_longctx.options.table import PYTEST, taken_by


def pytest_words(args: argparse.Namespace) -> list[str]:
    """The pytest command line the ladder runs: ``--longctx-only``, each candidate, and every plugin option given, in the
    one-word form (``--longctx-baseline=PATH``: pytest takes no root folder from it)."""
    models = [*args.models, *(args.longctx_model or [])]
    if len(models) < 2:
        raise LongctxError(f"longctx ladder {' '.join(models)}: give two candidates or more; one candidate is a gate of "
                           "its own: pytest --longctx-model MODEL")
    words = ["--longctx-only", *(f"--longctx-model={model}" for model in models)]
    for option in taken_by(PYTEST):
        given = getattr(args, option.plugin_dest)
        if option.name in ("model", "only") or given in (None, False):  # the two it always gives
            continue
        if option.value is None:
            words.append(option.plugin_flag)
        else:
            words += [f"{option.plugin_flag}={value}" for value in (given if option.repeat else [given])]
    return words


def run(args: argparse.Namespace) -> int:
    return int(pytest.main(pytest_words(args)))
