"""The preflight as `harness check` / `regen` print it (issue 42): before pytest starts, one line per
user model - its parameters, its plan (the full grid or the budget plan), the estimated seconds per
suite and in total, the memory a worker holds - and the number of pytest-xdist workers chosen by
memory as well as by cores. A model that cannot fit one worker stops the run here with one line
naming the ways out (harness/settings/preflight.py `refusal`). Reads config.json and the safetensors
headers only (the parameters were counted by `resolve`); nothing is loaded.
"""

from __future__ import annotations

from harness import cases
from harness.settings import preflight
from harness.settings.models import UserModel
from harness.settings.run import RunSettings


class PlanError(ValueError):
    """The run cannot fit this machine's memory; the message is the one line to print."""


def memory_of(model: UserModel, run: RunSettings) -> preflight.Memory:
    return preflight.worker_memory(model.params, model.dtype or run.dtype, preflight.file_bytes(model.path))


def line(model: UserModel, run: RunSettings, workers: int, calibration: float | None = None) -> str:
    """`harness: plan: NAME: ...` - what the benchmark (benchmarks/real_size.py) parses for the estimate."""
    work = cases.user_work(run, model)
    seconds = preflight.estimate(model.params, work, calibration or preflight.CALIBRATION, workers)
    memory = memory_of(model, run)
    suites = ", ".join(f"{s} {v:.0f} s" for s, v in sorted(seconds.items(), key=lambda kv: -kv[1]) if s != "total")
    plan = f"budget plan ({model.plan.why})" if model.plan.budgeted else "full grid"
    budget = model.plan.seconds
    over = f"; over its budget of {budget:.0f} s" if budget and seconds["total"] > budget else ""
    return (f"harness: plan: {model.name}: {model.params / 1e6:.0f}M parameters, {plan}; estimate ~{seconds['total']:.0f} s "
            f"at this machine's speed now (calibration {calibration or preflight.CALIBRATION:.4f} s) "
            f"({suites}){over}; memory ~{memory.private / preflight.GIB:.1f} GiB a worker + "
            f"{memory.shared / preflight.GIB:.1f} GiB of mapped weights; {workers} worker{'s' if workers != 1 else ''}")


def workers(run: RunSettings, chosen: str | None, explicit: bool, available: int | None = None) -> str | None:
    """The -n a run uses: `chosen` (the default's or the user's) capped by memory when user models
    run and -n was not given; prints the plan line per user model. PlanError when one worker does
    not fit."""
    models = [m for m in run.user_models if not m.unavailable]  # (the real model without its files skips)
    if not models:
        return chosen
    available = preflight.available_memory() if available is None else available
    cores = preflight.cpu_count() if chosen in (None, "auto", "logical") else max(int(chosen), 1)
    if chosen is None:
        cores = 1
    fits = min(preflight.workers_for(memory_of(m, run), cores, available) for m in models)
    if fits == 0:
        worst = max(models, key=lambda m: memory_of(m, run).total(1))
        raise PlanError(preflight.refusal(worst.name, memory_of(worst, run), available, worst.dtype or run.dtype))
    n = cores if explicit else min(cores, fits)
    speed = preflight.calibration()
    for model in models:
        print(line(model, run, n, speed), flush=True)
    if explicit or n >= cores:
        return chosen
    print(f"harness: {n} worker{'s' if n != 1 else ''} instead of {cores}: each holds its own copy of the model's "
          f"working memory, and {available / preflight.GIB:.1f} GiB is available", flush=True)
    return None if n <= 1 else str(n)
