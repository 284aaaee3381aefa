"""A one-sided betting confidence sequence for the mean of bounded observations (Waudby-Smith and Ramdas,
"Estimating means of bounded random variables by betting", JRSS-B 2024), as sequential reading's ``confident``
mode uses it (gate/sequential/, docs/metrics.md#sequential-reading). No maintained library installs here:
``confseq`` does not build on this Python and ``expectation``'s releases are withdrawn, so the capital process is
written out; tests/test_sequential.py checks its coverage by simulation against a plain numpy computation."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

BET_CAP = 0.5  # c: a bet risks at most this share of the wealth (Waudby-Smith and Ramdas' c = 1/2)
PRIOR_MEAN, PRIOR_VARIANCE = 0.5, 0.25  # of the bets' plug-in estimates, in the observations' [0, 1] units (theirs)


@dataclass
class Bettor:
    """One capital process of the betting confidence sequence (Waudby-Smith and Ramdas 2024): its wealth
    ``prod(1 + lambda_i (w_i - m))`` bets that the mean of ``w >= 0`` is above ``m``, with the predictable
    plug-in bet ``lambda_t = min(sqrt(2 log(1/alpha) / (var_{t-1} t log(1 + t))), c / m)``. While the mean is
    at most ``m`` it is a non-negative supermartingale from 1, so it reaches 1/alpha with probability at most
    alpha (Ville)."""

    m: float
    alpha: float
    wealth: float = 1.0
    seen: list[float] = field(default_factory=list)
    squares: float = 0.0  # sum of (w_i - mean_i)^2, mean_i the plug-in mean after w_i

    def bet(self) -> float:
        t = len(self.seen) + 1
        variance = (PRIOR_VARIANCE + self.squares) / t
        plug_in = math.sqrt(2 * math.log(1 / self.alpha) / (variance * t * math.log(1 + t)))
        return min(plug_in, BET_CAP / self.m)

    def add(self, w: float) -> None:
        self.wealth *= 1.0 + self.bet() * (w - self.m)
        self.seen.append(w)
        mean = (PRIOR_MEAN + sum(self.seen)) / (len(self.seen) + 1)
        self.squares += (w - mean) ** 2

    @property
    def rejects(self) -> bool:
        return self.wealth >= 1 / self.alpha


def lower_bounds(ws: Sequence[float], alpha: float, upper: float = 1.0, steps: int = 60) -> list[float]:
    """The running one-sided ``1 - alpha`` lower confidence sequence of the mean of ``ws`` (each in [0, upper]):
    after each, the largest m whose bettor's wealth has reached 1/alpha (its wealth falls as m grows; the bets of
    every m share their plug-in part). Its coverage is what the decisions rest on."""
    found, best = [], 0.0
    for t in range(1, len(ws) + 1):
        lo, hi = 0.0, upper
        for _ in range(steps):
            mid = (lo + hi) / 2
            bettor = Bettor(mid, alpha)
            for w in ws[:t]:
                bettor.add(w)
            lo, hi = (mid, hi) if bettor.rejects else (lo, mid)
        best = max(best, lo)
        found.append(best)
    return found
