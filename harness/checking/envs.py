"""Two recorded environments compared, record by record, with the rules of a live run: what
`harness compare` and `harness matrix` report, without running anything."""

from __future__ import annotations

from harness.checking.humane import relative_to
from harness.schema import Results
from harness.settings.config import HarnessConfig
from harness.store.records import GoldenStore


def compare_envs(store: GoldenStore, settings: HarnessConfig, key_a: str, key_b: str) -> Results:
    """Every record of B against A's through the checking core (per-case Holm at alpha / number
    of compared cases, as a live run decides per test)."""
    from harness.checking import (
        stats,  # numpy / scipy / torch: imported when comparing, not by every CLI command
    )
    from harness.checking.core import compare_records

    records_a, records_b = store.env_records(key_a), store.env_records(key_b)
    compared = len(set(records_a) & set(records_b))
    alpha = stats.per_test_alpha(settings.alpha, compared)
    outcomes = compare_records(records_a, records_b, alpha=alpha, thresholds=settings.thresholds,
                               name_a=key_a, name_b=key_b)
    meta = {"command": "harness compare", "env_key": key_b, "baseline_key": key_a, "alpha": settings.alpha,
            "alpha_per_test": alpha, "compared_cases": compared, "golden_dir": relative_to(settings.rootdir, store.root),
            "multiple_testing": "Bonferroni across cases (alpha/m, m rounded up to a power of two), Holm within a case"}
    return Results(env=store.env_of(key_b) or {}, baseline_env=store.env_of(key_a), outcomes=outcomes, meta=meta)
