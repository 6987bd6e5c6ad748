"""The quick tier: what `harness check` runs of the zoo by default, so the everyday command fits its
budget (60 s on 2 quiet cores, benchmarks/budgets.json); `--budget full` (or `[tool.harness]
budget = "full"`) runs the whole recorded grid, as `harness regen` always does.

The tier is a selection, not a second grid: every case keeps its record, its id and its fields;
the cases it does not run are deselected (their records are not `missing`), and m, the number of
golden tests behind the per-test alpha, is still the whole grid's (harness/plugin/selection.py),
so a case decides exactly as in a full run. What it keeps of the zoo, per suite (`RULES`;
every other suite runs whole):

| suite | kept | what the rest repeats |
|---|---|---|
| outputs | every model x path x cache greedy on the short prompt; plain also on the long one | the speculative paths' long prompt repeats their short prompt's code path (plain's long prompt crosses the sliding / chunked windows); a `.sample` case's draws are the sampling suite's `.default` case's |
| sampling | plain at its default, combined (temperature, top-k, top-p, min-p and repetition penalty chained), constraints, filters and top-h settings; the other paths at the default setting, the ensemble at w0.3, MTP on glm4moe-mtp | each single processor runs inside plain's combined case (the white box checks every sampled decision of it exactly); a path's other settings combine processors plain checks with its verifier the default checks; w0.7's verification step is drawn exactly by the bias suite's w0.7.ctx0; mellum-mtp's draws cost ~4x glm4moe-mtp's on the same candidate generator |
| bias | each verifier (lossless, w0.3, w0.7) at the first context | the other contexts repeat the same verification step at other probabilities |
| compiled | llama-target | mistral-sliding: the static cache's sliding-window layers (their recompiles, transformers #44609) - the same compiled path on another cache layer |
| latency | llama-target's prefill and decode (dynamic and static cache) | generate() per path - the speculative speedups - and the serving paths (compiled, continuous batching) are timed in the full run (~35 s and ~25 s alone) |

Not applied (the run is full) under `--budget full`, `--deep`, `harness regen`, an injected fault,
a case selection (`--harness-case`, `harness check --suite`, pytest's `-k` or a node id) and
a one-off `--model` run; never to your own models' cases (their plan is harness/settings/budget.py's).
Pure functions over plain data.
"""

from __future__ import annotations

from collections.abc import Callable

from harness.schema import Case

FULL_FLAG = "--budget full"
SAMPLING_MTP = "glm4moe-mtp"  # the MTP model the quick tier samples
SAMPLING_WEIGHT = 0.3  # the ensemble weight it samples (w0.7's verification step: the bias suite's w0.7.ctx0)
COMBINED = ("temperature", "top_k", "top_p", "min_p", "repetition")  # the processors plain's `combined` case chains

# suite -> (which zoo cases the tier keeps, what the rest repeats)
RULES: dict[str, tuple[Callable[[Case], bool], str]] = {
    "outputs": (lambda c: c.decoding == "greedy" and (c.prompt == "short-0" or c.path == "plain"),
                "the speculative paths' long prompt and the .sample cases (the sampling suite's .default draws)"),
    "sampling": (lambda c: (c.path == "plain" and c.param("setting") not in COMBINED)
                 or (c.param("setting") == "default" and (c.path != "mtp" or c.model == SAMPLING_MTP)
                     and (c.weight is None or c.weight == SAMPLING_WEIGHT)),
                 "plain's single-processor settings (its combined case runs them together), the speculative "
                 "paths' other settings, the ensemble at w0.7 and mellum-mtp's draws"),
    "bias": (lambda c: c.param("ctx") == 0, "the second and third contexts of each verifier"),
    "compiled": (lambda c: c.model == "llama-target", "mistral-sliding's compiled static cache (transformers #44609's "
                 "recompiles: a sliding window's cache layer)"),
    "latency": (lambda c: not c.id.endswith((".generate", ".serving")),
                "generate() per path (the speculative speedups) and the serving paths (compiled, continuous batching)"),
}


def keeps(suite: str, case: object) -> bool:
    """Does the quick tier run this zoo case? (A test without a harness Case, or of a suite without
    a rule, always runs.)"""
    if not isinstance(case, Case) or suite not in RULES:
        return True
    return RULES[suite][0](case)


def left_out_line(dropped: dict[str, int], total: int) -> str:
    """The run's one line on what the tier did not run: cases per suite, and how to run them."""
    parts = ", ".join(f"{suite} {n} ({RULES[suite][1]})" for suite, n in sorted(dropped.items()) if n)
    n = sum(dropped.values())
    return (f"quick tier: {n} of the zoo's {total} cases not run - {parts}; `harness check {FULL_FLAG}` runs every "
            "case (harness/settings/tier.py)")
