"""`[tool.harness]` in pyproject.toml -> a frozen `HarnessConfig`.

Every key is optional; the defaults below apply when it is absent. An unknown key or a value of
the wrong type raises `ConfigError` naming pyproject.toml and the key, never a silent default.

```toml
[tool.harness]
golden_dir = "golden/records"    # where records live: <golden_dir>/<env-key>/<suite>/<case>.json
models_dir = "golden/models"     # fixture checkpoints (default: the zoo that ships with the harness)
reports_dir = "reports"          # results.json and the HTML report
alpha = 0.01                     # family-wise false-alarm rate of one whole run
baseline = ""                    # env key to compare against ("" = the current env's own records)
models = []                      # fixture model names the suites run (empty = all) - or, as a table,
                                 # your own checkpoints (below; then only they run, unless zoo = true)
zoo = false                      # with models of your own: also run the fixture zoo's cases
ci_latency_strict = true         # under CI (CI set): a latency field not judged (busy machine) fails the run
real_model = true                # the harness's real model (SmolLM2-135M, the `real` extra) runs where the zoo does
extra_model_dirs = []            # more checkpoint directories; `harness check` verifies they exist

[tool.harness.thresholds]        # see `Thresholds`
tie_eps_bf16 = 0.75
```

Your own checkpoints (harness/settings/models.py `parse_model` checks each table's keys and types here;
`resolve` checks the files before a run):

```toml
[tool.harness.models.my-model]
path = "/models/my-llama"
```
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from harness.settings.budget import BudgetError
from harness.settings.budget import parse as parse_budget
from harness.settings.models import ModelError, UserModel, parse_models_table
from harness.store.reading import InputError, read_toml
from harness.zoo.specs import MODELS_DIR


class ConfigError(ValueError):
    """A bad `[tool.harness]` entry; the message names the file and the key."""


@dataclass(frozen=True)
class Thresholds:
    """The tolerances of the comparison policies (compare.py); all configurable.

    tie_eps_<dtype>: a greedy step whose top-2 logit margin is below this is a near-tie: across
        different numerics (hardware, dtype, threads, torch) the argmax may flip there. Measured on a
        2-layer fixture-sized transformer (logits up to ~12): the margin error across thread counts in
        fp32 is ~5e-6, fp16 ~0.04, bf16 ~0.09 (bf16 also rounds logits to 2^-5 near 8). On the real
        suites, bf16 vs fp32 on CPU (969 aligned greedy steps of the zoo's outputs cases, before
        their first divergence): |margin_bf16 - margin_fp32| has p99 0.14 and max 0.38 - the max on
        the 46-layer GLM trunk, where rounding accumulates over depth; a flip at margin 0.25 was seen
        there. bf16's default is 2x that max; fp32 and fp16 keep a 2.5x-200x factor.
        In bf16 / fp16 an in-run reference whose sides give each step's rounding scale gets a tie
        epsilon per step instead (`tie_rounding_ulps`); the fixed one stays for what records no scale
        (a record's tokens field across envs, the beam search's score margins).
    tie_eps_same_bf16 / tie_eps_same_fp16: the tie epsilon of a run against records of its own env
        (same numerics) in a low-precision dtype, where fp32 / fp64 allow none. The CPU's bf16 kernels
        (oneDNN) do not reproduce every last bit across a process's history: measured 2026-12-04 on an
        AMD EPYC with avx512_bf16 (torch 2.13.0, transformers 5.24.0), llama-rope-yarn.far's greedy
        stream flipped 360 <-> 358 at a step of margin 0.0625 (one bf16 ulp at logits 8-16) between
        two whole regens and a run of its suite alone, while every other of the env's 349 records
        reproduced. One ulp at logits up to 32 (bf16 0.125; fp16 2^-6 at 16-32), so only a margin the
        last bit can close flips; a real change diverging where either side was surer is still one.
    tie_rounding_ulps: k of the low-precision per-step tie epsilon ``k * u * (|x1| + |x2| + 2 rms(x))``
        (harness/checking/compare.py `tie_eps_at`; x a step's logits, x1 and x2 its two largest, u the
        unit roundoff). Measured on the zoo's 1680 bf16 greedy steps of its greedy outputs cases
        (benchmarks/tie_fraction.py; transformers 5.24.0, torch 2.13.0 CPU): the scale is 15-30, and the
        41 clean bf16 tie-flips recorded in the outputs references (engine vs library) need
        margin / (u * scale) <= 0.89; bf16 vs fp32, |margin error| has p99 0.14 (~1.7 u scale). 4 is 4.5x
        the largest clean flip and 2.4x that p99 (the 46-layer trunk's max 0.38, ~4.6 u scale, is a deep
        case in fp32 vs bf16, not a bf16 reference). It calls 24.6 % of the zoo's bf16 steps ties (the
        fixed 0.75: 29.5 %; 7.4 % have a margin of exactly 0 and 19.8 % one of at most 0.0625, one bf16 ulp of a logit in [8, 16), which no rule can decide), and
        the per-step epsilon is 0.23-0.47 (median 0.34) instead of 0.75.
    tensor_cross_env_ulps: k in the cross-numerics tensor tolerance
        ``|a - b| <= atol + rtol*|b| + k * u(dtype) * max|b|`` (u = unit roundoff: 2^-24 fp32,
        2^-11 fp16, 2^-8 bf16). Low-precision forward errors scale with the tensor's magnitude, not
        each element's; measured errors are ~8 u * max|b|, so 32 leaves a 4x factor. Used in fp32 / fp64
        only: bf16 / fp16 use `tensor_rounding_ulps`.
    tensor_recurrent_ulps: the same k for a tensor computed through a linear-attention (gated delta
        rule) layer (field extra ``recurrence``): its recurrent state is a long accumulation the
        library runs chunked and the engine step by step, and each lies far from the float64 result
        in fp32. Measured on a seeded random-init Qwen3.5-text of the 19-family reruns
        (benchmarks/family_reruns.py: hidden 32, weights N(0, 0.25^2), logits up to ~6; 6 random
        83-token prompts; transformers 5.24.0, torch 2.13.0 CPU): the library and the engine differ
        by up to 88 u * (|b_i| + t) (the library 7.2e-5 and the engine 4.0e-5 from float64 at one
        prompt), where 32 called 3/42496 logits a change on a user's first run. 256 is 2.9x that
        maximum; the linear-attention faults move the logits by orders of magnitude more.
    tensor_rounding_ulps: c in the low-precision per-element rule (harness/checking/rounding.py)
        ``|a_i - b_i| <= atol + c * u * (max(|a_i|, |b_i|) + rms(b))`` across numerics in bf16 / fp16.
        Measured on a clean bf16 run of the batching, long_context and beam suites (transformers 5.24.0,
        torch 2.13.0 CPU, empty store; 24 tensor references): the largest err_i / (u * scale_i) of a
        reference that is not a tie-flip's consequence is 4.79 (long_context prompt_logits_vs_engine,
        llama-rope-yarn), 3.59 on the far-position step logits, 1.63 on batching's scores_as_solo, 0
        elsewhere (bit-identical batched rows). 12 is 2.5x that maximum; the bf16 faults sit at 39
        (sdpa-prefill-skips-left-padding), 61 (sdpa-decode-skips-left-padding), 89 (YaRN factor
        dropped, step logits) - the old rule's 32 u max|b| (12.5 % of the maximum) let the first two pass.
    witness_factor: K of the scaling by a model's rounding witness (harness/engine/witness.py): a case
        whose model's own low-precision forward moves its logits by w units of the per-element rule
        (measured on the engine, never the library) is judged with c and k multiplied by
        f = max(1, K w / c) (`for_witness`). c and k were measured on the zoo, whose witnesses are at
        most 5.2 (K w <= c: f = 1 there); on seeded random-init Llamas the library's own bf16 logits lay
        0.93-1.3 w from fp32 and two bf16 routes of the library (eager, SDPA) at most 1.45 w apart
        (a 1.1B model: witness 11.4, eager vs SDPA 16.5, c 12), so 2 covers the two routes with 1.4x
        to spare.
    latency_tolerance: the smallest slowdown that matters (0.05 = 5 %), and the one a latency field
        must detect with power 0.8 at the run's per-test alpha to pass: a field that cannot is
        `not checked` with the slowdown it does detect, never a pass (`stats.latency_call`). A slowdown
        significant at that alpha (against no change) is a regression unless its interval lies inside
        the tolerance; a speed-up beyond it is changed (information). The record path's tests:
        `stats.slowdown_test` (paired median log ratio to the calibration, within-run and between-run
        variance); the paired mode's (`harness check --against`): `stats.paired_slowdown_test`.
    latency_run_sd / latency_run_sd_prefill / latency_run_sd_generate: tau,
        the between-run SD of one run's median log ratio beyond what that run's own samples show (a
        process's memory layout, clock, what else ran): tau^2 = SD across runs^2 - the runs' mean SE^2.
        stats.slowdown_test adds each run's own SE beside it, so tau - not the SD across runs, which
        holds that SE already - is what the test needs. Per group: a decode step (decode_*), a prefill
        forward (prefill_*), a whole generate() call (generate_*: Python control flow, the assistant,
        more allocation). Measured with benchmarks/latency_power.py --sigma
        (20 runs of suites/test_latency.py, full grid, fresh processes, 2 quiet cores, transformers
        5.24.0 CPU fp32): 2026-12-02 on an AMD EPYC, SD across runs 0.0049-0.0074 per forward (tau <=
        0.005), 0.0069-0.020 per generate(); 2026-12-05 on an Intel Xeon (AVX512), within-run SE
        0.011-0.016 per forward and 0.016-0.043 per generate(), tau 0-0.0082 per decode step,
        0.0129-0.0213 per prefill, 0-0.0231 per generate() (llama-target's plain the largest; the
        compiled and sequential serving fields 0; continuous batching's generate_batch, paired, 0.095 with
        an SE of 0.08 - why it is information, not a field: harness/designs/latency.py). Each default is
        the largest tau of its group on either machine times 1.35 (the upper 95 % bound of an SD
        estimated from 20 runs), so a clean rerun's d stays inside the test's variance: 0.011, 0.029, 0.031.
    latency_busy_wall_cpu / latency_busy_spread: a run whose calibration's wall time exceeds its CPU
        time by this factor (descheduled) or whose calibration spread (IQR / median) exceeds this is
        too busy to judge: `not judged` (the load average is recorded, never judged on: it lags and
        counts the run's own parallel phase).
    latency_calibration_drift: a run whose calibration's median differs from the record's by more than
        this factor (either way) is not judged: the machine is not in the state the record was made
        in (a slower host core or clock, not a wait the wall / CPU ratio shows), and the paired ratio
        does not cancel that for a subject and a calibration that use the CPU differently
        (2026-12-02, one quiet Intel Xeon: decode's calibration x1.75 and ensemble generate()'s x1.8
        of the morning's, both ratios moved beyond noise, wall / CPU 1.0).
    memory_tolerance: a peak or allocated byte count above (1 + this) x the record's is a regression.
    tv_max: the total-variation distance a distribution check must be able to rule out; a check
        whose TV upper confidence bound exceeds it is reported as "underpowered".
    """

    tie_eps_fp32: float = 1e-3
    tie_eps_fp16: float = 0.1
    tie_eps_bf16: float = 0.75
    tie_eps_fp64: float = 1e-9
    tie_eps_same_bf16: float = 0.125
    tie_eps_same_fp16: float = 0.015625
    tensor_cross_env_ulps: float = 32.0
    tensor_recurrent_ulps: float = 256.0
    tensor_rounding_ulps: float = 12.0
    tie_rounding_ulps: float = 4.0
    witness_factor: float = 2.0
    latency_tolerance: float = 0.05
    latency_run_sd: float = 0.011
    latency_run_sd_prefill: float = 0.029
    latency_run_sd_generate: float = 0.031
    latency_busy_wall_cpu: float = 1.15
    latency_busy_spread: float = 0.25
    latency_calibration_drift: float = 1.3
    memory_tolerance: float = 0.10
    tv_max: float = 0.05

    def run_sd(self, field: str) -> float:
        """The between-run SD (tau) of a latency field: a whole generate() call's, a prefill's, or a decode
        step's."""
        if field.startswith("generate_"):
            return self.latency_run_sd_generate
        return self.latency_run_sd_prefill if field.startswith("prefill_") else self.latency_run_sd

    def witness_scale(self, witness: float | None) -> float:
        """f = max(1, K w / c): how much wider a model's low-precision allowances are than the zoo's,
        from its rounding witness w (None: no witness - fp32, or a family the engine lacks - 1)."""
        if not witness or not math.isfinite(witness) or not self.tensor_rounding_ulps:
            return 1.0
        # never wider than the largest c a configuration may set (MAX_THRESHOLDS): past it a check
        # passes whatever it sees (a mixture-of-experts trunk's routing flips read w ~ 20-50)
        widest = MAX_THRESHOLDS["tensor_rounding_ulps"]
        return max(1.0, min(self.witness_factor * witness, widest) / self.tensor_rounding_ulps)

    def for_witness(self, witness: float | None) -> Thresholds:
        """These thresholds for a model whose rounding witness is `witness`: the per-element rule's c
        and the tie rule's k scaled by `witness_scale` (the fixed tie epsilons, which cap the per-step
        one, are not: a model's witness never makes the tie rule looser than the dtype's fixed bound)."""
        f = self.witness_scale(witness)
        if f == 1.0:
            return self
        return replace(self, tensor_rounding_ulps=self.tensor_rounding_ulps * f, tie_rounding_ulps=self.tie_rounding_ulps * f)

    def tie_eps(self, dtype: str) -> float:
        """The tie epsilon of a canonical dtype name ('fp32', 'bf16', ...)."""
        value = getattr(self, f"tie_eps_{dtype}", None)
        if value is None:
            raise ValueError(f"no tie epsilon for dtype {dtype!r}")
        return float(value)


@dataclass(frozen=True)
class HarnessConfig:
    """Resolved repository settings: paths are absolute (relative ones are under rootdir)."""

    rootdir: Path
    golden_dir: Path
    models_dir: Path
    reports_dir: Path
    alpha: float = 0.01
    thresholds: Thresholds = field(default_factory=Thresholds)
    baseline: str = ""
    models: tuple[str, ...] = ()
    extra_model_dirs: tuple[Path, ...] = ()
    user_models: tuple[UserModel, ...] = ()  # [tool.harness.models.NAME] tables (harness/settings/models.py)
    zoo: bool = False  # with user models: also run the fixture zoo's cases (without user models it always runs)
    ci_latency_strict: bool = True  # under CI, latency not judged fails (as --latency-strict) unless false
    budget: str = ""  # your models' wall-time budget ("5m"; "full": every case); "" = the size rule (harness/settings/budget.py)
    real_model: bool = True  # the harness's real model runs where the zoo does (harness/settings/real.py)


# path keys and their defaults under rootdir; models_dir defaults to the zoo the harness ships (MODELS_DIR)
_PATH_KEYS = {"golden_dir": "golden/records", "models_dir": None, "reports_dir": "reports"}
_KNOWN = (*_PATH_KEYS, "alpha", "thresholds", "baseline", "models", "extra_model_dirs", "zoo", "ci_latency_strict", "budget",
          "real_model")


def _fail(path: Path, key: str, message: str) -> ConfigError:
    return ConfigError(f"{path}: [tool.harness] {key}: {message}")


def _type_name(value: Any) -> str:
    return type(value).__name__


def _string(path: Path, key: str, value: Any) -> str:
    if not isinstance(value, str):
        raise _fail(path, key, f"expected a string, got {_type_name(value)} {value!r}")
    return value


def _string_list(path: Path, key: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise _fail(path, key, f"expected a list of strings, got {value!r}")
    return tuple(value)


def _number(path: Path, key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _fail(path, key, f"expected a number, got {_type_name(value)} {value!r}")
    if not math.isfinite(value):  # TOML has inf and nan: a tolerance of inf would pass everything
        raise _fail(path, key, f"expected a finite number, got {value!r}")
    return float(value)


# The largest value of each threshold that can still mean something (a larger one would make its
# check pass whatever it sees): a relative tolerance or a TV distance of 1 allows everything; an ulp
# count of 2^20 is a relative error of ~0.1 in fp32; busy-machine factors past 10 never call any
# machine busy. A tie epsilon is a top-2 logit margin a dtype's rounding is allowed to close; each
# greedy step under it is excused a flip. Share of the zoo's greedy steps under a margin (the
# tokens fields' margins of tf5.24.0-torch2.13.0, 3498 fp32 / 3470 bf16 steps, 2026-12):
#     margin < 0.001  0.01  0.1   0.75  1.5   8
#     fp32     0.03%  5.2%  25%   36%   ~39%  74%
#     bf16     8.6%   8.8%  26%   35%   ~39%  74%
# Issue 63: tie_eps_fp32 = 8.0 was accepted and hid a catalogue fault, which shows above ~0.01.
# fp32: 0.01 - 10x the default, 2000x the measured cross-thread margin error (5e-6; Thresholds);
#   fp64 gets no wider bound than fp32 (a finer dtype never needs a looser tie rule).
# bf16: 1.5 - 2x the default, 4x the largest measured bf16-vs-fp32 margin error (0.38, the 46-layer
#   trunk); fp16 (finer mantissa than bf16): 0.25, 2.5x its default, 6x its measured error (0.04).
# same_bf16 / same_fp16 (one ulp at logits 16-32 by default): 4 ulps - 0.5 / 0.0625.
TIE_EPS_BOUNDS = {"fp32": 0.01, "fp64": 0.01, "bf16": 1.5, "fp16": 0.25, "same_bf16": 0.5, "same_fp16": 0.0625}
MAX_THRESHOLDS = {
    **{f"tie_eps_{d}": bound for d, bound in TIE_EPS_BOUNDS.items()},
    "tensor_cross_env_ulps": float(2 ** 20),
    "tensor_recurrent_ulps": float(2 ** 20),
    "tie_rounding_ulps": 64.0,  # x bf16's unit roundoff 2**-8 x a scale ~20: a tie eps of ~5 logits at most
    "tensor_rounding_ulps": 64.0,  # x bf16's unit roundoff 2**-8: a 25 % relative allowance at most
    "witness_factor": 8.0,  # a model's allowances at most 8x its own measured rounding
    "latency_tolerance": 1.0, "latency_run_sd": 0.5, "latency_run_sd_prefill": 0.5, "latency_run_sd_generate": 0.5,
    "latency_busy_wall_cpu": 10.0, "latency_busy_spread": 10.0, "latency_calibration_drift": 10.0,
    "memory_tolerance": 1.0, "tv_max": 0.5,
}


def _thresholds(path: Path, value: Any) -> Thresholds:
    if not isinstance(value, dict):
        raise _fail(path, "thresholds", f"expected a table, got {_type_name(value)} {value!r}")
    known = {f.name for f in fields(Thresholds)}
    unknown = sorted(set(value) - known)
    if unknown:
        raise _fail(path, f"thresholds.{unknown[0]}", f"unknown key; known keys: {', '.join(sorted(known))}")
    parsed = {}
    for name, raw in value.items():
        number = _number(path, f"thresholds.{name}", raw)
        if number < 0:
            raise _fail(path, f"thresholds.{name}", f"must be >= 0, got {raw!r}")
        if number > MAX_THRESHOLDS[name]:
            raise _fail(path, f"thresholds.{name}", f"must be <= {MAX_THRESHOLDS[name]:g} (a larger value would let "
                        f"its check pass whatever it sees), got {raw!r}")
        parsed[name] = number
    return Thresholds(**parsed)


def parse_config(rootdir: Path, table: dict[str, Any], source: Path | None = None) -> HarnessConfig:
    """Validate a `[tool.harness]` table (already parsed) and resolve paths against rootdir."""
    rootdir = Path(rootdir).resolve()
    path = source or rootdir / "pyproject.toml"
    unknown = sorted(set(table) - set(_KNOWN))
    if unknown:
        raise _fail(path, unknown[0], f"unknown key; known keys: {', '.join(_KNOWN)}")

    paths = {key: rootdir / _string(path, key, table[key]) if key in table else
             (rootdir / default if default else MODELS_DIR) for key, default in _PATH_KEYS.items()}
    alpha = _number(path, "alpha", table.get("alpha", 0.01))
    if not 0.0 < alpha < 1.0:
        raise _fail(path, "alpha", f"must be in (0, 1), got {table.get('alpha')!r}")
    baseline = _string(path, "baseline", table.get("baseline", ""))
    budget = _string(path, "budget", table.get("budget", ""))
    try:
        parse_budget(budget, f"{path}: [tool.harness] budget")
    except BudgetError as exc:
        raise ConfigError(str(exc)) from None
    raw_models = table.get("models", [])
    user_models: tuple[UserModel, ...] = ()
    if isinstance(raw_models, dict):  # [tool.harness.models.NAME]: your own checkpoints
        try:
            user_models = parse_models_table(path, rootdir, raw_models)
        except ModelError as exc:
            raise ConfigError(str(exc)) from None
        raw_models = []
    models = _string_list(path, "models", raw_models)
    extra = tuple(rootdir / p for p in _string_list(path, "extra_model_dirs", table.get("extra_model_dirs", [])))
    thresholds = _thresholds(path, table.get("thresholds", {}))
    flags = {key: table.get(key, default) for key, default in (("zoo", False), ("ci_latency_strict", True),
                                                                    ("real_model", True))}
    for key, value in flags.items():
        if not isinstance(value, bool):
            raise _fail(path, key, f"expected true or false, got {value!r}")
    return HarnessConfig(
        **flags,
        rootdir=rootdir,
        alpha=alpha,
        thresholds=thresholds,
        baseline=baseline,
        budget=budget,
        models=models,
        extra_model_dirs=extra,
        user_models=user_models,
        **paths,
    )


def load_config(rootdir: Path) -> HarnessConfig:
    """Read `[tool.harness]` from rootdir/pyproject.toml (defaults when the file or table is absent)."""
    rootdir = Path(rootdir).resolve()
    path = rootdir / "pyproject.toml"
    table: dict[str, Any] = {}
    if path.exists():
        try:
            data = read_toml(path)
        except InputError as exc:
            raise ConfigError(str(exc)) from None
        table = data.get("tool", {}).get("harness", {})
        if not isinstance(table, dict):
            raise ConfigError(f"{path}: [tool.harness] must be a table")
    return parse_config(rootdir, table, path)
