"""torch's SDPA kernels per backend and dtype (suites/test_kernels.py): what a torch bump can move in
attention that no transformers change would - a backend's numerics, which shapes it accepts, how it
treats a row that sees nothing or a NaN. One case per (backend, dtype); fixed seeded inputs, batch 1,
4 query heads over 2 key / value heads, 5 queries x 6 keys, head size 8. The oracle is the
float64 definition (harness/engine/attention.py) on the same (dtype-rounded) inputs.

Variants (each one SDPA call with only the case's backend allowed; harness/subjects/torch_sdpa.py):
  gqa          k / v with 2 heads, enable_gqa=True (query heads 2h, 2h+1 read kv head h)
  mqa_expand   one kv head expanded to 4 with stride 0 (no enable_gqa: pytorch #191085's shape class,
               a zero-stride broadcast k / v a kernel must read as its values)
  causal       k / v repeated to 4 heads, is_causal=True
  masked       a boolean mask in which query row 1 sees no key (fully masked: a padding row)
  nan_query    query row 2 of head 0 is NaN

  errors             exact  per variant: None, or the error torch raised ("No viable backend" where the
                            backend refuses the inputs); an outcome field: a refusal gone is fixed, one
                            appearing broken
  <variant>_vs_engine ref   gqa, mqa_expand, causal, masked: elements beyond the bound
                            |out - oracle| <= c * u(dtype) * max|oracle| (u = 2^-24 fp32, 2^-8 bf16;
                            c = 64 fp32, 8 bf16: an accumulation's rounding, never a reduced-precision
                            fp32 path, which errs ~1e-3) and rows whose NaN-ness differs - counted, so
                            0 is the expected value; masked also holds its fully masked row to 0
  nan_rows           exact  how the backend treats the NaN query row: output rows NaN / zero / finite
                            (no oracle decides it across backends: CPU flash returns finite rows
                            since 2.5 while math propagates the NaN - pytorch #141128; recorded, so a
                            torch bump that changes it is a finding)
  output             tensor the gqa output (held to the dtype's tolerance across versions: a bump that
                            moves rounding is tolerated drift, a real change a regression)

The matmul case (`matmul.fp32`, `matmul_precision`): torch.nn.functional.linear of seeded fp32 x
(8, 256) and w (64, 256) - a decode step's projection - under each `set_float32_matmul_precision`
value (harness/subjects/torch_matmul.py), against the float64 definition and the fp32 rounding bound
gamma_K |x| |w|^T (harness/engine/matmul.py, numpy's BLAS):

  highest_vs_engine  ref    elements beyond the fp32 bound under "highest" (torch's default), 0
                            expected: the flag that promises full fp32 must get it (pytorch #130919:
                            "highest" did not turn off mkldnn's bf16 down-conversion on AArch64)
  by_flag            info   per flag ("highest", "high", "medium"), fp32 or reduced and the largest
                            error in units of the bound: what "medium" / "high" do depends on the CPU
                            (oneDNN's bf32 / tf32 paths need AVX512-BF16 / AMX), so it is shown, not
                            compared across machines
"""

from __future__ import annotations

from typing import Any

import torch

from harness.engine import matmul
from harness.engine.attention import attention
from harness.schema import Case, Observation
from harness.subjects import torch_matmul
from harness.subjects.torch_sdpa import sdpa

SHAPE = {"heads": 4, "kv_heads": 2, "queries": 5, "keys": 6, "head_dim": 8}
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
UNIT_ROUNDOFF = {"fp32": 2.0 ** -24, "bf16": 2.0 ** -8}
BOUND_ULPS = {"fp32": 64, "bf16": 8}
MASKED_ROW, NAN_ROW = 1, 2


def inputs(dtype: str, device: str = "cpu") -> dict[str, torch.Tensor]:
    """The seeded q (1, 4, 5, 8), k / v (1, 2, 6, 8), rounded to `dtype` once (the oracle reads the same values)."""
    g = torch.Generator().manual_seed(0)
    s = SHAPE
    q = torch.randn(1, s["heads"], s["queries"], s["head_dim"], generator=g)
    k = torch.randn(1, s["kv_heads"], s["keys"], s["head_dim"], generator=g)
    v = torch.randn(1, s["kv_heads"], s["keys"], s["head_dim"], generator=g)
    return {name: t.to(DTYPES[dtype]).to(device) for name, t in (("q", q), ("k", k), ("v", v))}


def variants(x: dict[str, torch.Tensor]) -> dict[str, tuple[tuple[torch.Tensor, ...], dict[str, Any], torch.Tensor]]:
    """variant -> (SDPA's q, k, v; its keyword arguments; the oracle's output)."""
    q, k, v = x["q"], x["k"], x["v"]
    heads, group = q.shape[1], q.shape[1] // k.shape[1]
    k4, v4 = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    one_k, one_v = k[:, :1].expand(-1, heads, -1, -1), v[:, :1].expand(-1, heads, -1, -1)
    mask = torch.ones(q.shape[2], k.shape[2], dtype=torch.bool, device=q.device)
    mask[MASKED_ROW] = False
    nan_q = q.clone()
    nan_q[0, 0, NAN_ROW] = float("nan")
    cpu = {name: t.cpu() for name, t in (("q", q), ("k", k), ("v", v), ("mask", mask), ("nan_q", nan_q))}
    return {
        "gqa": ((q, k, v), {"enable_gqa": True}, attention(cpu["q"], cpu["k"], cpu["v"])),
        "mqa_expand": ((q, one_k, one_v), {}, attention(cpu["q"], cpu["k"][:, :1], cpu["v"][:, :1])),
        "causal": ((q, k4, v4), {"is_causal": True}, attention(cpu["q"], cpu["k"], cpu["v"], causal=True)),
        "masked": ((q, k4, v4), {"attn_mask": mask}, attention(cpu["q"], cpu["k"], cpu["v"], mask=cpu["mask"])),
        "nan_query": ((nan_q, k4, v4), {}, attention(cpu["nan_q"], cpu["k"], cpu["v"])),
    }


def beyond_bound(out: torch.Tensor, oracle: torch.Tensor, dtype: str) -> tuple[dict[str, int], float]:
    """({"beyond_bound": n, "elements": N}, max abs error): elements off the oracle by more than
    c * u * max|oracle|, plus those whose NaN-ness differs from the oracle's."""
    got = out.detach().to(torch.float64).cpu()
    bound = BOUND_ULPS[dtype] * UNIT_ROUNDOFF[dtype] * float(torch.nan_to_num(oracle).abs().max())
    nan_differs = torch.isnan(got) != torch.isnan(oracle)
    err = torch.nan_to_num((got - oracle).abs(), nan=0.0)
    bad = nan_differs | (err > bound)
    return {"beyond_bound": int(bad.sum()), "elements": int(bad.numel())}, float(err.max())


def sdpa_kernels(case: Case, device: str = "cpu") -> Observation:
    params = dict(case.params)
    name, dtype = params["backend"], params["dtype"]
    obs = Observation()
    runs = {variant: (*sdpa(name, *args, **kwargs), oracle)
            for variant, (args, kwargs, oracle) in variants(inputs(dtype, device)).items()}
    obs.add("errors", {variant: err for variant, (_, err, _) in runs.items()}, outcome="each")
    for variant in ("gqa", "mqa_expand", "causal", "masked"):
        out, err, oracle = runs[variant]
        field = f"{variant}_vs_engine"
        if err:
            obs.skipped(field, "exact", f"{name} refused: {err['message']}", "unsupported")
            continue
        counted, max_err = beyond_bound(out, oracle, dtype)
        obs.reference(field, counted, {"beyond_bound": 0, "elements": counted["elements"]},
                      observed_extras={"max_abs_err": max_err})
    out, err, _ = runs["nan_query"]
    if err:
        obs.skipped("nan_rows", "exact", f"{name} refused: {err['message']}", "unsupported")
    else:
        row = out[0, 0, NAN_ROW].detach().float().cpu()
        obs.add("nan_rows", "nan" if bool(row.isnan().all()) else "zero" if bool((row == 0).all()) else
                "finite" if bool(row.isfinite().all()) else "mixed")
    out, err, _ = runs["gqa"]
    if err:
        obs.skipped("output", "tensor", f"{name} refused: {err['message']}", "unsupported")
    else:
        obs.add("output", out.detach().float().cpu().flatten().tolist(), "tensor", dtype=dtype)
    return obs


MATMUL_SHAPE = {"tokens": 8, "hidden": 256, "out": 64}
MATMUL_FLAGS = ("highest", "high", "medium")  # torch.set_float32_matmul_precision's values


def matmul_inputs(device: str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """The seeded fp32 x (8, 256) and w (64, 256)."""
    g = torch.Generator().manual_seed(1)
    s = MATMUL_SHAPE
    x = torch.randn(s["tokens"], s["hidden"], generator=g)
    w = torch.randn(s["out"], s["hidden"], generator=g) / s["hidden"] ** 0.5
    return x.to(device), w.to(device)


def matmul_precision(case: Case, device: str = "cpu") -> Observation:
    x, w = matmul_inputs(device)
    oracle, bound = matmul.linear(x, w), matmul.fp32_bound(x, w)
    obs = Observation()
    by_flag = {}
    for flag in MATMUL_FLAGS:
        err = abs(torch_matmul.linear(x, w, flag).detach().cpu().double().numpy() - oracle)
        by_flag[flag] = {"beyond_bound": int((err > bound).sum()), "elements": int(err.size),
                         "err_over_bound": round(float((err / bound).max()), 3)}
    highest = by_flag["highest"]
    obs.reference("highest_vs_engine", {k: highest[k] for k in ("beyond_bound", "elements")},
                  {"beyond_bound": 0, "elements": highest["elements"]},
                  observed_extras={"err_over_bound": highest["err_over_bound"]})
    obs.info("by_flag", "; ".join(f"{flag}: {'fp32' if r['beyond_bound'] == 0 else 'reduced'} "
                                  f"(largest error {r['err_over_bound']:g}x the fp32 bound)" for flag, r in by_flag.items()),
             diff=by_flag)
    return obs
