"""What a comparison may depend on besides the two fields: the `Policy` (alpha, thresholds, both
environments, whether the two sides are different implementations), the dtype tolerances, and
`verdict`, the constructor every comparer returns its `Outcome` with. Shared by the deterministic
comparers (harness/checking/compare.py) and the statistical ones (harness/checking/compare_stats.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any

from harness.schema import Category, Field, Outcome, Status
from harness.settings.config import Thresholds
from harness.store.env import numerics_differences

# torch.testing.assert_close defaults (rtol, atol) per dtype; tests/test_compare.py checks this
# table against torch itself.
TOLERANCES: dict[str, tuple[float, float]] = {
    "fp64": (1e-7, 1e-7),
    "fp32": (1.3e-6, 1e-5),
    "fp16": (1e-3, 1e-5),
    "bf16": (1.6e-2, 1e-5),
}
# unit roundoff u = 2^-(mantissa bits + 1)
UNIT_ROUNDOFF: dict[str, float] = {"fp64": 2.0**-53, "fp32": 2.0**-24, "fp16": 2.0**-11, "bf16": 2.0**-8}


@dataclass(frozen=True)
class Policy:
    """Everything a comparison may depend on besides the two fields.

    implementations_differ: the two sides come from different code (transformers vs the reference
    engine), so their numerics differ even in one environment.
    witness: the case's model's rounding witness in a low-precision run (harness/engine/witness.py),
    where it widened the allowances: `thresholds` are already scaled by it (`Thresholds.for_witness`),
    this says why in a detail (None: the thresholds as configured).
    """

    alpha: float = 0.01
    thresholds: Thresholds = field(default_factory=Thresholds)
    observed_env: dict[str, Any] | None = None
    baseline_env: dict[str, Any] | None = None
    implementations_differ: bool = False
    witness: float | None = None  # the model's rounding witness its low-precision allowances were scaled by (thresholds)

    def numerics_differences(self) -> list[str]:
        """Why the two sides may round differently ([] = bit-identical numerics expected)."""
        diffs = numerics_differences(self.observed_env, self.baseline_env)
        return [*diffs, "implementation"] if self.implementations_differ else diffs

    def with_alpha(self, alpha: float) -> Policy:
        return replace(self, alpha=alpha)


UPGRADE_KEYS = ("transformers", "torch", "tokenizers")  # env keys whose change makes an upgrade


def is_upgrade(env: dict[str, Any] | None, baseline_env: dict[str, Any] | None) -> bool:
    """The baseline was taken under other library versions than this run (an upgrade check, `harness
    compare` of two releases): only then can a failure be the baseline's too, not the upgrade's."""
    env, base = env or {}, baseline_env or {}
    return any(env.get(k) != base.get(k) for k in UPGRADE_KEYS)


def verdict(name: str, kind: str, status: Status, detail: str = "", category: Category | str = Category.NONE,
            diff: dict[str, Any] | None = None, p_value: float | None = None) -> Outcome:
    """The outcome of comparing one field (suite and case are filled in by the checking core)."""
    return Outcome("", "", name, kind, status, detail, category, dict(diff or {}), p_value=p_value)


def short(value: Any, limit: int = 80) -> str:
    text = json.dumps(value) if not isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def dtype_of(f: Field, env: dict[str, Any] | None) -> str:
    return str(f.extras.get("dtype") or (env or {}).get("dtype") or "fp32")


def coarser(a: str, b: str) -> str:
    """The dtype with the larger unit roundoff (unknown names count as fp32)."""
    return max((a, b), key=lambda d: UNIT_ROUNDOFF.get(d, UNIT_ROUNDOFF["fp32"]))
