"""A synthetic `Results` that exercises every part of the report: every status, every field
kind, every known diff key, all three charts, and hostile strings in every text slot.

Test data, not part of the package: the report's own tests (HTML, browser, JUnit, CLI) import
it as `report_sample` (tests/ has no __init__.py, so pytest puts tests/ on sys.path). Handy for
looking at the page, from the repository root:
    PYTHONPATH=tests python -c "from pathlib import Path; from harness.report import render; \
from report_sample import sample_results; print(render(sample_results(), Path('reports/sample')))"
"""

from __future__ import annotations

from harness.schema import Outcome, Results, Status

# Closes an attribute, opens a script and an event handler: must show up as text, never run.
HOSTILE = "\"'><script>document.title='PWNED'</script><img src=x onerror=\"document.body.dataset.pwned=1\">"

BIAS_POINTS = (  # w, tv_exact, tv_measured, tv_ci, acceptance_exact, acceptance_measured, acceptance_ci, status
    (0.0, 0.31, 0.30, [0.27, 0.33], 0.55, 0.57, [0.52, 0.61], Status.PASS),
    (0.25, 0.23, 0.24, [0.21, 0.27], 0.63, 0.62, [0.58, 0.66], Status.PASS),
    (0.5, 0.15, 0.16, [0.13, 0.19], 0.72, 0.70, [0.66, 0.74], Status.CHANGED),
    (0.75, 0.08, 0.09, [0.06, 0.12], 0.77, 0.78, [0.74, 0.82], Status.PASS),
    (1.0, 0.0, 0.08, [0.05, 0.11], 0.81, 0.80, [0.76, 0.84], Status.REGRESSION),
)
LATENCY = (  # path, diff, status: calibration units with a baseline_ratio, or relative with a tolerance
    ("tiny-llama/assisted", {"ratio": 1.02, "baseline_ratio": 1.0, "noise_band": 0.1}, Status.PASS),
    ("tiny-llama/prompt_lookup", {"ratio": 1.6, "baseline_ratio": 1.2, "noise_band": [1.1, 1.3]}, Status.REGRESSION),
    ("tiny-llama/mtp", {"ratio": 0.8, "baseline_ratio": 0.85, "noise_band": 0.08}, Status.PASS),
    ("tiny-llama/static-cache", {"ratio": 1.25, "tolerance": 0.1, "p_slower": 0.0004, "p_faster": 0.99,
                                 "alpha": 0.01, "median_old": 0.8, "median_new": 1.0, "n_old": 30, "n_new": 30},
     Status.REGRESSION),
)
ACCEPTED_PER_STEP = [4, 3, 0, 4, 2, 1, 4, 4, 3, 2, 0, 1, 4, 2]
DRAFTED_PER_STEP = [4] * len(ACCEPTED_PER_STEP)


def token_outcomes() -> list[Outcome]:
    return [
        Outcome(
            "greedy", "tiny-llama/assisted/dynamic/p0", "tokens", "tokens", Status.REGRESSION,
            "tokens differ at step 7 (margin 2.31, far above the bf16 tie epsilon)", "real-change",
            {
                "first_divergence": {
                    "step": 7, "old_token": 412, "new_token": 88, "margin": 2.31,
                    "old_text": "One day Anna went to the market. She bought a red apple",
                    "new_text": "One day Anna went to the market. She saw a blue book",
                    "common_prefix_text": "One day Anna went to the market. She ",
                },
                "old": [1, 5, 9, 412, 3],
                "new": [1, 5, 9, 88, 7],
            },
        ),
        Outcome(
            "greedy", "tiny-llama/mtp/static/p1", "tokens", "tokens", Status.CHANGED,
            "tie flip at step 3 (margin below the bf16 tie epsilon)", "tie-flip",
            {
                "first_divergence": {
                    "step": 3, "old_token": 5, "new_token": 6, "margin": 0.0004, "tie_epsilon": 0.0078,
                    "old_text": "In the evening the wind was cold", "new_text": "In the evening the sky was grey",
                }
            },
        ),
        Outcome(
            "greedy", "tiny-llama/plain/dynamic/batch", "tokens", "tokens", Status.REGRESSION,
            "tokens differ from row 1 step 5: old [17, 4] vs new [23, 4] (margin 0.9 >= tie eps 0.0078 for bf16)",
            "real-change",
            {
                "divergences": [
                    {"row": 0, "step": 9, "old": [31, 2], "new": [30, 2], "margin_new": 0.001, "margin_old": 0.002,
                     "margin": 0.001, "tie_eps": 0.0078, "dtype": "bf16", "tie_flip": True},
                    {"row": 1, "step": 5, "old": [17, 4], "new": [23, 4], "margin_new": 0.9, "margin_old": 1.1,
                     "margin": 0.9, "tie_eps": 0.0078, "dtype": "bf16", "tie_flip": False},
                ],
                "numerics_differ": ["device", "dtype"],
            },
        ),
        Outcome("greedy", "tiny-llama/plain/dynamic/p9", "tokens", "tokens", Status.NEW, "no baseline record yet"),
        Outcome("greedy", "tiny-llama/plain/dynamic/p0", "text", "exact", Status.MISSING,
                "recorded in the baseline but not observed; accept its removal with `harness regen`", "missing-field"),
        Outcome(
            "greedy", "tiny-llama/mtp/static/p9", "tokens", "tokens", Status.SKIPPED,
            "use_mtp is not supported by this transformers",
        ),
    ]


def other_outcomes() -> list[Outcome]:
    return [
        Outcome(
            "greedy", "tiny-llama/assisted/dynamic/p0", "logits", "tensor", Status.PASS, "max abs err 3e-6",
            "tolerated-drift", {"max_abs_err": 3e-6, "max_rel_err": 1e-5, "rtol": 1.3e-6, "atol": 1e-5},
            against="reference",
        ),
        Outcome(
            "cache", "tiny-gemma/plain/static/p0", "layer_classes", "exact", Status.REGRESSION,
            "cache layer classes changed", "real-change",
            {
                "deepdiff": {
                    "values_changed": {"root[2]": {"old_value": "SlidingWindowLayer", "new_value": "DynamicLayer"}},
                    "iterable_item_added": {"root[4]": "ChunkedLayer"},
                }
            },
        ),
        Outcome(
            "capabilities", "probe", "use_mtp", "capability", Status.CHANGED, "use_mtp is supported now",
            "feature-added", {"added": ["use_mtp", "mtp_heads"], "removed": ["legacy_cache"], "old": False, "new": True},
        ),
        Outcome(
            "acceptance", "tiny-llama/assisted/sampling", "accepted", "rate", Status.PASS, "k/n 34/56 vs 36/56",
            "", {"accepted_per_step": ACCEPTED_PER_STEP, "drafted_per_step": DRAFTED_PER_STEP,
                 "old": {"k": 36, "n": 56, "rate": 0.643}, "new": {"k": 34, "n": 56, "rate": 0.607},
                 "p_value": 0.3, "alpha": 0.01, "holm_rank": 3},
        ),
        Outcome(
            "sampling", "tiny-llama.ensemble.w0.3.temperature", "exact_emitted", "deviation", Status.CHANGED,
            "known deviation: TV 0.242 (baseline 0.242, tolerance 0.0001): the drafter's processors as applied "
            "differ from the target's", "known-deviation",
            {"tv": 0.242, "tv_baseline": 0.242, "detectable_tv": 1e-4, "at": "call 1 step 2 position 2",
             "mechanism": ["the drafter's processors as applied [Temperature, Temperature] are not the target's"]},
        ),
        Outcome(
            "sampling", "tiny-llama.ensemble.w0.3.temperature", "joint_bias_vs_target", "exact", Status.INFO,
            "exact TV(emitted, target) = 0.3186 over the bins; measured 0.3270 (n = 300)", "bias",
            {"w": 0.3, "bias_exact": 0.3186, "tv_to_target": 0.327, "tv_to_target_ci": [0.11, 0.54]},
        ),
    ]


def chart_outcomes() -> list[Outcome]:
    bias = [
        Outcome(
            "ensemble", f"tiny-llama/ensemble/w{w}", "tv", "distribution", status,
            "TV above the exact bias" if status is Status.REGRESSION else "", "bias",
            {"w": w, "tv_exact": tv_e, "tv_measured": tv_m, "tv_ci": tv_ci,
             "acceptance_exact": a_e, "acceptance_measured": a_m, "acceptance_ci": a_ci},
        )
        for w, tv_e, tv_m, tv_ci, a_e, a_m, a_ci, status in BIAS_POINTS
    ]
    latency = [
        Outcome(
            "latency", path, "latency", "latency", status,
            "slower than the band" if status is Status.REGRESSION else "", "slowdown" if status is Status.REGRESSION
            else "", diff,
        )
        for path, diff, status in LATENCY
    ]
    return bias + latency


SAMPLING_CASE = "my-model.prompt_lookup.top_k.short-0-70.k2"  # a long id, and a misfit that squeezes the table
CHECKPOINT_OLD = {"config.json": "a" * 64, "model.safetensors": "1" * 64}
CHECKPOINT_NEW = {"config.json": "a" * 64, "model.safetensors": "2" * 64, "generation_config.json": "3" * 64}


def sampling_outcomes() -> list[Outcome]:
    """Two sampling rows: one whose fit passes while the case's `joint` regressed against its record
    (the table must not say pass for it), one that misfits with long cells."""
    out = []
    for case, fit_status, record_status in ((SAMPLING_CASE, Status.PASS, Status.REGRESSION),
                                            ("tiny-llama.ensemble.w0.3.min_p.long-1-80.k2", Status.REGRESSION,
                                             Status.PASS)):
        misfit = [{"cell": f"{12 + i} {40 + i} other-tokens", "observed": 90 + i, "expected": 31.5, "residual": 10.4}
                  for i in range(3)]
        out += [
            Outcome("sampling", case, "joint", "distribution", record_status, "vs its record", "distribution-shift"
                    if record_status is Status.REGRESSION else "", {"n": 200, "p_value": 1e-6}),
            Outcome("sampling", case, "joint_vs_exact", "distribution", fit_status, "fit", "", {
                "n": 20000, "p_value": 0.4 if fit_status is Status.PASS else 1e-7, "misfit": misfit}, "reference"),
            Outcome("sampling", case, "joint_bias_vs_target", "exact", Status.PASS, "bias", "bias",
                    {"tv_to_target": 0.06, "tv_to_target_ci": [0.0, 0.2], "bias_exact": 0.0}),
        ]
    return out


def memory_outcomes() -> list[Outcome]:
    """A latency case's memory: one field that grew past the tolerance."""
    return [Outcome("latency", "tiny-llama.prefill", "memory_prefill_long_dynamic", "memory", Status.REGRESSION,
                    "more memory: peak 308,760 -> 401,388 bytes (x1.300); tolerance 10%", "memory-growth",
                    {"old": {"peak_bytes": 308760, "allocated_bytes": 2795640},
                     "new": {"peak_bytes": 401388, "allocated_bytes": 3634332},
                     "ratios": {"peak_bytes": 1.3, "allocated_bytes": 1.3}, "tolerance": 0.1})]


def checkpoint_outcomes() -> list[Outcome]:
    """A user model whose checkpoint changed, and a difference on its case that follows from it."""
    case = "my-model.plain.dynamic.short-0.greedy"
    return [
        Outcome("outputs", case, "checkpoint", "checkpoint", Status.CHANGED,
                "the checkpoint changed (generation_config.json added (sha256 333333333333); model.safetensors sha256 "
                "111111111111 -> 222222222222)", "checkpoint-changed", {"old": CHECKPOINT_OLD, "new": CHECKPOINT_NEW}),
        Outcome("outputs", case, "first_logits", "tensor", Status.REGRESSION, "max abs err 0.8", "real-change",
                {"max_abs_err": 0.8, "max_rel_err": 0.1, "rtol": 1.3e-6, "atol": 1e-5}),
    ]


WRITES = [{"path": "tf5.14.0-torch2.6.0-cuda-sm90-bf16/greedy/tiny-llama.plain.dynamic.p9.json",
           "fields": {"tokens": "new", "text": "new"}, "replaced_unreadable": ""}]


def hostile_outcome() -> Outcome:
    return Outcome(
        # the category is a closed vocabulary (schema.Category): only free text can be hostile
        HOSTILE, HOSTILE, HOSTILE, "exact", Status.REGRESSION, HOSTILE, "real-change",
        {HOSTILE: HOSTILE, "first_divergence": {"step": 2, "old_text": HOSTILE + " old", "new_text": HOSTILE + " new"},
         "deepdiff": {"values_changed": {HOSTILE: {"old_value": HOSTILE, "new_value": 1}}},
         # reaches the chart titles, tooltips and row labels too
         "w": 0.5, "tv_exact": 0.1, "ratio": 1.1},
    )


def sample_results() -> Results:
    return Results(
        env={"transformers": "5.14.0", "torch": "2.6.0", "device": "cuda:0 NVIDIA H200", "dtype": "bfloat16",
             "threads": 4, "hostile": HOSTILE},
        baseline_env={"transformers": "5.13.0", "torch": "2.6.0", "device": "cpu", "dtype": "float32",
                      "threads": 4, "only_in_baseline": "x"},
        outcomes=token_outcomes() + other_outcomes() + chart_outcomes() + memory_outcomes() + sampling_outcomes() + checkpoint_outcomes()
        + [hostile_outcome()],
        meta={"command": "harness check suites/", "duration_s": 83.2, "alpha": 0.01, HOSTILE: HOSTILE,
              "writes": WRITES, "write_rule": "fields without a record are written", "golden_dir": "golden/records"},
    )
