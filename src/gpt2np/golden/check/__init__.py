"""``gpt2np check-port``: run a port's program over a versioned suite of cases (forward passes,
decode steps, a long cache, a left-padded batch, the tokenizer corpus, sampler settings) and
compare what it writes with gpt2np's goldens. ``suite`` defines the cases, ``runner`` the file
protocol and the report; docs/golden-files.md ("Checking a port") documents both."""

from __future__ import annotations

from .runner import CASE_FORMAT, CaseResult, CheckReport, check_port
from .suite import QUICK_SAMPLER, SUITE_VERSION, SUITES, Case, suite_cases

__all__ = [
    "CASE_FORMAT",
    "QUICK_SAMPLER",
    "SUITES",
    "SUITE_VERSION",
    "Case",
    "CaseResult",
    "CheckReport",
    "check_port",
    "suite_cases",
]
