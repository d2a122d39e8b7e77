"""The power analysis behind the plan's P, made before any base of this study existed.

The pilot's base (results/testbed/report.md: bridge pass@1 0.293 and pass@(64, 5) 0.88, math
pass@1 0.224 and pass@(64, 0) 0.94, on 100 problems) is all that is known of the recipe's bases.
Per-problem success rates are modelled as a Beta distribution with that mean pass@1 and that
share of problems solved at least once in 64 samples; `passkt.eval.power` (what `passkt power`
runs) then simulates paired comparisons from 2,000 problems drawn from it. Once a base of this
study is evaluated, the summary quotes `passkt power` on its own rates beside the P used.

    python results/powered/prior_power.py      # about a minute on one core
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import brentq
from scipy.special import betaln

from passkt.eval.power import required_problems, smallest_change

PILOT = {"C (bridge)": (0.293, 0.88), "A (math)": (0.224, 0.94)}


def beta_rates(pass1: float, covered: float, n: int = 64, size: int = 2000) -> np.ndarray:
    """Rates from Beta(a, b) with mean ``pass1`` and P(solved in n samples) = ``covered``."""

    def gap(a: float) -> float:
        b = a * (1 - pass1) / pass1
        return np.exp(betaln(a, b + n) - betaln(a, b)) - (1 - covered)

    a = brentq(gap, 1e-3, 50)
    return np.random.default_rng(0).beta(a, a * (1 - pass1) / pass1, size=size)


for name, (pass1, covered) in PILOT.items():
    rates = beta_rates(pass1, covered)
    need = required_problems(rates, delta=0.04, n=64, k=64, level=0.05, sims=1000)
    power = need.achieved
    print(f"{name}: {need.problems} problems detect +0.04 in pass@64 with power {power:.2f}")
    for problems in (300, 500, 800):
        least = smallest_change(rates, problems=problems, n=64, k=64, sims=500)
        print(f"  {problems} problems detect {least.delta:+.3f} with power 0.8")
