"""Collect the real source files that the builder shows as tool observations.

Run once, in an environment where the projects below are installed from their wheels;
the package ships the result (``sources/code/``) and never needs this script:

    python benchmarks/collect_code.py pytest_longctx/data/builtin/sources/code

Only projects whose licence allows redistribution with attribution (MIT, BSD, ISC,
Apache-2.0) are taken; each project's licence text is copied next to the files.
"""
from __future__ import annotations

import gzip
import json
import sys
from importlib.metadata import distribution
from pathlib import Path

# project -> (licence, files to take: path prefixes inside the wheel; empty = every .py file)
PROJECTS: dict[str, tuple[str, tuple[str, ...]]] = {
    "pluggy": ("MIT", ()),
    "iniconfig": ("MIT", ()),
    "h11": ("MIT", ()),
    "execnet": ("MIT", ("execnet/gateway.py", "execnet/multi.py", "execnet/rsync.py", "execnet/xspec.py", "execnet/gateway_bootstrap.py")),
    "markupsafe": ("BSD-3-Clause", ()),
    "shellingham": ("ISC", ()),
    "mdurl": ("MIT", ()),
    "annotated-types": ("MIT", ()),
    "packaging": (
        "Apache-2.0 OR BSD-2-Clause",
        ("packaging/version.py", "packaging/requirements.py", "packaging/markers.py", "packaging/utils.py", "packaging/tags.py"),
    ),
    "click": ("BSD-3-Clause", ("click/utils.py", "click/exceptions.py", "click/decorators.py", "click/termui.py", "click/formatting.py")),
}


def main(out: str) -> None:
    root = Path(out)
    (root / "licenses").mkdir(parents=True, exist_ok=True)
    records, credits = [], []
    for name, (licence, prefixes) in PROJECTS.items():
        dist = distribution(name)
        files = sorted(str(f) for f in dist.files or ())
        chosen = [f for f in files if f.endswith(".py") and ".dist-info" not in f and (not prefixes or f in prefixes)]
        for path in chosen:
            text = Path(dist.locate_file(path)).read_text(encoding="utf-8")
            if text.strip():
                records.append({"project": name, "version": dist.version, "license": licence, "path": path, "text": text})
        readme = dist.metadata.get_payload() or ""
        if readme.strip():
            records.append(
                {"project": name, "version": dist.version, "license": licence, "path": "README.md", "text": readme.strip() + "\n"}
            )
        licence_files = [f for f in files if ".dist-info" in f and any(k in f.upper() for k in ("LICEN", "COPYING"))]
        for _n, path in enumerate(licence_files):
            suffix = "" if len(licence_files) == 1 else f"-{Path(path).name}"
            target = root / "licenses" / f"{name}{suffix}.txt"
            target.write_text(Path(dist.locate_file(path)).read_text(encoding="utf-8"), encoding="utf-8")
        urls = dict(tuple(part.strip() for part in u.split(",", 1)) for u in dist.metadata.get_all("Project-URL") or ())
        home = urls.get("Source") or urls.get("Source Code") or dist.metadata.get("Home-page") or next(iter(urls.values()), "")
        author = dist.metadata.get("Author") or dist.metadata.get("Author-email") or dist.metadata.get("Maintainer-email") or ""
        credits.append(f"| {name} | {dist.version} | {licence} | {author.strip()} | {home} |")
    with open(root / "files.jsonl.gz", "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as handle:
        for record in records:
            handle.write((json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8"))
    (root / "CREDITS.md").write_text(
        "# Code sources\n\nReal files of these projects, taken unchanged from their released wheels, appear in the\n"
        "tool observations of the tool_calls and rules configs. The copyright of each file stays with\n"
        "its authors; each project's licence text is in `licenses/`.\n\n"
        "| project | version | licence | authors | home |\n|---|---|---|---|---|\n" + "\n".join(credits) + "\n",
        encoding="utf-8",
    )
    print(f"{len(records)} files, {sum(len(r['text']) for r in records)} characters -> {root}", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1])
