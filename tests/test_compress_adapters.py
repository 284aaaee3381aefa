"""The shipped adapters, each run on real sessions when its library is installed (skipped
otherwise): ctx-gate and tooltrim (light), LLMLingua on SmolLM2 (slow: a few sessions)."""
from __future__ import annotations

import pytest
import scipy.stats  # noqa: F401  # loaded once here: a gate run in-process (pytester) must not load numpy's extensions again
from kit.items import write_split
from kit.needs import needs, needs_smollm2

from pytest_longctx.compress.evaluate import compress_all
from pytest_longctx.compress.interface import resolve
from pytest_longctx.data.builtin.faithfulness import build_faithfulness
from pytest_longctx.errors import LongctxError
from pytest_longctx.metrics.faithfulness import compression_summary

needs_ctxgate = needs("src.compressor", install="pip install 'pytest-longctx[ctxgate]'")
needs_tooltrim = needs("tooltrim", install="pip install 'pytest-longctx[tooltrim]'")
needs_llmlingua = needs("llmlingua", install="pip install 'pytest-longctx[llmlingua]'")


def summary(spec, knobs, sessions, reader):
    done = compress_all(resolve(spec, knobs), [("train", item) for item in sessions], reader)
    assert not [c.outcome["error"] for c in done if c.outcome["error"]]
    return compression_summary([c.outcome for c in done]), done


@needs_ctxgate
def test_ctxgate_gets_the_probe_as_its_current_prompt_and_inserts_its_summary(sessions, reader):
    result, done = summary("ctxgate", {}, sessions, reader)
    assert 0.3 < result["savings"] < 0.8 and result["retention"] >= 0.5
    # its summary of older turns is a system message of its own, drawn from many turns
    assert result["structure"]["system_inserted"] == len(sessions) and result["structure"]["merged"] >= len(sessions) // 2
    summarized = next(m for m in done[0].messages if m.role == "system" and m.content.startswith("[CONTEXT SUMMARY"))
    assert "User:" in summarized.content
    # the probe went in as the last user message and was taken off again
    assert all(c.messages[-1].content != c.item.probe for c in done)


@needs_ctxgate
def test_ctxgate_budgets_are_in_the_gate_tokens(sessions, reader):
    sessions = sessions[:24]  # 16 standard and 8 low-surprisal sessions: budgets hold per session, savings grow on any set
    _, done = summary("ctxgate", {"token_budget": 250}, sessions, reader)
    for c in done:  # ctx-gate counts each content and 4 tokens per message; the probe it keeps is counted too
        counted = sum(len(reader.encoding.encode(m.content)) + 4 for m in c.messages) + len(reader.encoding.encode(c.item.probe)) + 4
        protected = sum(len(reader.encoding.encode(m.content)) + 4 for m in c.item.messages if m.role == "system")
        assert counted <= max(250, protected + 40), c.item.id
    light, _ = summary("ctxgate", {"budget_share": 0.9}, sessions, reader)
    heavy, _ = summary("ctxgate", {"budget_share": 0.2}, sessions, reader)
    assert light["savings"] < heavy["savings"]


@needs_ctxgate
def test_ctxgate_knobs_are_checked_before_any_session(sessions, reader):
    for knobs, problem in (({"budget_share": 2.0}, "knob budget_share=2.0 is out of range: it must be between 0 and 1"),
                           ({"token_budget": "many"}, "knob token_budget='many' is not a whole number or None"),
                           ({"recency_window": 2.5}, "knob recency_window=2.5 is not a whole number"),
                           ({"window": 3}, "unknown knob window")):
        with pytest.raises(LongctxError, match=problem):
            resolve("ctxgate", knobs)
    with pytest.raises(LongctxError, match="could not start: .*give token_budget .* or budget_share"):
        summary("ctxgate", {"token_budget": 100, "budget_share": 0.5}, sessions, reader)


@needs_tooltrim
def test_tooltrim_at_its_defaults_saves_nothing_on_short_tool_outputs(sessions, reader):
    result, _ = summary("tooltrim", {}, sessions, reader)
    assert result["savings"] == 0.0 and result["retention"] == 1.0  # no standard session has a tool output over 512 tokens


@needs_tooltrim
def test_tooltrim_trims_tool_outputs_and_its_references_expand_to_them(sessions, reader):
    result, done = summary("tooltrim", {"max_tokens": 48}, sessions, reader)
    assert result["content_savings"] > 0.1 and result["structure"] == {"merged": 0, "roles_changed": 0, "system_inserted": 0}
    assert result["retention_expanded"] == 1.0 >= result["retention"]
    footers = [m.content for c in done for m in c.messages if "[tooltrim: compressed" in m.content]
    assert footers and all(m.role == "tool" for c in done for m in c.messages if "[tooltrim:" in m.content)
    from pytest_longctx.compress.adapters.tooltrim import expand

    trimmed = next((c, n) for c in done for n, m in enumerate(c.messages) if "[tooltrim: compressed" in m.content)
    c, n = trimmed
    ref = c.messages[n].content.rsplit("ref=", 1)[1].rstrip("]")
    assert expand(ref) in [m.content for m in c.item.messages]


@needs_ctxgate
def test_the_adapters_are_compressors_of_the_gate_by_their_entry_point_names(pytester, tmp_path):
    write_split(tmp_path, "faithfulness", "train", build_faithfulness(seed=0, limit=6))
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--longctx-compressor=ctxgate", "--longctx-knob=budget_share=0.5",
                                          f"--longctx-data={tmp_path}")
    text = result.stdout.str()
    assert "longctx compressor gate: ctxgate budget_share=0.5 on" in text and "Realized savings" in text
    assert result.ret in (0, 1) and "could not" not in text


@needs_llmlingua
@needs_smollm2
@pytest.mark.slow
def test_llmlingua_on_smollm2_merges_a_session_into_one_message(sessions, reader):
    result, done = summary("llmlingua", {"model": "smollm2-135m", "rate": 0.5}, sessions[:2], reader)
    assert all([m.role for m in c.messages] == ["system", "user"] for c in done)
    assert result["structure"]["merged"] == 2 and result["content_savings"] > 0.05
    assert result["savings"] > result["content_savings"]  # the merge alone saves the chat markup of every turn


@needs_llmlingua
def test_llmlingua_that_cannot_load_its_model_could_not_start_with_one_line(sessions, reader, tmp_path):
    with pytest.raises(LongctxError, match=r"knob model=5 is not a string \(in quotes\)"):
        resolve("llmlingua", {"model": 5})
    with pytest.raises(LongctxError, match="knob rate=1.5 is out of range: it must be between 0 and 1"):
        resolve("llmlingua", {"rate": 1.5})
    with pytest.raises(LongctxError) as stopped:
        summary("llmlingua", {"model": str(tmp_path / "no-model-here")}, sessions[:3], reader)
    message = str(stopped.value)
    assert "could not start" in message and "give a local model folder or a model alias as the knob model" in message
