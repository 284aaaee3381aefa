"""The data card (README.md) of a built benchmark: what is in it, its sizes, and the
sources and licences of its texts."""
from __future__ import annotations

from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq

from pytest_longctx.data.builtin.text import WIKIPEDIA_SOURCE, projects
from pytest_longctx.data.lengths import length_tokens, sorted_lengths
from pytest_longctx.data.records import CONFIGS, FAITHFULNESS, Kind, config_kind
from pytest_longctx.paths import write_text_atomically

ABOUT = """# pytest-longctx builtin benchmark

A twin of the long-context agent benchmark (configs facts, tool_calls, rules_en,
rules_cs, rules_de) built by `longctx build` (pytest-longctx) from the real texts shipped
with the package. Same schema as the published set; lengths counted in Qwen3.5 tokens,
every text (and, for rules, both texts of an item) exactly the length plus one token.
Built with seed {seed}; the same seed and package version give the same bytes.

* facts: fact sentences ("Fiona booked flight 48213.") planted in English Wikipedia
  text and asked for again later ("Which flight did Fiona book? Fiona booked flight"
  + answer " 48213."); 8 facts per item.
* tool_calls: agent sessions in the Qwen3.5 chat markup with tool definitions (JSON
  lines in `<tools>`) and documented project commands in the system prompt; targets are
  the function name, parameter names, what comes after a parameter, and documented
  command names in later calls. far = the definition ends 512 or more tokens before the
  target; fresh = far and no call of the same tool or command in the 512 tokens before.
* rules_en / rules_cs / rules_de: agent sessions that run shell commands; one rule line
  (substitution, redirect or required) at the end of the system prompt or of a later
  user message; targets are the governed actions at least 512 tokens after the rule.
  The sessions are the same in the three configs; only the rule line's language differs.
* faithfulness (split `train`, not by length): agent sessions in the schema of the
  context-compression faithfulness set (`messages`, `probe`, `probe_type`,
  `required_facts`, `depth`, `placement`, `concept`, plus `suite`), each with one planted
  service-configuration fact and a probe that needs it; the `low_surprisal` suite
  phrases its facts in common words, and the `tool_heavy` suite buries them in large
  tool outputs (HTML, JSON, logs, test runs; 2k to 15k tokens each).

## Sizes

| config | split | items | targets | tokens per item |
|---|---|---|---|---|
"""

LICENCES = """
## Licence

| config | licence | why |
|---|---|---|
| facts | CC BY-SA 4.0 | an adaptation of Wikipedia text (CC BY-SA 3.0): ShareAlike |
| tool_calls, rules_en, rules_cs, rules_de | CC BY 4.0 | the sessions, rules and annotations written by the builder |
| faithfulness | CC BY-SA 4.0 | sessions that quote Wikipedia paragraphs (CC BY-SA 3.0): ShareAlike |

The third-party text inside every config stays under the licence of its source, below.

## Sources

**Wikipedia.** {wiki_name} ({wiki_revision}), licence {wiki_license}: text of English Wikipedia
articles by Wikipedia contributors, from the shortened dump in the test data of gensim
(LGPL-2.1 package; the dump itself is Wikipedia's). Markup, tables, lists and references
were removed. Each facts item names its articles in `source.articles`. Changes: 8 fact
sentences and 8 questions were inserted between sentences of the article text. The
faithfulness sessions quote single paragraphs unchanged (cut at a sentence end) and name
their articles in `sources`; the tool-heavy ones also show whole articles as a fetched
HTML page (paragraphs in markup, one word of each made a link) and single sentences as
the snippets of a JSON search response.

**Code.** Real files of these projects, unchanged, appear as tool observations in the
tool_calls, rules and faithfulness configs; the copyright of each file stays with its authors under
its licence (texts in the package: `pytest_longctx/data/builtin/sources/code/licenses/`).
Every item's `sources` names the project and files it shows and their token counts. The
tool-heavy sessions' logs and test runs also quote lines and definition names of these
files, and their file listings show the files' paths and sizes.

| project | version | licence |
|---|---|---|
{code_rows}

Everything else (prompts, task messages, thoughts, command outputs of tests and git,
the documented project commands, the fact sentences and the rule lines in English,
Czech and German) is written by the builder: CC BY 4.0.
"""


def _sizes(root: Path) -> list[str]:
    rows = []
    for config in CONFIGS:
        folder = root / config
        if not folder.is_dir():
            continue
        files = {p.name.split("-", 1)[0]: p for p in folder.glob("*.parquet")}
        for length in sorted_lengths(list(files)):
            table = pq.read_table(files[length], columns=["targets"])
            targets = pc.list_flatten(table.column("targets"))
            count = f"{len(targets):,}"
            if config == "tool_calls":
                far = pc.struct_field(targets, "far")
                fresh = pc.struct_field(targets, "fresh")
                count += f" ({pc.sum(far).as_py() or 0:,} far, {pc.sum(fresh).as_py() or 0:,} of them fresh)"
            tokens = f"{length_tokens(length) + 1:,}"
            if config_kind(config) == Kind.RULES:
                tokens = f"2 x {tokens}"
            rows.append(f"| {config} | {length} | {table.num_rows} | {count} | {tokens} |")
    for path in sorted((root / FAITHFULNESS).glob("*.parquet")):
        table = pq.read_table(path, columns=["required_facts"])
        facts = len(pc.list_flatten(table.column("required_facts")))
        rows.append(f"| {FAITHFULNESS} | {path.name.split('-', 1)[0]} | {table.num_rows} | {facts} facts | varies |")
    return rows


def write_card(root: Path, seed: int) -> Path:
    code_rows = "\n".join(f"| {name} | {files[0].version} | {files[0].license} |" for name, files in sorted(projects().items()))
    text = ABOUT.format(seed=seed) + "\n".join(_sizes(root)) + "\n" + LICENCES.format(
        wiki_name=WIKIPEDIA_SOURCE["name"], wiki_revision=WIKIPEDIA_SOURCE["revision"],
        wiki_license=WIKIPEDIA_SOURCE["license"], code_rows=code_rows,
    )
    return write_text_atomically(root / "README.md", text)
