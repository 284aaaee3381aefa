"""Bad or minimal data meets one clear line (issue 13, items 2, 4 and 5): ``longctx compare``
on files that hold the faithfulness config, stored token ids checked on every item, and the
card's minimal schema (definitions by id, kind and span; positions as offsets or spans)."""
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from kit.items import write_split

from pytest_longctx.backends.base import ReadResult
from pytest_longctx.cli import main
from pytest_longctx.data.load import load_dataset
from pytest_longctx.data.validate import validate_dir
from pytest_longctx.errors import LongctxError
from pytest_longctx.scoring.fingerprint import item_fingerprint
from pytest_longctx.scoring.modes import choose_mode, plan_reads

BASELINE = Path(__file__).resolve().parent.parent / "baselines" / "smollm2-135m.json.gz"


def one_line(text: str) -> str:
    """The last line of stderr, after checking that the error is that one line."""
    lines = [line for line in text.strip().splitlines() if line.startswith("longctx: error")]
    assert len(lines) == 1, text
    return lines[0]


class ZeroBackend:
    """A backend that reads no model: top-1 token 0 and log-probability -1 everywhere."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    def read(self, ids, positions, tokens):
        return ReadResult([0] * len(positions), [[-1.0] * len(t) for t in tokens])


def make_qwen_backend(model, dtype, device):
    """A model with the Qwen3.5 vocabulary, as far as the mode choice can tell."""
    from pytest_longctx.data.qwen import qwen35_tokenizer

    return ZeroBackend(qwen35_tokenizer())


def make_bare_backend(model, dtype, device):
    """A custom runtime without a tokenizer: ids mode only."""
    return ZeroBackend(None)


def score(folder, *args):
    return main(["score", "--model", "x", "--backend", f"{__name__}:make_qwen_backend", "--data", str(folder),
                 "--quiet", *args])


def facts_with(rows, tmp_path, change, fmt="parquet"):
    """The facts 2k split with ``change(items)`` applied, in its own folder."""
    items = copy.deepcopy(rows[("facts", "2k")])
    change(items)
    write_split(tmp_path, "facts", "2k", items, fmt=fmt)
    return tmp_path


def set_ids(n, value):
    def change(items):
        items[1]["qwen_ids"][n] = value
    return change


# ------------------------------------------------------------------ item 2: compare and the faithfulness config


def test_compare_the_committed_baseline_with_itself(capsys):
    code = main(["compare", str(BASELINE), str(BASELINE)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "PASS" in captured.out.splitlines()[0]
    assert "left out" not in captured.out and "expected a split name" not in captured.out
    assert "⟦" in captured.out  # the text around a target is shown
    assert "Facts recalled in agent sessions" in captured.out


def test_compare_the_committed_baseline_with_itself_on_data_builtin(capsys):
    code = main(["compare", str(BASELINE), str(BASELINE), "--data", "builtin"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "has no split" not in captured.err and "holds no metrics" not in captured.err
    assert "⟦" in captured.out and "left out" not in captured.out


# ------------------------------------------------------------------ item 4: stored ids, item by item


def test_a_later_items_wrong_ids_fall_back_to_text_mode_with_a_warning(rows, tmp_path, capsys):
    right = rows[("facts", "2k")][1]["qwen_ids"]
    folder = facts_with(rows, tmp_path, set_ids(40, right[41]))  # in the vocabulary, not the text's token
    out = tmp_path / "r.json"
    assert score(folder, "--out", str(out)) == 0
    warning = [line for line in capsys.readouterr().err.splitlines() if line.startswith("longctx: warning")]
    assert warning == [
        "longctx: warning: --mode auto: scoring in text mode with the model's own tokenizer, not the stored Qwen3.5 ids: "
        f"{folder / 'facts' / '2k-00000-of-00001.parquet'}, item f1, field qwen_ids: the stored ids differ from the "
        f"tokenizer's tokenization of the text from token 40 ({len(right)} ids stored, the text gives {len(right)}); "
        "check the data with longctx validate DIR, or pass --mode text to silence this"
    ]
    results = json.loads(out.read_text())
    assert results["mode"] == "text" and results["meta"]["mode_fallback"] == warning[0].removeprefix("longctx: warning: ")


def test_a_later_items_wrong_ids_with_mode_ids_is_one_error(rows, tmp_path, capsys):
    right = rows[("facts", "2k")][1]["qwen_ids"]
    folder = facts_with(rows, tmp_path, set_ids(40, right[41]))
    assert score(folder, "--mode", "ids") == 2
    assert one_line(capsys.readouterr().err) == (
        f"longctx: error: --mode ids: {folder / 'facts' / '2k-00000-of-00001.parquet'}, item f1, field qwen_ids: the stored "
        f"ids differ from the tokenizer's tokenization of the text from token 40 ({len(right)} ids stored, the text gives "
        f"{len(right)}); the ids mode feeds the stored Qwen3.5 ids as they are: use --mode text (or auto)"
    )


def test_out_of_vocabulary_ids(rows, tmp_path, capsys):
    folder = facts_with(rows, tmp_path, set_ids(7, 10**9))
    assert score(folder, "--mode", "ids") == 2
    line = one_line(capsys.readouterr().err)
    assert "item f1, field qwen_ids: the stored ids differ from the tokenizer's tokenization of the text from token 7" in line


def test_negative_ids(rows, tmp_path, capsys):
    folder = facts_with(rows, tmp_path, set_ids(3, -5))
    assert score(folder, "--mode", "ids") == 2
    assert "item f1, field qwen_ids: the stored ids differ from the tokenizer's tokenization of the text from token 3" in (
        one_line(capsys.readouterr().err))


def test_negative_ids_without_a_tokenizer(rows, tmp_path, capsys):
    folder = facts_with(rows, tmp_path, set_ids(3, -5))
    code = main(["score", "--model", "x", "--backend", f"{__name__}:make_bare_backend", "--data", str(folder), "--quiet"])
    assert code == 2
    assert one_line(capsys.readouterr().err) == (
        f"longctx: error: --mode auto: {folder / 'facts' / '2k-00000-of-00001.parquet'}, item f1, field qwen_ids: holds a "
        "negative token id (-5); the ids mode feeds the stored Qwen3.5 ids as they are: this backend has no tokenizer, so "
        "the text mode cannot replace them: fix the data (longctx validate DIR)"
    )


def test_short_ids(rows, tmp_path, capsys):
    n = len(rows[("facts", "2k")][1]["qwen_ids"])

    def cut(items):
        items[1]["qwen_ids"] = items[1]["qwen_ids"][:50]

    folder = facts_with(rows, tmp_path, cut)
    assert score(folder, "--mode", "ids") == 2
    assert f"item f1, field qwen_ids: the stored ids differ from the tokenizer's tokenization of the text from token 50 " \
           f"(50 ids stored, the text gives {n})" in one_line(capsys.readouterr().err)


def test_short_ids_without_a_tokenizer(rows, tmp_path, capsys):
    def cut(items):
        items[1]["qwen_ids"] = items[1]["qwen_ids"][:50]

    folder = facts_with(rows, tmp_path, cut)
    code = main(["score", "--model", "x", "--backend", f"{__name__}:make_bare_backend", "--data", str(folder), "--quiet"])
    assert code == 2
    first, end = rows[("facts", "2k")][1]["targets"][0]["qwen_answer_pos"]
    assert (f"item f1, field targets[0].qwen_answer_pos: [{first}, {end}) is not inside its 50 ids"
            in one_line(capsys.readouterr().err))


def test_an_out_of_range_answer_position(rows, tmp_path, capsys):
    n = len(rows[("facts", "2k")][1]["qwen_ids"])

    def move(items):
        items[1]["targets"][2]["qwen_answer_pos"] = [n + 3, n + 5]

    folder = facts_with(rows, tmp_path, move)
    assert score(folder, "--mode", "ids") == 2
    assert one_line(capsys.readouterr().err) == (
        f"longctx: error: --mode ids: {folder / 'facts' / '2k-00000-of-00001.parquet'}, item f1, field "
        f"targets[2].qwen_answer_pos: [{n + 3}, {n + 5}) is not inside its {n} ids; the ids mode feeds the stored "
        "Qwen3.5 ids as they are: use --mode text (or auto)"
    )


def test_a_tool_position_inside_the_ids_but_not_at_the_target(rows, tmp_path, capsys):
    items = copy.deepcopy(rows[("tool_calls", "2k")])
    right = items[1]["targets"][1]["qwen_pos"]
    items[1]["targets"][1]["qwen_pos"] = right + 3
    write_split(tmp_path, "tool_calls", "2k", items)
    assert score(tmp_path, "--mode", "ids") == 2
    assert (f"item t1, field targets[1].qwen_pos: {right + 3} is not the token of the target (character "
            f"{items[1]['targets'][1]['char'][0]} is in token {right})") in one_line(capsys.readouterr().err)


def test_a_wrong_expected_id_of_a_rules_target(rows, tmp_path, capsys):
    items = copy.deepcopy(rows[("rules_en", "2k")])
    items[4]["targets"][0]["qwen_expected_id"] += 1
    write_split(tmp_path, "rules_en", "2k", items)
    assert score(tmp_path, "--mode", "ids") == 2
    assert (f"item {items[4]['id']}, field targets[0].qwen_expected_id: {items[4]['targets'][0]['qwen_expected_id']} is "
            f"not the first token of expected_text {items[4]['targets'][0]['expected_text']!r}") in one_line(capsys.readouterr().err)


def test_an_empty_split(rows, tmp_path, capsys):
    write_split(tmp_path, "facts", "2k", rows[("facts", "2k")])
    path = tmp_path / "facts" / "8k.jsonl"
    path.write_text("")
    assert score(tmp_path) == 2
    assert one_line(capsys.readouterr().err) == (
        f"longctx: error: {path}: split 8k of facts holds no items; remove the empty file or write the split's items into it"
    )


def test_a_fallback_against_an_ids_mode_reference_is_refused(rows, tmp_path, capsys):
    """The rules configs' rule holds: a reference scored in ids mode and a run that fell back to text."""
    good, bad = tmp_path / "good", tmp_path / "bad"
    write_split(good, "rules_en", "2k", rows[("rules_en", "2k")])
    items = copy.deepcopy(rows[("rules_en", "2k")])
    items[3]["qwen_ids_with_rule"][20] = items[3]["qwen_ids_with_rule"][21]
    write_split(bad, "rules_en", "2k", items)
    reference = tmp_path / "ref.json.gz"
    assert score(good, "--save_scores", str(reference)) == 0
    assert score(bad, "--reference_scores", str(reference)) == 2
    line = one_line(capsys.readouterr().err)
    assert line.startswith(f"longctx: error: reference scores {reference}: made with another tokenizer")
    assert f"--mode auto: scoring in text mode with the model's own tokenizer, not the stored Qwen3.5 ids: " \
           f"{bad / 'rules_en' / '2k-00000-of-00001.parquet'}, item {items[3]['id']}, field qwen_ids_with_rule" in line


def test_the_gate_summary_shows_the_fallback(rows, tmp_path, pytester):
    right = rows[("facts", "2k")][1]["qwen_ids"]
    folder = facts_with(rows, tmp_path / "data", set_ids(40, right[41]))
    result = pytester.runpytest_inprocess(
        "-p", "no:cacheprovider", "--longctx-model=x", f"--longctx-backend={__name__}:make_qwen_backend",
        f"--longctx-data={folder}", f"--longctx-baseline={tmp_path / 'b.json.gz'}", "--longctx-update-baseline",
    )
    out = result.stdout.str()
    assert "mode text" in out
    assert ("longctx: warning: --mode auto: scoring in text mode with the model's own tokenizer, not the stored Qwen3.5 ids: "
            f"{folder / 'facts' / '2k-00000-of-00001.parquet'}, item f1, field qwen_ids") in out.replace("\n", "")


def test_a_tokenizer_of_another_vocabulary_is_text_mode_without_a_word(data_dir, bpe_tokenizer):
    warnings: list[str] = []
    assert choose_mode("auto", bpe_tokenizer, load_dataset(data_dir, lengths=["2k"]), warnings) == "text"
    assert warnings == []


# ------------------------------------------------------------------ item 5: the card's schema, not a stricter one


def minimal_tools(items, offsets=False):
    """tool_calls items in the card's minimal form: definitions as id, kind and span."""
    for item in items:
        item["definitions"] = [{"id": d["id"], "kind": d["kind"], "char": d["char"][0] if offsets else d["char"]}
                               for d in item["definitions"]]
    return items


def test_a_definition_is_its_id_kind_and_span(rows, tmp_path):
    full = load_dataset(write_split(tmp_path / "full", "tool_calls", "2k", rows[("tool_calls", "2k")]).parent.parent)
    items = minimal_tools(copy.deepcopy(rows[("tool_calls", "2k")]))
    minimal = load_dataset(write_split(tmp_path / "min", "tool_calls", "2k", items).parent.parent)
    for a, b in zip(full.configs["tool_calls"]["2k"], minimal.configs["tool_calls"]["2k"]):
        assert a.definitions == b.definitions  # name and text derived from the span
        assert item_fingerprint(a) == item_fingerprint(b)


def test_a_definition_by_its_offset(rows, tmp_path):
    items = copy.deepcopy(rows[("tool_calls", "2k")])
    text = items[0]["text"]
    command_line = text.index("`lsx`")
    items[0]["definitions"] = [
        {"id": "t0", "kind": "tool", "char": items[0]["definitions"][0]["char"][0]},  # the JSON object that starts there
        {"id": "c0", "kind": "command", "char": command_line},  # the command's line
    ]
    item = load_dataset(write_split(tmp_path, "tool_calls", "2k", items[:1]).parent.parent).configs["tool_calls"]["2k"][0]
    tool, command = item.definitions
    assert (tool.name, tool.text) == ("read_file", rows[("tool_calls", "2k")][0]["definitions"][0]["text"])
    assert tool.char == tuple(rows[("tool_calls", "2k")][0]["definitions"][0]["char"])
    assert command.name == "lsx" and command.text == "`lsx` lists files.<|im_end|>"


def test_a_builtin_definition_in_the_openai_form_and_a_command_line(tmp_path):
    """The builder writes {"type": "function", "function": {"name": …}} and '- cmd args: what it does.'"""
    builtin = load_dataset("builtin", sets=["tool_calls"], lengths=["2k"]).configs["tool_calls"]["2k"][0]
    row = {"id": "x", "text": builtin.text, "targets": [],
           "definitions": [{"id": d.id, "kind": d.kind, "char": d.char[0]} for d in builtin.definitions]}
    write_split(tmp_path, "tool_calls", "2k", [row], fmt="jsonl")
    derived = load_dataset(tmp_path).configs["tool_calls"]["2k"][0].definitions
    assert [(d.name, d.char, d.text) for d in derived] == [(d.name, d.char, d.text) for d in builtin.definitions]


def test_a_definition_whose_name_cannot_be_derived(rows, tmp_path):
    items = copy.deepcopy(rows[("tool_calls", "2k")])
    items[0]["definitions"][0] = {"id": "t0", "kind": "tool", "char": [0, 12]}  # "<|im_start|>": no JSON
    path = write_split(tmp_path, "tool_calls", "2k", items)
    with pytest.raises(LongctxError) as exc:
        load_dataset(tmp_path)
    assert str(exc.value) == (
        f"{path}, row 0 (id t0), definitions[0], field 'name': missing, and the span holds no JSON tool definition with a "
        "name to take it from; give the definition's name"
    )


def test_rules_positions_as_offsets(rows, tmp_path):
    """'where the governed action starts': an offset, its end the original action's."""
    items = copy.deepcopy(rows[("rules_en", "2k")])
    for item in items:
        item["rule_char"] = item["rule_char"][0]
        for t in item["targets"]:
            t["char_without_rule"], t["char_with_rule"] = t["char_without_rule"][0], t["char_with_rule"][0]
    full = load_dataset(write_split(tmp_path / "full", "rules_en", "2k", rows[("rules_en", "2k")]).parent.parent)
    offsets = load_dataset(write_split(tmp_path / "offsets", "rules_en", "2k", items).parent.parent)
    for a, b in zip(full.configs["rules_en"]["2k"], offsets.configs["rules_en"]["2k"]):
        assert item_fingerprint(a) == item_fingerprint(b)


def test_facts_and_tool_positions_as_offsets(rows, tmp_path):
    facts, tools = copy.deepcopy(rows[("facts", "2k")]), copy.deepcopy(rows[("tool_calls", "2k")])
    for item in facts:
        for t in item["targets"]:
            t["answer_char"], t["fact_char"] = t["answer_char"][0], t["fact_char"][0]
    spans = copy.deepcopy(tools)  # a target's span holds its target text (some of kit.items' hold more)
    for item, full_item in zip(tools, spans):
        for t, full_t in zip(item["targets"], full_item["targets"]):
            t["char"] = t["char"][0]
            full_t["char"] = [t["char"], t["char"] + len(t["target"])]
    for config, items, whole in (("facts", facts, rows[("facts", "2k")]), ("tool_calls", tools, spans)):
        full = load_dataset(write_split(tmp_path / "full", config, "2k", whole).parent.parent, sets=[config])
        offsets = load_dataset(write_split(tmp_path / "offsets", config, "2k", items).parent.parent, sets=[config])
        for a, b in zip(full.configs[config]["2k"], offsets.configs[config]["2k"]):
            assert item_fingerprint(a) == item_fingerprint(b)


def test_the_answer_tokens_by_their_first(rows, tmp_path, qwen_tokenizer):
    items = copy.deepcopy(rows[("facts", "2k")])
    for item in items:
        for t in item["targets"]:
            t["qwen_answer_pos"] = t["qwen_answer_pos"][0]
    full = load_dataset(write_split(tmp_path / "full", "facts", "2k", rows[("facts", "2k")]).parent.parent)
    first = load_dataset(write_split(tmp_path / "first", "facts", "2k", items).parent.parent)
    assert choose_mode("ids", qwen_tokenizer, first) == "ids"
    expected = [p.targets for p in plan_reads(full, "ids", qwen_tokenizer)]
    assert [p.targets for p in plan_reads(first, "ids", qwen_tokenizer)] == expected
    with pytest.raises(LongctxError, match=r"item f0, field targets\[0\].qwen_answer_pos: \d+ is the first answer token alone"):
        choose_mode("ids", None, first)


def test_a_position_of_the_wrong_type(rows, tmp_path):
    items = copy.deepcopy(rows[("rules_en", "2k")])
    items[0]["targets"][0]["char_with_rule"] = "somewhere"
    write_split(tmp_path, "rules_en", "2k", items, fmt="jsonl")
    with pytest.raises(LongctxError, match=r"targets\[0\], field 'char_with_rule': expected an offset or a \[start, end\] span, "
                                           "got str 'somewhere'"):
        load_dataset(tmp_path)


def test_an_offset_whose_span_leaves_the_text(rows, tmp_path):
    items = copy.deepcopy(rows[("facts", "2k")])
    text_len = len(items[0]["text"])
    items[0]["targets"][0]["answer_char"] = text_len - 2  # " 48213." does not fit in the last two characters
    path = write_split(tmp_path, "facts", "2k", items, fmt="jsonl")  # JSONL: one row may mix the forms
    with pytest.raises(LongctxError) as exc:
        load_dataset(tmp_path)
    answer = items[0]["targets"][0]["answer"]
    assert str(exc.value) == (
        f"{path}, row 0 (id f0), targets[0], field 'answer_char': offset {text_len - 2}: the span it starts, "
        f"[{text_len - 2}, {text_len - 2 + len(answer)}), is not inside the text (text has {text_len} characters)"
    )


def test_validate_reads_both_forms(tmp_path):
    """longctx validate: the builtin data in the minimal form checks out exactly as the full form does."""
    source = load_dataset("builtin", sets=["tool_calls", "rules_en"], lengths=["2k"])
    import pyarrow.parquet as pq

    for config in ("tool_calls", "rules_en"):
        table = pq.read_table(source.files[(config, "2k")]).to_pylist()
        for row in table:
            if config == "tool_calls":
                row["definitions"] = [{"id": d["id"], "kind": d["kind"], "char": d["char"][0]} for d in row["definitions"]]
            else:
                row["rule_char"] = row["rule_char"][0]
                for t in row["targets"]:
                    t["char_without_rule"], t["char_with_rule"] = t["char_without_rule"][0], t["char_with_rule"][0]
        write_split(tmp_path, config, "2k", table)
    assert list(validate_dir(tmp_path)) == []
