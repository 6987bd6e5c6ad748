"""results.json -> one self-contained HTML report (and JUnit XML for CI).

Public API
----------
- `render(results, out_dir) -> Path`: writes `out_dir/index.html` (inline CSS and SVG, no
  script, no external resource) and returns its path. Renderers return text; every report file
  is written by harness/report/output.py (atomically), from findings grouped once per run.
- `write_junit(results, path) -> Path`: JUnit XML, one <testcase> per outcome
  (classname = suite, name = "case::field"); regression -> <failure>, skipped -> <skipped>.
- `load_results(path) -> Results`: reads results.json; raises `ResultsFileError` (a ValueError
  whose message starts with the file name) when it is missing, unreadable, not JSON, of an
  unsupported `results_version`, or malformed.

How `Outcome.diff` is rendered
------------------------------
Known keys get a dedicated rendering; every other key lands in a generic key/value table, so
any JSON shape is safe to emit.

- "old"/"new" (also "old_text"/"new_text", "expected"/"observed"): both sides, the common
  prefix muted and the diverging rest highlighted (strings and lists); two mappings (e.g. a
  rate's {"k", "n", "rate"}) become a key / old / new table.
- "first_divergence": {"step", "old_token", "new_token", "margin", "old_text", "new_text",
  "common_prefix_text"}: texts may be full decodes or the continuations after
  "common_prefix_text"; without it the common prefix is computed. Other keys are listed.
- "divergences": a list of per-row divergences as compare.compare_tokens emits them
  ({"row", "step", "old", "new" (next tokens), "margin", "margin_old", "margin_new", "tie_eps",
  "tie_flip", ...}) -> a table; an entry with "old_text"/"new_text" is also shown as texts.
- "deepdiff": a deepdiff-style dict ({"values_changed": {"root[2]": {"old_value", "new_value"}},
  "dictionary_item_added": [...], ...}) or its JSON string -> a change/path/old/new table.
- "added"/"removed" (capabilities): a list, mapping or single value -> +/- chips.
- scalars "max_abs_err", "max_rel_err", "atol", "rtol", "p_value", "p_slower", "p_faster",
  "alpha", "statistic", "tv", "tv_upper", "ratio", "baseline_ratio", "noise_band", "tolerance",
  "median_old", "median_new" and the bias keys below -> a labelled table; p-values are judged
  against alpha, the latency ratio against its band.

Chart conventions (what a suite should put in `Outcome.diff`)
-------------------------------------------------------------
Charts appear only when some outcome carries their keys; every data point is an SVG
`<g data-point="KIND">` with a `<title>` tooltip.

1. Bias curve (static ensemble, per series): one point per outcome with
     "w": ensemble weight in [0, 1],
     "tv_exact": exact TV(verifier output, target) from the reference engine,
     "tv_measured": TV estimated from samples, "tv_ci": [lo, hi] interval for it,
     "acceptance_exact", "acceptance_measured", "acceptance_ci": [lo, hi] likewise,
     "series" (optional): the curve's name; default is the outcome's suite.
   Any subset of the metrics is fine (a point needs "w" and an exact or measured value).
   Alternatively one outcome may carry a whole curve: "bias_curve": [{"w": ..., "tv_exact":
   ..., ...}, ...] with the same per-point keys. Two panels per series (TV vs w, acceptance vs
   w): exact values as a dashed line with small markers (data-point="exact"), measured values
   as dots with interval bars (data-point="measured").
2. Latency per path, plotted relative to the baseline (1 = unchanged), one row per outcome
   with a numeric "ratio" (data-point="latency"). Either
     a. "ratio" = this run's time / in-run calibration and "baseline_ratio" = the same for the
        baseline record; "noise_band" = [lo, hi] in those units, or a number = relative
        half-width around baseline_ratio (0.1 -> baseline_ratio * [0.9, 1.1]); or
     b. no "baseline_ratio": "ratio" is already this run / baseline (what
        compare.compare_latency emits); the band is "noise_band" around 1, else
        [1 / (1 + t), 1 + t] from "tolerance" t (the shift test's slower / faster limits).
3. Acceptance per step: "accepted_per_step": [int, ...] tokens accepted at each verification
   step, "drafted_per_step" (optional): [int, ...] tokens drafted at each step. Drawn inside
   that outcome's diff, one bar per step (data-point="step").

Escaping: Jinja2 autoescape is on for every template; text from models, records and
environments is never marked safe.
"""

from harness.report.load import ResultsFileError, load_results
from harness.report.output import render, write_junit
from harness.report.page import render_html

__all__ = ["ResultsFileError", "load_results", "render", "render_html", "write_junit"]
