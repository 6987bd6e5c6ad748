"""How many of the zoo's greedy steps the tokens comparer treats as near-ties in bf16 (issue 35).

    python benchmarks/tie_fraction.py [--dtype bf16] [--json FILE]

Runs generate() greedy on every greedy outputs case of the zoo (harness/cases/ `outputs`, each
path the installed transformers runs) in the given dtype, and for each new token takes its top-2
margin m and its rounding scale S (harness/engine/decode.py `top2_scale`). Prints the fraction of
steps with m below the fixed tie_eps_<dtype> (the old rule) and with m <= c u S (the per-step rule of
harness/checking/compare.py `tie_eps_at`, c = tie_rounding_ulps): a step counted is one where a
divergence would be called a tie-flip, so whatever a fault changes there passes.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from harness import cases  # noqa: E402
from harness.checking.policy import UNIT_ROUNDOFF  # noqa: E402
from harness.settings.config import Thresholds  # noqa: E402
from harness.subjects.hf import Zoo  # noqa: E402


def steps(dtype: str) -> list[tuple[str, float, float]]:
    """(case id, margin, scale) of every greedy step of the zoo's greedy outputs cases."""
    zoo = Zoo(dtype=dtype)
    out = []
    for case in cases.outputs():
        if case.decoding != "greedy":
            continue
        got = zoo.generate(case)
        if got.error is not None:
            continue
        out += [(case.id, m, s) for m, s in zip(got.margins, got.scales, strict=True)]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", default="bf16")
    parser.add_argument("--json", help="write every (case, margin, scale) here")
    args = parser.parse_args()
    t = Thresholds()
    found = steps(args.dtype)
    fixed = t.tie_eps(args.dtype)
    c, u = t.tie_rounding_ulps, UNIT_ROUNDOFF[args.dtype]
    old = sum(m < fixed for _, m, _ in found)
    new = sum(m <= c * u * s for _, m, s in found)
    eps = sorted(c * u * s for _, _, s in found)
    print(f"{len(found)} greedy steps of {len({k for k, _, _ in found})} cases in {args.dtype}")
    print(f"  ties by the fixed tie_eps_{args.dtype} = {fixed:g}: {old} ({old / len(found):.1%})")
    print(f"  ties by m <= {c:g} u (|x1| + |x2| + 2 rms): {new} ({new / len(found):.1%}); per-step eps median "
          f"{eps[len(eps) // 2]:.3g}, max {eps[-1]:.3g}")
    if args.json:
        Path(args.json).write_text(json.dumps(found), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
