"""Field kinds and how each is compared: pure functions, no model loading, no I/O.

The deterministic kinds (exact, tokens, tensor, capability) live here, the statistical ones
(rate, distribution, latency) in harness/checking/compare_stats.py, the `Policy` and tolerances they share
in harness/checking/policy.py. `compare_field(name, observed, baseline, policy)` dispatches on the field's kind to one
`compare_<kind>` function and returns a `schema.Outcome` for that field (status, one-line detail
with old vs new, `Category`, structured diff, and the p-value for the statistical kinds); the
checking core (harness/checking/core.py) fills in the suite, case and side it was compared against.

| kind         | value                                   | policy |
|--------------|-----------------------------------------|--------|
| exact        | any JSON                                | deepdiff, no tolerance; any difference is a regression (detail: "key: old -> new" lines, harness/checking/humane.py) - but a value now reported where the baseline held None, and nothing else, is changed (feature-added; None where a number was: feature-removed); a field with extras `asked` (what a call ran with where the case asked for something): on what was asked where the baseline fell back is changed (feature-added), a fall-back where it was not is a regression (feature-removed) |
| tokens       | ids (list, or list of rows); extras margins (top-2 logit margin per step) | exact; a first divergence at a step whose margin (on both sides) is within the tie epsilon of the coarser dtype (bf16 / fp16 with extras scales: c u (|x1|+|x2|+2 rms) of the step, `tie_eps_at`), between envs whose numerics differ, is a "tie-flip" (pass) |
| tensor       | nested list of floats; extras dtype     | torch.testing default rtol/atol of the coarser dtype; across different numerics plus k*u*max|b| |
| rate         | {"k": int, "n": int}                    | two-sided Fisher exact two-proportion test at alpha; against an exact probability {"p": x} (the engine's): two-sided binomial test |
| distribution | counts; extras expected (exact probabilities) | G-test of fit at alpha + TV upper confidence bound; without expected: two-sample G-test vs the baseline counts |
| latency      | {"samples", "calibration", "cpu", "cpu_calibration"}: wall s paired with a matched calibration (a record: {"by_hardware": {class: ...}}) | paired median log ratio vs the record's on the same hardware class; z test with between-run variance beyond (1 + tolerance) at alpha; a busy machine is not judged |
| memory       | {"peak_bytes": int, "allocated_bytes": int} | a growth beyond (1 + memory_tolerance) is a regression, a saving a change |
| capability   | bool, {feature: bool} or [features]; a path's extras path, ignored | added / removed -> changed (feature-added / feature-removed); accepted but silently doing nothing -> regression (feature-ignored; a path's, in a first run too); a path that ran in the baseline and does not run now -> regression (path-lost) |
| checkpoint   | {file: sha256} of your model's directory (harness/zoo/checkpoint.py) | any file added, removed or changed -> changed (checkpoint-changed): your change, not the library's; the report puts it first and groups the differences of its cases under it |
| deviation    | {"tv": x, "positions": n}; extras detectable_tv, worst_at, mechanism, deviating_at, min_positions | an observed quantity's distance from its exact value (computed in the run): fewer positions observed than the case generated (or than the baseline) is a regression (coverage-lost); within detectable_tv passes; beyond it, the deviation the baseline already has - same mechanism, worst position, deviating positions and size within the tolerance - is changed (known-deviation), any other a regression, one that disappears changed (fixed); decided without a baseline too |

Statistical kinds (`STATISTICAL_KINDS`) decide at `policy.alpha`; the plugin chooses that alpha
so the whole run keeps its family-wise false-alarm rate (see stats.py).

A field that carries its own exact expectation - a deviation, a distribution with extras
"expected", a rate with extras "expected" - is judged against it even when there is no baseline
(`judged_alone`): a misfit or a deviation is a regression in a first run too; a pass is `new`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from harness.checking import stats
from harness.checking.compare_stats import compare_distribution, compare_latency, compare_memory, compare_rate
from harness.checking.humane import change_detail
from harness.checking.oracles import numbers_masked
from harness.checking.policy import TOLERANCES, UNIT_ROUNDOFF, Policy, coarser, dtype_of, short, verdict
from harness.checking.rounding import LOW_PRECISION, rounding_allowance, typical_magnitude, ulps_used
from harness.checking.signatures import api_transition
from harness.schema import STATISTICAL_KINDS, Category, Field, Outcome, Status
from harness.zoo.checkpoint import fingerprint_changes

# ----------------------------------------------------------------------------------------------
# exact


def _error(value: Any) -> bool:
    """An exception recorded as data by the subject boundary: {"type": ..., "message": ...}, and
    "left_changed" where the call that raised left the model changed (harness/subjects/hf_state.py
    `config_drift`: every later call on that model runs something else)."""
    return isinstance(value, dict) and {"type", "message"} <= set(value) <= {"type", "message", "left_changed"}


def _left(value: Any) -> str:
    left = value.get("left_changed") if isinstance(value, dict) else None
    return f"; and left the model changed: {', '.join(map(str, left))}" if left else ""


def same_failure(old: Any, new: Any) -> bool:
    """Two failures recorded as data that differ in their numbers only: the same exception type and message
    with sizes, indices and counts masked (a MemoryError quoting 1157120 bytes in one release and 1409792 in
    the next is the same failure), or the same message held as words."""
    if isinstance(old, str) and isinstance(new, str):
        return numbers_masked(old) == numbers_masked(new)
    if _error(old) and _error(new):
        return (old["type"] == new["type"] and numbers_masked(old["message"]) == numbers_masked(new["message"])
                and old.get("left_changed") == new.get("left_changed"))
    return False


def _error_transition(name: str, old: Any, new: Any) -> Outcome | None:
    """Between 'generates' (None) and 'raises' (an error value): raised before and generates now is
    `fixed` (changed - a crash a release fixes is not a regression); generates before and raises
    now is `broken`; another exception is `error-changed` (both regressions)."""
    if old is None and _error(new):
        return verdict(name, "exact", Status.REGRESSION, f"raises now: {new['type']}: {new['message']}{_left(new)}",
                       "broken", {"old": old, "new": new})
    if _error(old) and new is None:
        return verdict(name, "exact", Status.CHANGED, f"generates now; raised {old['type']}: {old['message']}{_left(old)}",
                       "fixed", {"old": old, "new": new})
    if _error(old) and _error(new) and same_failure(old, new):
        return verdict(name, "exact", Status.PASS, f"raises the baseline's exception, its numbers aside: {new['type']}: "
                       f"{new['message']} (was {old['message']})", "", {"old": old, "new": new})
    if _error(old) and _error(new):
        return verdict(name, "exact", Status.REGRESSION, f"raises {new['type']}: {new['message']} "
                       f"(was {old['type']}: {old['message']})", "error-changed", {"old": old, "new": new})
    return None


OUTCOME_RULES = ("error", "clean", "each")  # extras `outcome`: how a field's value says a call failed


def _failed(value: Any, rule: str) -> bool:
    """Whether an outcome field's value is a failure: "error" - an exception recorded as data, or a
    dict whose "raises" / "error" is set (`load`: {"raises": None} loaded), or an error's message;
    "clean" - a report of problems (`loading_info`: missing / unexpected / mismatched keys, error
    messages) that lists any."""
    if rule == "clean":
        return isinstance(value, dict) and any(bool(v) for v in value.values())
    if isinstance(value, str):  # an error's message (a request the library reports failed)
        return bool(value)
    return _error(value) or (isinstance(value, dict) and bool(value.get("raises") or value.get("error")))


def _outcome_transition(name: str, old: Any, new: Any, rule: str) -> Outcome | None:
    """An outcome field (extras ``outcome=<rule>``: a load or call records that it worked or how
    it failed, every time - never a field that exists only when it fails): failing before and
    working now is `fixed` (changed), working before and failing now `broken`, failing otherwise
    `error-changed` (both regressions); rule "each": a dict of such outcomes (one per attention
    implementation) or a list of them (one per request: None served, an error or its message failed),
    judged per key / position, the worst first. None when neither side failed."""
    if rule == "each" and isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        old, new = dict(enumerate(old)), dict(enumerate(new))
    if rule == "each" and isinstance(old, dict) and isinstance(new, dict):
        per = {k: _outcome_transition(f"{name}.{k}", old.get(k), new.get(k), "error") for k in {*old, *new}}
        found = [o for o in per.values() if o is not None]
        for category in ("broken", "error-changed", "fixed"):
            hit = [o for o in found if o.category.value == category]
            if hit:
                return replace(hit[0], field=name, detail="; ".join(o.detail for o in hit))
        return replace(found[0], field=name) if found else None  # each the baseline's failure, numbers aside
    before, after = _failed(old, rule), _failed(new, rule)
    if before and not after:
        return verdict(name, "exact", Status.CHANGED, f"works now ({name}); failed before: {short(old)}", "fixed",
                       {"old": old, "new": new})
    if after and not before:
        return verdict(name, "exact", Status.REGRESSION, f"fails now ({name}): {short(new)}; worked before", "broken",
                       {"old": old, "new": new})
    if before and after and same_failure(old, new):
        return verdict(name, "exact", Status.PASS, f"fails as the baseline did, its numbers aside ({name}): {short(new)}",
                       "", {"old": old, "new": new})
    if before and after:
        return verdict(name, "exact", Status.REGRESSION, f"fails otherwise ({name}): {short(new)} (was {short(old)})",
                       "error-changed", {"old": old, "new": new})
    return None


def _refusal_transition(name: str, old: Any, new: Any) -> Outcome | None:
    """A contract's call result ({"raises": type or None, "message": ..., what it left}): accepting
    an input the baseline refused is a relaxation - `changed` (feature-added), to review and accept -
    and refusing one the baseline accepted is a regression (feature-removed); the rest of the value
    (the state the call left) follows from which it did. None where neither side refused or both did."""
    if not (isinstance(old, dict) and isinstance(new, dict) and "raises" in old and "raises" in new):
        return None
    refused_before, refused_now = bool(old["raises"]), bool(new["raises"])
    if refused_before == refused_now:
        return None
    diff = {"old": old, "new": new}
    if refused_before:
        return verdict(name, "exact", Status.CHANGED, f"accepts now what the baseline refused ({old['raises']}: "
                       f"{short(old.get('message'))}); {change_detail(old, new)}", "feature-added", diff)
    return verdict(name, "exact", Status.REGRESSION, f"refuses now what the baseline accepted ({new['raises']}: "
                   f"{short(new.get('message'))}); {change_detail(old, new)}", "feature-removed", diff)


def _asked_transition(name: str, old: Any, new: Any, asked: Any) -> Outcome | None:
    """A field recording what a call really ran with where the case asked for one thing (extras `asked`:
    outputs' `cache_ran_on`, the cache a `.static` case's generate() returned): running on what was
    asked where the baseline fell back to something else is `changed` (feature-added); falling back now
    where the baseline ran on what was asked is a regression (feature-removed) - the caller's request is
    no longer honoured, whatever the warning says. None where neither side ran on what was asked."""
    if asked is None or (old != asked and new != asked):
        return None
    diff = {"old": old, "new": new, "asked": asked}
    if new == asked:
        return verdict(name, "exact", Status.CHANGED, f"runs on the {asked} asked now (the baseline fell back to "
                       f"{old})", "feature-added", diff)
    return verdict(name, "exact", Status.REGRESSION, f"falls back to {new} now where {asked} was asked (the baseline "
                   f"ran on {asked})", "feature-removed", diff)


def _reported_transition(name: str, old: Any, new: Any, diff: Any) -> Outcome | None:
    """A structure (per layer, per request) whose only differences are values now reported where the
    baseline reported none (None -> a number: 5.25's linear-attention layers answering
    get_seq_length()) is `changed` (feature-added) - whether the number is right is its in-run
    reference's to say; values no longer reported (a number -> None) are a regression (feature-removed).
    None where any other difference is there too. `diff`: deepdiff's of the two (`compare_exact`'s)."""
    if not isinstance(old, (dict, list)) or set(diff) != {"type_changes"}:
        return None
    changes = [(path, c["old_value"], c["new_value"]) for path, c in diff["type_changes"].items()]

    def number(x: Any) -> bool:
        return isinstance(x, (int, float)) and not isinstance(x, bool)

    if all(a is None and number(b) for _, a, b in changes):
        where = ", ".join(f"{p}: None -> {b}" for p, _, b in changes[:4]) + (" ..." if len(changes) > 4 else "")
        return verdict(name, "exact", Status.CHANGED, f"reports now what the baseline did not report ({where})",
                       "feature-added", {"reported": [[p, b] for p, _, b in changes]})
    if all(b is None and number(a) for _, a, b in changes):
        where = ", ".join(f"{p}: {a} -> None" for p, a, _ in changes[:4]) + (" ..." if len(changes) > 4 else "")
        return verdict(name, "exact", Status.REGRESSION, f"no longer reports what the baseline reported ({where})",
                       "feature-removed", {"unreported": [[p, a] for p, a, _ in changes]})
    return None


def _deepdiff(old: Any, new: Any) -> Any:
    """deepdiff's structural diff (imported on first use: with pydantic it takes ~0.2 s, paid by
    every pytest start that loads the plugin, also where nothing is compared)."""
    from deepdiff import DeepDiff

    return DeepDiff(old, new, verbose_level=2)


def compare_exact(name: str, observed: Field, baseline: Field, policy: Policy) -> Outcome:
    """Structural equality via deepdiff (no tolerance, types matter). Any difference -> regression,
    except the transitions of a recorded exception (`_error_transition`: a fix is `changed`), of an
    outcome field (extras `outcome`, `_outcome_transition`: a load error gone is fixed), of an entry
    point (harness/checking/signatures.py: a signature or an absent entry point, by compatibility), of
    values now reported where none were (`_reported_transition`: feature-added; the reverse
    feature-removed) and a
    field whose extras say `presentation` - how the same result is presented (a streamer's cuts of
    text whose whole is checked elsewhere): `changed` (presentation-changed), never a regression."""
    diff = _deepdiff(baseline.value, observed.value)
    if not diff:
        return verdict(name, "exact", Status.PASS, "identical")
    transition = _error_transition(name, baseline.value, observed.value)
    if transition is not None:
        return transition
    transition = api_transition(name, baseline.value, observed.value)  # an entry point, by compatibility
    if transition is not None:
        return transition
    rule = observed.extras.get("outcome")
    if rule in OUTCOME_RULES:
        transition = _outcome_transition(name, baseline.value, observed.value, rule)
        if transition is not None:
            return transition
    transition = _refusal_transition(name, baseline.value, observed.value)
    if transition is not None:
        return transition
    transition = _asked_transition(name, baseline.value, observed.value, observed.extras.get("asked"))
    if transition is not None:
        return transition
    transition = _reported_transition(name, baseline.value, observed.value, diff)
    if transition is not None:
        return transition
    if observed.extras.get("presentation"):
        return verdict(name, "exact", Status.CHANGED, change_detail(baseline.value, observed.value),
                       "presentation-changed", {"deepdiff": json.loads(diff.to_json())})
    return verdict(name, "exact", Status.REGRESSION, change_detail(baseline.value, observed.value), "real-change",
                   {"deepdiff": json.loads(diff.to_json())})


# ----------------------------------------------------------------------------------------------
# tokens


def _rows(value: Any) -> list[list[Any]]:
    if isinstance(value, list) and value and all(isinstance(v, list) for v in value):
        return value
    return [value if isinstance(value, list) else [value]]


def _margin_rows(extras: dict[str, Any], rows: int, key: str = "margins") -> list[list[float] | None]:
    """Per-row margins (or another per-step list, `key`: the "scales"), shaped like the token rows:
    a batch of rows, or one row given either flat ([m0, m1, ...]) or nested like its tokens ([[m0, m1, ...]])."""
    margins = extras.get(key)
    if margins is None:
        return [None] * rows
    if not isinstance(margins, list):
        margins = [margins]
    nested = bool(margins) and all(isinstance(m, list) for m in margins)
    shaped = margins if nested else [margins]
    return shaped + [None] * (rows - len(shaped))


def first_divergence(a: Sequence[Any], b: Sequence[Any]) -> int | None:
    """Index of the first differing position (or the shorter length if one is a prefix of the
    other); None when equal."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def _margin_at(margins: list[float] | None, step: int) -> float | None:
    if margins is None or step >= len(margins) or margins[step] is None:
        return None
    return float(margins[step])


def tie_eps_at(policy: Policy, dtype: str, scales: Sequence[float | None]) -> float:
    """The tie epsilon of one step. In bf16 / fp16, where either side gave the step's rounding scale
    S = |x1| + |x2| + 2 rms(x) of its logits x (harness/engine/decode.py `top2_scale`):

        eps = k * u * max(S_obs, S_base)          k = tie_rounding_ulps, u = the dtype's unit roundoff

    - the per-element rule of harness/checking/rounding.py (each logit of two routes differs by at
    most c u (|x_i| + rms(x))) applied to the two logits whose difference is the margin: rounding can
    close a margin only up to the sum of their allowances. Otherwise (fp32 / fp64, or no scale
    recorded - a record's tokens field, the beam's score margins) the dtype's fixed tie_eps_<dtype>, which
    also caps the per-step one."""
    fixed = policy.thresholds.tie_eps(dtype) if dtype in UNIT_ROUNDOFF else policy.thresholds.tie_eps_fp32
    known = [float(x) for x in scales if x is not None]
    if dtype in LOW_PRECISION and known:  # never looser than the fixed one (a huge logit, a non-finite scale)
        eps = policy.thresholds.tie_rounding_ulps * UNIT_ROUNDOFF[dtype] * max(known)
        return min(eps, fixed) if eps == eps else fixed
    return fixed


def compare_tokens(name: str, observed: Field, baseline: Field, policy: Policy) -> Outcome:
    """Greedy ids must match exactly. At the first divergence (step i) of a row:

    tie-flip (pass) iff  max(margin_obs[i], margin_base[i]) <= eps_i  and the envs'
    numerics differ (hardware, dtype, threads, torch, attention, or implementation), eps_i the
    step's tie epsilon of the coarser dtype (`tie_eps_at`: in bf16 / fp16 derived from the rounding
    of the two logits compared where the sides give their scales, else the dtype's fixed one);
    on the same numerics, only in bf16 / fp16 and only within one last-bit step of the logits
    (`tie_eps_same_<dtype>`: the CPU's low-precision kernels do not reproduce every bit across a
    process's history - measured, see harness/settings/config.py); otherwise a regression
    ("real-change"). Both sides' margins must be small: rounding noise of
    size d moves a margin by at most ~d, so it can only flip a step that is a near-tie on *both*
    sides; a real change (a wrong weight, a wrong mask) usually diverges where the baseline was
    sure (a 1.5x MLP fault on the zoo's Llama models diverged at baseline margins up to ~4 while
    its own margin there was small). One side's margin is used when only one was recorded.
    After a divergence the rest of the row is conditioned on a different prefix and is not
    compared. A teacher-forced reference (harness/engine/teacher_forced.py) gives one single-token
    row per step, named by the extra ``row_labels`` ("step 9", "request 1 step 3").
    """
    obs_rows, base_rows = _rows(observed.value), _rows(baseline.value)
    if len(obs_rows) != len(base_rows):
        return verdict(
            name, "tokens", Status.REGRESSION,
            f"batch size changed: old {len(base_rows)} rows vs new {len(obs_rows)}", "real-change",
            {"rows_old": len(base_rows), "rows_new": len(obs_rows)},
        )
    obs_margins = _margin_rows(observed.extras, len(obs_rows))
    base_margins = _margin_rows(baseline.extras, len(base_rows))
    obs_scales = _margin_rows(observed.extras, len(obs_rows), "scales")
    base_scales = _margin_rows(baseline.extras, len(base_rows), "scales")
    dtype = coarser(dtype_of(observed, policy.observed_env), dtype_of(baseline, policy.baseline_env))
    differs = policy.numerics_differences()
    divergences = []
    for row, (new, old) in enumerate(zip(obs_rows, base_rows, strict=True)):
        step = first_divergence(new, old)
        if step is None:
            continue
        m_new, m_old = _margin_at(obs_margins[row], step), _margin_at(base_margins[row], step)
        known = [m for m in (m_new, m_old) if m is not None]
        margin = max(known) if known else None
        eps = tie_eps_at(policy, dtype, (_margin_at(obs_scales[row], step), _margin_at(base_scales[row], step)))
        if not differs:  # the same numerics: no tie, but a low-precision kernel's last bit
            eps = getattr(policy.thresholds, f"tie_eps_same_{dtype}", None)
        tie = margin is not None and eps is not None and margin <= eps
        divergences.append({
            "row": row, "step": step, "old": old[step:step + 4], "new": new[step:step + 4],
            "margin_new": m_new, "margin_old": m_old, "margin": margin, "tie_eps": eps, "dtype": dtype,
            "tie_flip": tie,
        })
    if not divergences:
        return verdict(name, "tokens", Status.PASS, "identical")
    diff = {"divergences": divergences, "numerics_differ": differs}
    real = [d for d in divergences if not d["tie_flip"]]
    first = (real or divergences)[0]
    labels = observed.extras.get("row_labels") or baseline.extras.get("row_labels")  # rows that are steps
    where = (str(labels[first["row"]]) if labels and first["row"] < len(labels) else
             f"row {first['row']} step {first['step']}" if len(obs_rows) > 1 else f"step {first['step']}")
    change = f"old {first['old']} vs new {first['new']}"
    if real:
        if not differs and first["tie_eps"] is None:
            why = "same numerics on both sides, so no near-tie can flip"
        elif not differs and first["margin"] is not None:
            why = (f"same numerics on both sides: margin {first['margin']:.3g} >= {first['tie_eps']:.3g}, "
                   f"more than the last bit of a {dtype} kernel can close")
        elif first["margin"] is None:
            why = "no margins recorded to call it a tie"
        else:
            why = f"margin {first['margin']:.3g} >= tie eps {first['tie_eps']:.3g} for {dtype}"
        detail = f"tokens differ from {where}: {change} ({why})"
        return verdict(name, "tokens", Status.REGRESSION, detail, "real-change", diff)
    numerics = (f"numerics differ in {', '.join(differs)}" if differs else
                f"the same env: {dtype} kernels do not reproduce every last bit across a process's history")
    detail = (
        f"tie-flip at {where}: {change}, margin {first['margin']:.3g} < tie eps {first['tie_eps']:.3g} for {dtype} "
        f"({numerics})"
    )
    return verdict(name, "tokens", Status.PASS, detail, "tie-flip", diff)


# ----------------------------------------------------------------------------------------------
# tensor


def tensor_tolerance(dtype: str) -> tuple[float, float]:
    """torch.testing.assert_close's default (rtol, atol) for a canonical dtype name."""
    return TOLERANCES.get(dtype, TOLERANCES["fp32"])


def compare_tensor(name: str, observed: Field, baseline: Field, policy: Policy) -> Outcome:
    """Elementwise ``|new - old| <= atol + rtol*|old|`` with torch.testing's defaults for the
    coarser of the two dtypes; when the envs' numerics differ, plus ``k * u(dtype) * (|old_i| + t)``
    (k = thresholds.tensor_cross_env_ulps, t = `typical_magnitude`: the top magnitude without its top 1 % and fill values, robust to one huge element and to masked logits) in fp32 / fp64; in bf16 / fp16 across numerics, the
    per-element rounding rule of harness/checking/rounding.py instead
    (``atol + c * u * (max(|a_i|,|b_i|) + rms(b))``, c = thresholds.tensor_rounding_ulps) - except
    for a mixture-of-experts model's tensors (extra ``routing``: rounding flips a near-tied expert
    choice, moving a whole row; designs/backends.py `routes_experts`), which keep the coarse
    ``k * u * t`` allowance. A tensor through a linear-attention layer (extra ``recurrence``)
    takes k = thresholds.tensor_recurrent_ulps in fp32 / fp64 (its recurrent state's accumulation).
    NaN matches NaN and an infinity matches the same infinity. Reports max abs / rel error and where."""
    try:
        new = np.asarray(observed.value, dtype=float)
        old = np.asarray(baseline.value, dtype=float)
    except (TypeError, ValueError) as exc:
        return verdict(name, "tensor", Status.REGRESSION, f"not a numeric tensor: {exc}", "real-change")
    if new.shape != old.shape:
        return verdict(
            name, "tensor", Status.REGRESSION, f"shape changed: old {list(old.shape)} vs new {list(new.shape)}",
            "real-change", {"shape_old": list(old.shape), "shape_new": list(new.shape)},
        )
    dtype = coarser(dtype_of(observed, policy.observed_env), dtype_of(baseline, policy.baseline_env))
    rtol, atol = tensor_tolerance(dtype)
    differs = policy.numerics_differences()
    u = UNIT_ROUNDOFF.get(dtype, UNIT_ROUNDOFF["fp32"])
    finite = np.abs(old[np.isfinite(old)])
    scale = typical_magnitude(finite)  # a routed tensor's coarse allowance: neither one huge element nor fill values widen it
    routed = bool(observed.extras.get("routing") or baseline.extras.get("routing"))  # a top-k expert choice
    per_element = bool(differs) and dtype in LOW_PRECISION and not routed
    if differs and not per_element and not routed:  # fp32 / fp64: each element's magnitude + a typical one
        scale = np.abs(np.nan_to_num(old, posinf=0.0, neginf=0.0)) + typical_magnitude(finite)
    recurrent = bool(observed.extras.get("recurrence") or baseline.extras.get("recurrence"))  # a linear-attention state
    k = policy.thresholds.tensor_recurrent_ulps if recurrent else policy.thresholds.tensor_cross_env_ulps
    extra = k * u * scale if differs and not per_element else 0.0
    same = (new == old) | (np.isnan(new) & np.isnan(old))  # equal infinities (masked logits) match
    with np.errstate(invalid="ignore"):
        err = np.where(same, 0.0, np.abs(new - old))
    err = np.where(np.isnan(err), np.inf, err)
    if per_element:  # harness/checking/rounding.py: the dtype's rounding of each element
        rtol, extra = 0.0, policy.thresholds.tensor_rounding_ulps
        allowed = rounding_allowance(old, new, u, extra, atol)
    else:
        allowed = atol + rtol * np.abs(np.nan_to_num(old)) + extra
    bad = err > allowed
    max_abs = float(err.max()) if err.size else 0.0
    rel = err / np.maximum(np.abs(np.nan_to_num(old)), np.finfo(float).tiny)
    max_rel = float(rel.max()) if rel.size else 0.0
    diff: dict[str, Any] = {
        "dtype": dtype, "rtol": rtol, "atol": atol, "cross_env_extra": float(np.max(extra)) if np.size(extra) else 0.0, "max_abs_err": max_abs,
        "max_rel_err": max_rel, "mismatched": int(bad.sum()), "total": int(err.size),
    }
    if per_element:
        diff.update(rule="per-element rounding", rounding_ulps=extra, ulps_used=ulps_used(err, old, new, u))
        if policy.witness:
            diff["rounding_witness"] = policy.witness
    if not bad.any():
        category = Category.NONE if max_abs == 0 else Category.TOLERATED_DRIFT
        detail = "identical" if max_abs == 0 else f"within tolerance ({dtype}): max abs err {max_abs:.3g}"
        return verdict(name, "tensor", Status.PASS, detail, category, diff)
    index = np.unravel_index(int(np.argmax(np.where(bad, err - allowed, -np.inf))), err.shape)
    widened = (f", {extra:.3g} u per element: this model's {dtype} rounding witness {policy.witness:.3g}"
               if per_element and policy.witness else "")
    diff["worst_index"] = [int(i) for i in index]
    detail = (
        f"{int(bad.sum())}/{err.size} elements beyond tolerance ({dtype}, rtol {rtol:g}, atol {atol:g}{widened}): "
        f"at {list(diff['worst_index'])} old {old[index]:.6g} vs new {new[index]:.6g}; "
        f"max abs err {max_abs:.3g}, max rel err {max_rel:.3g}"
    )
    return verdict(name, "tensor", Status.REGRESSION, detail, "real-change", diff)


# ----------------------------------------------------------------------------------------------
# capability


PATHWAY = ("accepted", "ignored", "rejected")  # a probed keyword: effective / no error, no effect / raised


def _features(value: Any, name: str) -> set[str] | None:
    """The features a capability value holds: True flags, listed names, or the keywords a probe
    found `accepted` (effective; `ignored` and `rejected` are not features)."""
    if isinstance(value, dict) and value and all(v in PATHWAY for v in value.values()):
        return {k for k, v in value.items() if v == "accepted"}
    if isinstance(value, bool):
        return {name} if value else set()
    if isinstance(value, dict) and all(isinstance(v, bool) for v in value.values()):
        return {k for k, v in value.items() if v}
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return set(value)
    return None


# (old, new) word of a probed feature that means it now silently does nothing
SILENT_LOSS = {("accepted", "ignored"), ("stored", "dropped"), (True, "ignored")}  # True: a record's old flag


def _path_verdict(name: str, observed: Field, baseline: Field | None) -> Outcome | None:
    """A decoding path decided by behaviour (harness/subjects/hf.py `requires`): its keyword accepted
    but the call silently decoded without the path (extras ignored) is a regression in any run, a
    first one too (feature-ignored); a path that ran in the baseline (True) and does not run now
    (False, extras path) is a regression by default (path-lost), whatever the reason."""
    if observed.extras.get("ignored"):
        return verdict(name, "capability", Status.REGRESSION, f"silently ignored: {observed.extras.get('why')}",
                       "feature-ignored", {"old": None if baseline is None else baseline.value, "new": observed.value,
                                          "in_run": True})
    if baseline is not None and observed.extras.get("path") and baseline.value is True and observed.value is False:
        return verdict(name, "capability", Status.REGRESSION, f"the path ran in the baseline and does not run now: "
                       f"{observed.extras.get('why')}", "path-lost", {"old": True, "new": False})
    return None


def compare_capability(name: str, observed: Field, baseline: Field | None, policy: Policy) -> Outcome:
    """Feature sets (True flags, or listed names): added / removed -> changed with category
    feature-added / feature-removed (removed wins when both). A feature that is still accepted but
    silently does nothing (a probed pathway going "accepted" -> "ignored", or a config field
    "stored" -> "dropped") is a regression (feature-ignored): a caller gets no error and no effect.
    A feature that is refused outright is only removed (the caller sees the error) - except a
    decoding path that ran in the baseline (`_path_verdict`: path-lost, a regression)."""
    path = _path_verdict(name, observed, baseline)
    if path is not None:
        return path
    if baseline is None:
        raise ValueError("a capability without a silent loss needs a baseline")
    if isinstance(observed.value, dict) and isinstance(baseline.value, dict):
        lost = sorted(k for k, v in observed.value.items() if (baseline.value.get(k), v) in SILENT_LOSS)
        if lost:
            detail = "; ".join(f"{k}: {baseline.value[k]} -> {observed.value[k]}" for k in lost)
            return verdict(name, "capability", Status.REGRESSION, f"silently ignored now: {detail}", "feature-ignored",
                           {"ignored": lost, "old": baseline.value, "new": observed.value})
    new, old = _features(observed.value, name), _features(baseline.value, name)
    if new is None or old is None:
        diff = _deepdiff(baseline.value, observed.value)
        if not diff:
            return verdict(name, "capability", Status.PASS, "unchanged")
        return verdict(name, "capability", Status.CHANGED, change_detail(baseline.value, observed.value),
                       "capability-changed", {"deepdiff": json.loads(diff.to_json())})
    added, removed = sorted(new - old), sorted(old - new)
    if not added and not removed:
        return verdict(name, "capability", Status.PASS, "unchanged")
    parts = ([f"added {', '.join(added)}"] if added else []) + ([f"removed {', '.join(removed)}"] if removed else [])
    category = "feature-removed" if removed else "feature-added"
    return verdict(name, "capability", Status.CHANGED, "; ".join(parts), category, {"added": added, "removed": removed})


# ----------------------------------------------------------------------------------------------
# deviation


def _deviation(f: Field | None, side: str) -> float | None:
    if f is None:
        return None
    value = f.value.get("tv") if isinstance(f.value, dict) else None
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise ValueError(f"{side} deviation must be {{'tv': x, ...}}, got {short(f.value)}")
    return float(value)


def _positions(f: Field | None) -> int | None:
    value = f.value.get("positions") if f is not None and isinstance(f.value, dict) else None
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None


def mechanism_key(mechanisms: Sequence[str] | None) -> list[str]:
    """What identifies a mechanism: its words, without the measured sizes and places it quotes in
    parentheses ("... differs from the exact one (TV 0.12, call 0 step 3 row 1)" -> "... differs from
    the exact one"); the size and the places are compared on their own."""
    return sorted(re.sub(r"\s+", " ", re.sub(r"\([^()]*\)", "", m)).strip() for m in mechanisms or [])


def _deviating(f: Field) -> set[str] | None:
    """The positions beyond tolerance a field lists (extras "deviating_at"; None: not listed)."""
    listed = f.extras.get("deviating_at")
    return {str(x) for x in listed} if isinstance(listed, list) else None


def coverage_lost(observed: Field, baseline: Field | None, same_numerics: bool = True) -> str:
    """Why the field observed less than it must ("" when it did not): fewer positions than the
    run generated (extras "min_positions": every sampled token has a position the hooks must see;
    judged without a baseline too), fewer than the baseline record observed, or a hook that found
    its target in the baseline run and finds nothing now (extras hooks_missing).

    The baseline's count is compared only where the two runs drew the same stream: the same
    numerics and as many sampled tokens - how many drafts an assisted call makes depends on what it
    accepted, which another dtype's rounding (or another random stream) moves (fp32 -> bf16:
    18 -> 15 acceptance positions on llama-target.assisted with every position observed)."""
    seen = _positions(observed)
    if seen is None:
        return ""
    need = observed.extras.get("min_positions")
    if isinstance(need, int) and seen < need:
        return f"the hooks observed {seen} positions, fewer than the {need} sampled tokens the case generated"
    old = _positions(baseline)
    same_stream = same_numerics and baseline is not None and baseline.extras.get("min_positions") == need
    if old is not None and seen < old and same_stream:
        return f"the hooks observed {seen} positions, the baseline record {old}"
    if baseline is not None:
        hooks = sorted(_hooks(observed) - _hooks(baseline))
        if hooks:
            return f"hooks found in the baseline run find nothing now: {', '.join(hooks)}"
    return ""


def _hooks(f: Field) -> set[str]:
    """The hooks a white-box field says found nothing (extras hooks_missing: "<hook>: <why>")."""
    return {str(m).split(":")[0] for m in f.extras.get("hooks_missing") or []}


def _identity_change(observed: Field, baseline: Field, d: float, b: float, tol: float) -> str:
    """What differs between an observed deviation and the baseline's known one ("" when it is the
    same deviation): its mechanism, its positions, or its size (|d - b| > tol). Positions: where both
    list the positions beyond tolerance (extras deviating_at), the two sets must be equal - a position
    added (a new deviation elsewhere) or gone (the known one fixed while another remains) is another
    deviation, while the worst moving among the same positions is rounding between near-equal TVs;
    a record that lists none is compared on its worst position."""
    new_m, old_m = mechanism_key(observed.extras.get("mechanism")), mechanism_key(baseline.extras.get("mechanism"))
    if new_m != old_m:
        return f"another mechanism: {'; '.join(new_m) or 'none isolated'} (baseline: {'; '.join(old_m) or 'none isolated'})"
    new_at, old_at = _deviating(observed), _deviating(baseline)
    if new_at is not None and old_at is not None:
        if new_at != old_at:
            added, gone = sorted(new_at - old_at), sorted(old_at - new_at)
            return ("deviates at other positions than the baseline: "
                    + "; ".join(part for part in (f"new at {', '.join(added[:4])}" if added else "",
                                                  f"gone at {', '.join(gone[:4])}" if gone else "") if part))
    elif observed.extras.get("worst_at") != baseline.extras.get("worst_at"):
        return f"the worst position moved: {observed.extras.get('worst_at')} (baseline {baseline.extras.get('worst_at')})"
    if abs(d - b) > tol:
        return f"another size: TV {d:.3g} vs the baseline's {b:.3g} (tolerance {tol:g})"
    return ""


def compare_deviation(name: str, observed: Field, baseline: Field | None, policy: Policy) -> Outcome:
    """d = the observed quantity's distance from its exact value (TV), t = extras["detectable_tv"]
    (the float tolerance the field states), b = the baseline record's d (None: no baseline):

        fewer positions observed      regression (coverage-lost): than the sampled tokens the case
                                      generated (extras min_positions; no baseline needed), or than
                                      the baseline observed - a hook that sees less checks less;
                                      but fewer than the baseline with every sampled token observed
                                      (min_positions met, or the case's exact_emitted met it: extras
                                      tokens_all_observed) and d <= t is changed (coverage-lost):
                                      fewer positions reachable
        d <= t                        pass; changed (fixed) when b > t - the deviation is gone
        d > t, b > t, same identity   changed (known-deviation): the baseline already has it
        d > t otherwise               regression (deviation): new, or not the known one

    A deviation's identity (`_identity_change`) is its field, mechanism (`mechanism_key`), worst
    position, the positions beyond tolerance (extras deviating_at) and size: |d - b| <= t + r. So the
    worst position moving, the known deviation fixed while a smaller one appears elsewhere, or another
    mechanism is a regression, not the known deviation.
    r is 0 on the same numerics; across numerics (another dtype, device, thread count) rounding moves
    a deviation's size too, by the cross-numerics allowance every tensor gets:
    r = tensor_cross_env_ulps x u(the coarser dtype) x b (bf16: 0.125 b).
    Deterministic: no sample, no alpha. The detail states the mechanism the field observed."""
    d, b = _deviation(observed, "observed"), _deviation(baseline, "baseline")
    t = float(observed.extras.get("detectable_tv", 0.0))
    r = 0.0
    if b is not None and policy.numerics_differences():
        dtype = coarser(dtype_of(observed, policy.observed_env), dtype_of(baseline, policy.baseline_env))
        r = policy.thresholds.tensor_cross_env_ulps * UNIT_ROUNDOFF.get(dtype, UNIT_ROUNDOFF["fp32"]) * b
    mechanism = "; ".join(observed.extras.get("mechanism") or []) or "no mechanism isolated"
    diff = {"tv": d, "tv_baseline": b, "detectable_tv": t, "cross_numerics": r, "at": observed.extras.get("worst_at"),
            "mechanism": observed.extras.get("mechanism") or [], "observed": observed.extras.get("observed"),
            "mechanism_baseline": (baseline.extras.get("mechanism") or []) if baseline is not None else [],
            "exact": observed.extras.get("exact"), "positions": _positions(observed),
            "positions_baseline": _positions(baseline), "min_positions": observed.extras.get("min_positions")}
    lost = coverage_lost(observed, baseline, not policy.numerics_differences())
    need, seen = observed.extras.get("min_positions"), _positions(observed)
    every_token = (isinstance(need, int) and seen is not None and seen >= need) or observed.extras.get("tokens_all_observed") is True
    if lost and d <= t and every_token and "baseline record" in lost:
        # every token the case sampled was observed and every observed position is exact: the version
        # reaches fewer positions (a branch removed), it does not see less of what it does
        return verdict(name, "deviation", Status.CHANGED, f"fewer positions reachable: {lost}; every sampled token "
                       f"observed, every observed position exact (TV {d:.2g} <= {t:g})", "coverage-lost", diff)
    if lost:
        return verdict(name, "deviation", Status.REGRESSION, f"coverage lost: {lost}", "coverage-lost", diff)
    if d <= t:
        if b is not None and b > t:
            was = "; ".join(baseline.extras.get("mechanism") or []) if baseline else ""
            return verdict(name, "deviation", Status.CHANGED, f"exact now: TV {d:.2g} <= {t:g}; the baseline deviated "
                           f"by {b:.3g} ({was or 'mechanism not recorded'})", "fixed", diff)
        return verdict(name, "deviation", Status.PASS, f"exact: TV {d:.2g} <= {t:g} over "
                       f"{observed.value.get('positions', '?')} positions", "", diff)
    if b is not None and b > t and baseline is not None:
        other = _identity_change(observed, baseline, d, b, t + r)
        if not other:
            return verdict(name, "deviation", Status.CHANGED, f"known deviation: TV {d:.3g} (baseline {b:.3g}, "
                           f"tolerance {t + r:g}) at {observed.extras.get('worst_at')}: {mechanism}",
                           "known-deviation", diff)
        return verdict(name, "deviation", Status.REGRESSION, f"not the known deviation - {other}: TV {d:.3g} > {t:g} "
                       f"at {observed.extras.get('worst_at')}: {mechanism}", "deviation", {**diff, "differs": other})
    was = "no baseline" if b is None else f"baseline {b:.3g}"
    return verdict(name, "deviation", Status.REGRESSION, f"deviates from the exact value: TV {d:.3g} > {t:g} ({was}) "
                   f"at {observed.extras.get('worst_at')}: {mechanism}", "deviation", diff)


# ----------------------------------------------------------------------------------------------
# dispatch

# ----------------------------------------------------------------------------------------------
# checkpoint


def compare_checkpoint(name: str, observed: Field, baseline: Field, policy: Policy) -> Outcome:
    """Your model's fingerprint against the baseline's: equal -> pass; otherwise `changed`
    (checkpoint-changed), naming each file that differs. Never a regression by itself - the
    differences it causes are judged field by field, and the findings group them under it."""
    if not (isinstance(baseline.value, dict) and isinstance(observed.value, dict)):
        raise TypeError("a checkpoint value is {file: sha256}")
    changes = fingerprint_changes(baseline.value, observed.value)
    if not changes:
        return verdict(name, "checkpoint", Status.PASS, "identical")
    return verdict(name, "checkpoint", Status.CHANGED, "the checkpoint changed (" + "; ".join(changes) + ")",
                   "checkpoint-changed", {"old": baseline.value, "new": observed.value})


COMPARATORS: dict[str, Callable[[str, Field, Field, Policy], Outcome]] = {
    "exact": compare_exact,
    "tokens": compare_tokens,
    "tensor": compare_tensor,
    "rate": compare_rate,
    "distribution": compare_distribution,
    "latency": compare_latency,
    "memory": compare_memory,
    "capability": compare_capability,
    "checkpoint": compare_checkpoint,
    "deviation": compare_deviation,
}


def judged_alone(f: Field) -> bool:
    """The field carries its own exact expectation, so it is decided without a baseline too (a path
    whose keyword was accepted and whose call silently ran without it: extras ignored)."""
    return (f.kind == "deviation" or (f.kind in ("distribution", "rate") and "expected" in f.extras)
            or (f.kind == "capability" and bool(f.extras.get("ignored"))))


def compare_field(name: str, observed: Field, baseline: Field | None, policy: Policy | None = None) -> Outcome:
    """Compare one observed field with its baseline (a golden record's field, or the reference
    engine's). No baseline -> new; a different kind -> changed ("kind-changed"); a malformed value
    -> regression ("invalid-value") with the reason, never an exception."""
    policy = policy or Policy()
    if baseline is None and judged_alone(observed):
        try:
            outcome = COMPARATORS[observed.kind](name, observed, None, policy)  # type: ignore[arg-type]
        except (ValueError, TypeError, KeyError) as exc:
            return verdict(name, observed.kind, Status.REGRESSION, f"cannot compare: {exc}", "invalid-value")
        if outcome.status is not Status.PASS:
            return outcome
        return replace(outcome, status=Status.NEW, detail=f"no baseline record; {outcome.detail}",
                       diff={**outcome.diff, "new": short(observed.value)})
    if baseline is None:
        return verdict(name, observed.kind, Status.NEW, "no baseline record", "", {"new": short(observed.value)})
    if baseline.kind != observed.kind:
        return verdict(name, observed.kind, Status.CHANGED,
                          f"kind changed: old {baseline.kind} vs new {observed.kind}", "kind-changed",
                          {"kind_old": baseline.kind, "kind_new": observed.kind})
    try:
        return COMPARATORS[observed.kind](name, observed, baseline, policy)
    except (ValueError, TypeError, KeyError) as exc:
        return verdict(name, observed.kind, Status.REGRESSION, f"cannot compare: {exc}", "invalid-value")


def decide_with_holm(checks: Sequence[tuple[Outcome, Field, Field | None, Policy]], alpha: float) -> list[Outcome]:
    """Re-decide the statistical comparisons among `checks` (comparison, observed, baseline, policy)
    with Holm's procedure at `alpha`: a check is rejected iff its Holm-adjusted p <= alpha, i.e. it
    is decided at alpha * p / p~. Non-statistical comparisons are returned unchanged, in order."""
    out = [check[0] for check in checks]
    stat = [i for i, c in enumerate(out) if c.kind in STATISTICAL_KINDS and c.p_value is not None]
    if len(stat) < 2:
        return out
    for i, p_adj in zip(stat, stats.holm_adjust([out[i].p_value for i in stat]), strict=True):
        comparison, observed, baseline, policy = checks[i]
        p = comparison.p_value
        if p_adj <= p or p == 0:
            continue
        redone = compare_field(comparison.field, observed, baseline, policy.with_alpha(alpha * p / p_adj))
        out[i] = replace(redone, diff={**redone.diff, "holm_adjusted_p": p_adj, "alpha": alpha})
    return out
