"""The declared options (options/table.py, options/backend_keys.py) are what the front ends take:
every ``--help`` renders; and, drawn at random from the table and from outside it, every command
line, plugin option set and ``KEY=VALUE`` setting ends either in one error line naming the option
(and the key), or with each value given arriving where it is read, parsed as its kind says:
never a traceback, never a value silently dropped or read as "not given"."""
from __future__ import annotations

import importlib
import math
import re
import subprocess
import sys
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_longctx.backends.builtin import BY_NAME, check_backend_settings
from pytest_longctx.errors import LongctxError, actual
from pytest_longctx.gate.run_options import read_options
from pytest_longctx.options.keys import KeyTable
from pytest_longctx.options.table import COMMANDS, PYTEST, Option, taken_by
from pytest_longctx.options.values import Value

cli_main = importlib.import_module("pytest_longctx.cli.main")  # the module; the package exports its main()
EXAMPLES = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# ------------------------------------------------------------------ --help


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_help_renders_with_every_declared_option(command, capsys):
    with pytest.raises(SystemExit) as done:
        cli_main.main([command, "--help"])
    assert done.value.code == 0
    shown = capsys.readouterr().out
    for option in taken_by(command):
        assert option.flag in shown, f"longctx {command} --help lacks {option.flag}"


def test_pytest_help_lists_every_plugin_option_and_ini_name():
    done = subprocess.run([sys.executable, "-m", "pytest", "--help", "-p", "no:cacheprovider"], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    for option in taken_by(PYTEST):
        assert option.plugin_flag in done.stdout
        if option.ini:
            assert option.plugin_dest in done.stdout


# ------------------------------------------------------------------ values drawn for an option

GARBAGE = st.one_of(st.just(""), st.just("  "), st.just(","), st.just("nan"), st.just("-1"), st.just("1.5"), st.just("1e999"),
                    st.just("2/3"), st.just("0/3"), st.just("4/3"), st.just("1/0"), st.just("a/b"),
                    st.text(min_size=1, max_size=8).filter(lambda t: "\x00" not in t))


def raw_values(value: Value) -> st.SearchStrategy[str]:
    """Texts for ``value``: ones it takes (its choices, numbers in and out of its range) and others."""
    fitting = (st.sampled_from(value.choices) if value.choices else
               st.integers(-3, 10**6).map(str) | st.floats(allow_nan=True, allow_infinity=True).map(repr) | st.just("2k,8k"))
    return fitting | GARBAGE


def _number(raw: str) -> float | None:
    try:
        return float(raw)
    except ValueError:
        return None


def _whole(raw: str) -> int | None:
    return int(raw) if re.fullmatch(r"\s*[+-]?\d+\s*", raw) else None


def _items(raw: str, sep: str) -> list[str] | None:
    found = [part.strip() for part in raw.split(sep) if part.strip()]
    return found or None


def independent(value: Value, raw: str) -> tuple[bool, object]:
    """(taken, the value): what the kind ``value.says`` means, worked out here without its parser."""
    if not raw.strip():
        return False, None  # blank is never a value, whatever the kind
    says, number, whole = value.says, _number(raw), _whole(raw)
    if value.choices:
        word = raw.strip().lower()
        return word in value.choices, word
    if says.startswith("a whole number >= "):
        least = int(says.rsplit(" ", 1)[1])
        return whole is not None and whole >= least, whole
    if says == "a whole number":
        return whole is not None, whole
    if says == "a finite number >= 0":
        return number is not None and math.isfinite(number) and number >= 0, number
    if says == "a number above 0":
        return number is not None and math.isfinite(number) and number > 0, number
    if says.startswith("a significance level"):
        return number is not None and 0 < number < 0.5, number
    if says == "true or false":
        return raw.strip().lower() in ("true", "false"), raw.strip().lower() == "true"
    if says in ("a comma-separated list", "a ';'-separated list"):
        items = _items(raw, "," if "comma" in says else ";")
        return items is not None, items
    if says == "a comma-separated list of lengths":  # as the data names a split: 2k, 2K and 2048 are 2k
        items = _items(raw, ",")
        tokens = [int(m[1]) * (1024 if m[2] else 1) for m in (re.fullmatch(r"(\d+)([kK]?)", i) for i in items or []) if m]
        if not items or len(tokens) != len(items):
            return False, None
        return True, [f"{t // 1024}k" if t and t % 1024 == 0 else str(t) for t in tokens]
    if says.startswith("K/N"):
        parts = [part.strip(" \t\n\r\f\v") for part in raw.split("/")]
        if len(parts) != 2 or not all(re.fullmatch("[0-9]+", part) for part in parts):
            return False, None
        index, count = int(parts[0]), int(parts[1])
        return 1 <= index <= count, (index, count)
    assert says in ("text", "a path", "a folder"), f"no independent reading of {says!r}: add one"
    return True, raw.strip()


def expected(value: Value, raw: str) -> tuple[bool, object]:
    """The independent reading, checked against the declared parser (the two must agree)."""
    taken, meant = independent(value, raw)
    try:
        parsed = value.parse(raw)
    except ValueError:
        assert not taken, f"{value.says}: {raw!r} refused, though it is one"
        return False, None
    # a text enters redacted where it is a URL with a secret (errors.entered): what it stands for is the text given
    held = actual(parsed) if isinstance(parsed, str) else parsed
    assert taken and same(held, meant), f"{value.says}: {raw!r} taken as {parsed!r}, meant {meant!r}"
    return True, parsed


def same(a: object, b: object) -> bool:
    if hasattr(a, "index") and hasattr(a, "count") and isinstance(b, tuple):  # a Shard, meant as (K, N)
        return (a.index, a.count) == b
    return a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))


# ------------------------------------------------------------------ the longctx commands


def _stubbed_runs(calls: list) -> dict:
    """Every subcommand's run, as main dispatches it, replaced by one that records the arguments parsed."""
    return {name: (lambda: lambda args: calls.append(args) or 0) for name in cli_main.RUNS}


def _fitting(option: Option) -> str:
    assert option.value is not None
    return option.value.choices[0] if option.value.choices else {"A,B": "a,b"}.get(option.value.metavar, "x")


@st.composite
def command_lines(draw):
    command = draw(st.sampled_from(COMMANDS))
    options = taken_by(command)
    must = [o for o in options if o.required or o.positional]
    optional = [o for o in options if o not in must and o.value is not None and o.keys != "backend"]
    chosen = draw(st.lists(st.sampled_from(optional), max_size=4, unique_by=lambda o: o.name)) if optional else []
    given = [(o, draw(raw_values(o.value))) for o in chosen]
    stray = draw(st.sampled_from([[], ["--frobnicate=1"]]))
    return command, must, given, stray


@EXAMPLES
@given(command_lines())
def test_a_command_line_ends_in_its_values_or_one_error_line(line):
    command, must, given, stray = line
    argv = [command]
    for option in must:
        argv += [_fitting(option)] if option.positional else [option.flag, _fitting(option)]
    argv += [f"{option.flag}={raw}" for option, raw in given] + stray
    calls: list = []
    errors = []
    with mock.patch.dict(cli_main.RUNS, _stubbed_runs(calls)), \
            mock.patch.object(sys, "stderr", new_callable=lambda: _Lines(errors)):
        status = cli_main.main(argv)
    refused = [option for option, raw in given if not expected(option.value, raw)[0]]
    if refused or stray:
        lines = "".join(errors).strip().splitlines()
        assert status == 2 and len(lines) == 1 and lines[0].startswith("longctx: error: "), (argv, errors)
        named = [o.flag for o in refused] + (["--frobnicate"] if stray else [])
        assert any(flag in lines[0] for flag in named), (argv, lines)
        return
    assert status == 0 and len(calls) == 1, (argv, errors)
    for option, raw in given:
        held = getattr(calls[0], option.command_dest)
        wanted = expected(option.value, raw)[1]
        assert (wanted in held) if option.repeat else same(held, wanted), (option.flag, raw, held)


class _Lines:
    def __init__(self, into: list):
        self.into = into

    def write(self, text: str) -> None:
        self.into.append(text)

    def flush(self) -> None:
        pass


# ------------------------------------------------------------------ KEY=VALUE settings of a backend


@st.composite
def backend_settings(draw):
    backend = draw(st.sampled_from(sorted(BY_NAME)))
    table: KeyTable = BY_NAME[backend].keys
    keys = draw(st.lists(st.sampled_from([k.name for k in table.keys] + ["frobnicate", "", "kv cache"]), max_size=4, unique=True))
    settings = [f"{key}={draw(raw_values(table.key(key).value) if table.key(key) else GARBAGE)}" for key in keys]
    settings += draw(st.sampled_from([[], ["no-equals-sign"]]))
    return backend, table, settings


@EXAMPLES
@given(backend_settings())
def test_backend_settings_end_in_their_values_or_one_line_naming_the_key(drawn):
    backend, table, settings = drawn
    problems = []
    for setting in settings:
        key, equals, raw = setting.partition("=")
        declared = table.key(key.strip())
        if not equals or not key.strip():
            problems.append("expected KEY=VALUE")
        elif not raw.strip():
            problems.append(f"{key.strip()}=: the value is empty")
        elif declared is None and not table.others:
            problems.append(key.strip())
        elif declared is not None and not expected(declared.value, raw)[0]:
            problems.append(key.strip())
    try:
        split = check_backend_settings(backend, settings, "--longctx-backend-option")
    except LongctxError as exc:
        message = str(exc)
        assert problems, (settings, message)
        assert "\n" not in message and message.startswith("--longctx-backend-option ")
        assert any(problem in message for problem in problems), (problems, message)
        return
    assert not problems, (settings, split)
    parsed, others = table.parse(split)
    for setting in settings:
        key, _, raw = setting.partition("=")
        declared = table.key(key.strip())
        if declared is None:
            assert others[key.strip()] == raw.strip()
        else:
            assert same(parsed[declared.target], expected(declared.value, raw)[1])


# ------------------------------------------------------------------ the plugin's options

GATE_FIELDS = {"model": "model", "data": "data", "sets": "sets", "lengths": "lengths", "limit": "limit", "mode": "mode",
               "baseline": "baseline", "out": "out", "markdown": "markdown", "html": "html", "dtype": "dtype",
               "device": "device", "backend": "backend", "kv-press": "kv_press", "cache-dir": "cache_dir",
               "compressor": "compressor", "min-retention-verbatim": "min_retention_verbatim",
               "min-retention-paraphrase": "min_retention_paraphrase"}
THRESHOLD_FIELDS = {"max-drop": "drop", "min-retained": "retained", "min-follow": "follow", "item-max-drop": "item_drop",
                    "max-kl": "kl", "alpha": "alpha", "min-effect": "min_effect"}


@st.composite
def plugin_options(draw):
    readable = [o for o in taken_by(PYTEST) if o.value is not None and not o.repeat
                and (o.name in GATE_FIELDS or o.name in THRESHOLD_FIELDS)]
    chosen = draw(st.lists(st.sampled_from(readable), max_size=5, unique_by=lambda o: o.name))
    return [(o, draw(raw_values(o.value))) for o in chosen]


@EXAMPLES
@given(plugin_options())
def test_plugin_options_end_in_their_values_or_one_line_naming_the_option(given_options):
    values = {option.plugin_dest: raw for option, raw in given_options}
    refused = [option for option, raw in given_options if not expected(option.value, raw)[0]]
    try:
        options = read_options(values.get, lambda name: None, "pytest.ini")
    except LongctxError as exc:
        assert refused and "\n" not in str(exc), (values, exc)
        assert any(str(exc).startswith(option.plugin_flag) for option in refused), (values, exc)
        return
    assert not refused, values
    for option, raw in given_options:
        wanted = expected(option.value, raw)[1]
        if option.name in GATE_FIELDS:
            assert same(getattr(options, GATE_FIELDS[option.name]), wanted), (option.name, raw)
        else:
            assert same(getattr(options.thresholds, THRESHOLD_FIELDS[option.name]), wanted), (option.name, raw)
