"""What happened to a gate run, the one state every report's headline is made from: PASS only where every
selected check was judged and passed; FAIL where a check failed or something kept the gate from judging (no
baseline, scoring failed); otherwise what happened instead: the gate did not run (the model did not load), the
run stopped before its checks were all judged (Ctrl-C, ``-x``, an error), or nothing was selected (``-k`` or
``-m`` deselected every test of the gate). pytest's exit status is the front end's and stands as it is."""
from __future__ import annotations

from dataclasses import dataclass

PASS, FAIL = "PASS", "FAIL"  # a check's words too (gate/verdict.py); this module loads nothing, as the plugin's hooks need
NOT_RUN, STOPPED, NOTHING_SELECTED = "NOT RUN", "STOPPED", "NOTHING SELECTED"


@dataclass(frozen=True)
class Happened:
    """What the front end saw of a run besides the verdicts (the plugin counts the gate's tests as pytest runs
    them); the defaults are a run that judged all it was asked (``longctx compare`` of two files)."""

    selected: int | None = None  # the gate's tests selected; None: not counted
    judged: int | None = None  # of them, those that ran to an outcome (passed, failed or skipped)
    failed: int = 0  # of them, those that failed
    not_run: str | None = None  # why the gate never judged anything (the model did not load)
    stopped: str | None = None  # why the run ended before its tests all ran, or went wrong

    def incomplete(self) -> str | None:
        """Why the run did not judge every selected check; None where it did."""
        if self.selected == 0:
            return "nothing was selected: every test of the gate was deselected (-k, -m)"
        if self.not_run or self.stopped:
            return self.not_run or self.stopped
        if self.selected is not None and self.judged is not None and self.judged < self.selected:
            return f"{self.selected - self.judged} of the {self.selected} selected tests of the gate did not run"
        return None

    def word(self, judged_failing: bool) -> str:
        """The headline's word: NOT RUN where the model did not load, FAIL where a check failed (``judged_failing``:
        the comparison's, or a gate test that failed), else PASS only where nothing kept a selected check from being
        judged."""
        if self.selected == 0:
            return NOTHING_SELECTED
        if self.not_run:  # nothing was judged: what the checks say without a model is not a verdict on it
            return NOT_RUN
        if judged_failing or self.failed:
            return FAIL
        return STOPPED if self.incomplete() else PASS
