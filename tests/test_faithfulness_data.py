"""Reading the faithfulness config: the published dataset's rows, every layout it comes
in, and one clear line for each kind of bad input."""
from __future__ import annotations

import copy
import json

import pytest
from kit.items import write_split

from pytest_longctx.data.faithfulness import load_sessions
from pytest_longctx.data.load import load_dataset
from pytest_longctx.data.records import FaithfulnessItem, Message
from pytest_longctx.errors import DataError, LongctxError


def published_row(item_id: str, fact: str = "Background jobs run through a Redis-backed queue.") -> dict:
    """A row as the published set has it: no suite, names null, regexes as facts."""
    return {
        "id": item_id,
        "messages": [
            {"role": "system", "content": "You are a terse engineering assistant.", "name": None},
            {"role": "user", "content": "Set up the relevant component (step 0).", "name": None},
            {"role": "assistant", "content": fact, "name": None},
            {"role": "user", "content": "Also tweak the docs (pass 0); minor cleanup.", "name": None},
        ],
        "probe": "Which system processes async tasks?",
        "required_facts": ["[Rr]edis"],
        "probe_type": "paraphrase",
        "depth": "early",
        "concept": "Background",
        "placement": "statement",
        "extra_column": 1,
    }


def test_published_rows_load_from_every_layout(tmp_path):
    rows = [published_row("s0000"), published_row("s0001")]
    (tmp_path / "hub" / "data").mkdir(parents=True)
    write_split(tmp_path / "hub", "data", "train", rows)  # <dir>/data/train-00000-of-00001.parquet
    single = tmp_path / "sessions.jsonl"
    single.write_text("".join(json.dumps(r) + "\n" for r in rows))
    write_split(tmp_path / "bench", "faithfulness", "train", rows, fmt="jsonl")
    for data in (tmp_path / "hub", single, tmp_path / "bench"):
        dataset = load_sessions(str(data))
        (split, items), = dataset.configs["faithfulness"].items()
        assert [i.id for i in items] == ["s0000", "s0001"], data
        item = items[0]
        assert isinstance(item, FaithfulnessItem) and item.suite == "standard"
        assert item.messages[2] == Message("assistant", "Background jobs run through a Redis-backed queue.", None)
        assert item.required_facts == ("[Rr]edis",) and item.depth == "early" and item.placement == "statement"
    assert load_sessions(str(tmp_path / "hub"), limit=1).configs["faithfulness"]["train"][0].id == "s0000"


def test_the_model_gate_reads_the_config_beside_the_length_splits(tmp_path, rows):
    for (config, split), split_rows in rows.items():
        if split == "2k" and config == "facts":
            write_split(tmp_path, config, split, split_rows)
    write_split(tmp_path, "faithfulness", "train", [published_row("s0000")])
    dataset = load_dataset(tmp_path, lengths=["2k"])  # the lengths select the other configs' splits only
    assert {c: list(by) for c, by in dataset.configs.items()} == {"facts": ["2k"], "faithfulness": ["train"]}
    assert dataset.lengths == ["2k", "train"]


BAD = [
    (lambda r: r.pop("probe"), "missing column probe"),
    (lambda r: r.update(required_facts=["(unclosed"]), "field 'required_facts[0]': '(unclosed' is not a regular expression"),
    (lambda r: r.update(required_facts=["PostgreSQL"]), "field 'required_facts[0]': 'PostgreSQL' matches nothing in the messages"),
    (lambda r: r.update(required_facts=[]), "field 'required_facts': empty"),
    (lambda r: r.update(depth="late"), "field 'depth': 'late' is not one of early, mid, recent"),
    (lambda r: r.update(suite="odd"), "field 'suite': 'odd' is not one of standard, low_surprisal"),
    (lambda r: r["messages"][1].update(content=None), "messages[1], field 'content': missing"),
    (lambda r: r["messages"][1].update(name=3), "messages[1], field 'name': expected str"),
]


@pytest.mark.parametrize("corrupt, expected", BAD, ids=[b[1].split(":")[0] for b in BAD])
def test_bad_rows_are_one_line_naming_file_row_item_and_field(tmp_path, corrupt, expected):
    rows = [published_row("s0000"), published_row("s0001")]
    corrupt(rows[1])
    path = write_split(tmp_path, "faithfulness", "train", [copy.deepcopy(r) for r in rows], fmt="jsonl")
    with pytest.raises(DataError) as error:
        load_sessions(str(tmp_path))
    message = str(error.value)
    assert expected in message and str(path) in message and "\n" not in message
    if "column" not in expected:
        assert "row 1 (id s0001)" in message


def test_no_sessions_in_a_folder_says_which_layouts_are_read(tmp_path):
    with pytest.raises(LongctxError, match="no sessions found .*faithfulness/<split>-\\*.parquet"):
        load_sessions(str(tmp_path))


def test_a_baseline_made_before_the_config_leaves_it_out_with_a_warning(tmp_path, rows):
    from pytest_longctx.data.load import load_dataset
    from pytest_longctx.gate.model_run import GateRun
    from pytest_longctx.gate.run_options import read_options
    from pytest_longctx.scoring.fingerprint import item_fingerprint
    from pytest_longctx.scoring.scores_file import ItemScores, ScoresFile

    write_split(tmp_path, "facts", "2k", rows[("facts", "2k")])
    write_split(tmp_path, "faithfulness", "train", [published_row("s0000")])
    scored = [{"hits": [True], "logprobs": [-0.1]}]  # a value where there is one target; what matters is which items it holds
    facts = {item.id: ItemScores(item_fingerprint(item), scored) for _, _, item in load_dataset(tmp_path, sets=["facts"]).items()}
    ScoresFile(mode="ids", meta={}, scores={"facts": {"2k": facts}}).save(tmp_path / "old.json")

    def run(**given):
        values = {"longctx_model": ["m"], "longctx_data": str(tmp_path), "longctx_baseline": "old.json", **given}
        return GateRun(read_options(values.get, lambda name: None, None), tmp_path)

    left_out = run()
    no_drift = (f"baseline {tmp_path / 'old.json'} keeps no most likely tokens (made before drift rows, or by a backend "
                "without top_k), so there are no drift rows; recreate it (--longctx-update-baseline) to compare "
                "distributions at every read")
    assert list(left_out.dataset.configs) == ["facts"] and {k[0] for k in left_out.inputs.fingerprints} == {"facts"}
    assert left_out.warnings == ["config faithfulness: it has none of its scores, so faithfulness is not gated; "
                                 "recreate the baseline (--longctx-update-baseline) to gate it", no_drift]
    with pytest.raises(LongctxError, match=r"has no scores for faithfulness/train/s0000 \(faithfulness train: 1 of the 1 "
                                            r"selected, it holds 0\)"):
        run(longctx_sets="facts,faithfulness")  # asked for by name: refused before anything is loaded
