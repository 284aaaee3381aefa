"""The junit XML a gate writes without pytest (``longctx merge --junitxml``), in the shape pytest's ``--junitxml``
gives the gate's tests: one ``testsuite`` named ``pytest`` with the suite properties (reports/junit.py's), and one
``testcase`` per generated test (classname ``longctx``, name ``test_row[facts-2k]``) with its properties and its
failure or skip, so that whatever reads the gate's junit file reads the merge's alike."""
from __future__ import annotations

import socket
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from pytest_longctx.gate.verdict import FAIL
from pytest_longctx.numbers import NA
from pytest_longctx.paths import write_text_atomically
from pytest_longctx.reports.format import visible


@dataclass(frozen=True)
class JunitCase:
    """One test: its name, its outcome (PASS, FAIL, or n/a for a skip), the lines it fails or is skipped with, and its
    properties."""

    name: str
    word: str
    lines: list[str]
    properties: list[tuple[str, Any]]


@dataclass
class JunitFile:
    """A junit file being made: the suite's properties (``add_global_property``, as pytest's junit reporter takes them)
    and the tests."""

    properties: list[tuple[str, str]] = field(default_factory=list)
    cases: list[JunitCase] = field(default_factory=list)

    def add_global_property(self, name: str, value: Any) -> None:
        self.properties.append((name, str(value)))

    def add(self, case: JunitCase) -> None:
        self.cases.append(case)

    def text(self) -> str:
        failures = sum(case.word == FAIL for case in self.cases)
        skipped = sum(case.word == NA for case in self.cases)
        root = ET.Element("testsuites", name="pytest tests")
        suite = ET.SubElement(root, "testsuite", name="pytest", errors="0", failures=str(failures), skipped=str(skipped),
                              tests=str(len(self.cases)), time="0.000",
                              timestamp=datetime.now(timezone.utc).astimezone().isoformat(),
                              hostname=socket.gethostname())
        _properties(suite, self.properties)
        for case in self.cases:
            element = ET.SubElement(suite, "testcase", classname="longctx", name=visible(case.name), time="0.000")
            if case.properties:
                _properties(element, case.properties)
            text = "\n".join(visible(line) for line in case.lines)
            if case.word == FAIL:
                ET.SubElement(element, "failure", message=text.splitlines()[0] if text else "failed").text = text
            elif case.word == NA:
                ET.SubElement(element, "skipped", type="pytest.skip", message=text.splitlines()[0] if text else "n/a").text = text
        return '<?xml version="1.0" encoding="utf-8"?>' + ET.tostring(root, encoding="unicode") + "\n"

    def write(self, path: str) -> None:
        write_text_atomically(path, self.text())


def _properties(parent: ET.Element, found: list[tuple[str, Any]]) -> None:
    holder = ET.SubElement(parent, "properties")
    for name, value in found:
        ET.SubElement(holder, "property", name=visible(str(name)), value=visible(str(value)))
