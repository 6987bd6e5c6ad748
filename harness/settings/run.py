"""What one run is, as one typed noun: `RunSettings`.

A run is the project's `[tool.harness]` (harness/settings/config.py) plus the choices of this
invocation - the env axes (dtype, device, attention, threads), the baseline, strictness, regen,
deep mode, the fault to inject, the case filter, your own model, where results go. It is made
once, from whichever front end started the run, and travels as this object:

    harness check ...      -> RunSettings.from_cli(args, config)  -> .to_pytest_args()  -> pytest
    pytest suites ...      -> RunSettings.from_pytest_config(config)  (kept in config.stash)

`OPTIONS` is the one table of the run's flags: the plugin registers its pytest options from it, the
CLI its flags, and `to_pytest_args` writes exactly those back, so the two front ends cannot drift
apart and nothing is mirrored by hand. Defaults live in the dataclass fields below, nowhere else.
`validate` is the one check of a run's settings (run by `harness check` before it starts pytest,
and by the plugin for a plain `pytest` run): one line naming the flag or key, never a traceback.

Nothing here touches `os.environ`: the case tables read deep mode and the seed salt from the
settings the plugin stashed (`harness.plugin` `run_settings`). The one input read from the process
environment is `CI` (set by CI systems): a CI run is strict, so it can never go green on records it
wrote itself.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from harness.settings import budget, real
from harness.settings.config import HarnessConfig
from harness.settings.models import ModelError, UserModel, from_flags, resolve
from harness.store.env import canonical_dtype

DTYPES = ("fp32", "bf16", "fp16", "fp64")
PHASES = ("all", "parallel", "timing")


class SettingsError(ValueError):
    """Settings a run cannot use; the message names the flag or key and the fix."""


@dataclass(frozen=True)
class Option:
    """One run setting as a flag: the `RunSettings` field, its pytest flag and its `harness`
    flag (None: not a flag of that front end), and argparse keyword arguments."""

    field: str
    pytest: str
    cli: str | None
    help: str
    kwargs: tuple[tuple[str, Any], ...] = ()

    @property
    def dest(self) -> str:
        return f"harness_{self.field}"

    def flag(self, front: str) -> str:
        """How this option is spelled on a front end ("cli": `harness check`, else pytest)."""
        return (self.cli or self.pytest) if front == "cli" else self.pytest

    def parser_kwargs(self) -> dict[str, Any]:
        return {"dest": self.dest, "default": None, "help": self.help, **dict(self.kwargs)}


_FLAG = (("action", "store_true"),)
_INT = (("type", int),)

OPTIONS: tuple[Option, ...] = (
    Option("regen", "--force-regen", None, "rewrite the current env's golden records and list what changed", _FLAG),
    Option("strict", "--harness-strict", "--strict",
           "a field without a baseline record, or a baseline field nobody observed, fails (CI always is strict)", _FLAG),
    Option("baseline", "--baseline", "--baseline",
           "env key whose records to compare against (default: [tool.harness] baseline, else this env's own)",
           (("metavar", "KEY"),)),
    Option("record", "--harness-record", "--record",
           "also write this environment's records when the baseline is another environment's (default: such a "
           "run writes nothing)", _FLAG),
    Option("golden_dir", "--golden-dir", "--golden-dir", "golden record store (default: [tool.harness] golden_dir)",
           (("metavar", "DIR"),)),
    Option("results", "--harness-results", None, "where results.json goes (default: <reports_dir>/results.json)",
           (("metavar", "PATH"),)),
    Option("dtype", "--harness-dtype", "--dtype", "dtype of the run: fp32, bf16, fp16 (default fp32)"),
    Option("device", "--harness-device", "--device", "device of the run: cpu, cuda[:N], mps (default cpu)"),
    Option("attn", "--harness-attn", "--attn", "attention implementation of the run (default sdpa)"),
    Option("threads", "--harness-threads", "--threads",
           "torch intra-op threads of the run (default 1: the same env key wherever it runs)", _INT),
    Option("model", "--harness-model", "--model",
           "run only this checkpoint of yours (a save_pretrained directory, safetensors)", (("metavar", "PATH"),)),
    Option("assistant", "--harness-assistant", "--assistant", "--model's assistant: adds the assisted / ensemble cases",
           (("metavar", "PATH"),)),
    Option("deep", "--harness-deep", "--deep",
           "the deeper modes: every sampling path x setting at a smaller detectable TV, 3x the latency samples "
           "(slower; never writes records)", _FLAG),
    Option("fault", "--inject-fault", "--inject-fault",
           "inject a fault of the catalogue (harness/faults/catalogue.py, `harness faults --list`) for this run",
           (("metavar", "NAME"),)),
    Option("cases", "--harness-case", None,
           "run only the golden tests whose case id matches GLOB (repeatable; SUITE:GLOB for one suite); the "
           "per-test alpha stays that of the whole collection", (("metavar", "GLOB"), ("action", "append"))),
    Option("seed_salt", "--harness-seed-salt", "--seed-salt",
           "draw every statistical case from fresh seeds (an integer; false-alarm measurements)", _INT),
    Option("latency_strict", "--harness-latency-strict", "--latency-strict",
           "a latency field not judged because the machine was busy fails the run (default: skipped, with the reason)",
           _FLAG),
    Option("phase", "--harness-phase", None,
           "run one phase of the suites: 'parallel' (every test but the timing ones) or 'timing' (only the "
           "tests marked timing, so nothing else runs while they measure); default all", (("choices", PHASES),)),
    Option("budget", "--harness-budget", "--budget",
           "your models' wall-time budget (5m, 300s, 1h): the cases that cover every suite at the smallest cost, the "
           "rest listed as left out; 'full' runs every case - the zoo's too, whose default is its quick tier "
           "(harness/cases/tier.py) (default: [tool.harness] budget, else the plan for a model over 100M "
           "parameters)", (("metavar", "TIME"),)),
    Option("no_cache", "--harness-no-cache", "--no-cache",
           "compute every reference-engine answer afresh instead of reading the on-disk cache "
           "(the cache is keyed by weights, torch, dtype and the engine's code; a stale entry is never used)", _FLAG),
)
BY_FIELD = {o.field: o for o in OPTIONS}
PYTEST_FLAGS = {o.pytest: o for o in OPTIONS}

# The one list of pytest options `harness check` / `regen` own (they set them from their own flags;
# the value is the flag to use instead, "" for none) - refused wherever pytest would read them: after
# --, in PYTEST_ADDOPTS and in the ini's addopts (`owned_option`, applied by the CLI and, on the list
# pytest actually parses, by the plugin: harness/plugin/options.py `check_front`).
FRONT_INI = "harness_front"  # "cli": this pytest run was started by `harness check` / `regen`
OWNED_OPTIONS = {**{o.pytest: o.cli or "" for o in OPTIONS if o.cli},
                 "--force-regen": "harness regen", "--harness-results": "", "--rootdir": "--root"}
# pytest modes that run no test: a check in such a mode compared nothing (`not checked`)
NO_TEST_MODES = ("--collect-only", "--co", "--markers", "--setup-only", "--setup-plan", "--fixtures", "--funcargs",
                 "--fixtures-per-test")


def owned_option(args: Sequence[str]) -> str | None:
    """The first item of `args` that sets what the harness owns: an option of `OWNED_OPTIONS`
    (``--flag`` or ``--flag=value``), the harness plugin switched off (``-p no:harness``) or its
    front marker overridden (``-o harness_front=...``); None when there is none."""
    items = list(args)
    for i, item in enumerate(items):
        name = item.split("=", 1)[0]
        following = items[i + 1] if i + 1 < len(items) else ""
        plugin = item[2:] if item.startswith("-p") and len(item) > 2 else following if item == "-p" else ""
        override = item[2:] if item.startswith("-o") and len(item) > 2 else following \
            if item in ("-o", "--override-ini") else item.split("=", 1)[1] if name == "--override-ini" else ""
        if name in OWNED_OPTIONS:
            return item
        if plugin.strip().startswith("no:harness") or override.strip().startswith(FRONT_INI):
            return item if len(item) > 2 and item != "--override-ini" else f"{item} {following}"
    return None


def no_test_mode(args: Sequence[str]) -> str | None:
    """The first item of `args` that puts pytest in a mode that runs no test (`NO_TEST_MODES`)."""
    return next((a for a in args if a.split("=", 1)[0] in NO_TEST_MODES), None)


# pytest options that empty or write a path: --basetemp is emptied when the first tmp_path is made,
# cache_dir is written (and emptied by --cache-clear), the others are files pytest or a plugin writes.
# None of them may point at what the harness keeps (`clobbering_option`): `harness check --
# --basetemp=golden/records` deleted every record.
PATH_OPTIONS = ("--basetemp", "--junitxml", "--junit-xml", "--result-log", "--resultlog", "--report-log", "--html",
                "--debug")
INI_PATHS = ("cache_dir",)  # ini keys that name such a path, set with -o / --override-ini


def path_options(args: Sequence[str]) -> list[tuple[str, str]]:
    """(the option as given, its path) for each item of `args` that points pytest's temp, cache or
    output at a path: ``--opt VALUE``, ``--opt=VALUE``, ``-o cache_dir=X`` / ``-ocache_dir=X`` /
    ``--override-ini[=]cache_dir=X``."""
    items, found = list(args), []
    for i, item in enumerate(items):
        name, eq, value = item.partition("=")
        following = items[i + 1] if i + 1 < len(items) else ""
        if name in PATH_OPTIONS:
            if eq:
                found.append((item, value))
            elif following and not (following.startswith("-") and name == "--debug"):
                found.append((f"{item} {following}", following))
            elif name == "--debug":
                found.append((item, "pytestdebug.log"))
            continue
        override = item[2:] if item.startswith("-o") and len(item) > 2 and not item.startswith("--") else \
            following if item in ("-o", "--override-ini") else value if name == "--override-ini" else ""
        key, eq, path = override.partition("=")
        if eq and key.strip() in INI_PATHS:
            found.append((item if override is not following else f"{item} {following}", path.strip()))
    return found


def clobbers(target: Path, kept: Path, inside_too: bool = True) -> bool:
    """Whether pytest emptying or writing `target` touches `kept`: the same path, a directory above
    it, or (`inside_too`) a path inside it - both resolved."""
    target, kept = target.resolve(), kept.resolve()
    return target == kept or target in kept.parents or (inside_too and kept in target.parents)


def kept_paths(config: HarnessConfig, golden_dir: Path | None = None) -> list[tuple[str, Path, bool]]:
    """What pytest's temp / cache / output may never touch: (what, path, inside too) - the golden
    store and the models, and anything inside them; the reports directory itself (a junit.xml of
    your own may go inside it)."""
    stores = dict.fromkeys([golden_dir or config.golden_dir, config.golden_dir])
    return [*(("the golden store", p, True) for p in stores), ("the models", config.models_dir, True),
            ("the reports", config.reports_dir, False)]


def clobbering_option(args: Sequence[str], kept: Sequence[tuple[str, Path, bool]], cwd: Path, rootdir: Path) -> str:
    """Why one of `args` points pytest's temp / cache / output at something `kept` (`kept_paths`) -
    '' when none does. A relative option path is pytest's: from `cwd` (an ini path: from `rootdir`)."""
    for given, value in path_options(args):
        if not value:
            continue
        base = rootdir if given.startswith(("-o", "--override-ini")) else cwd
        target = base / Path(value).expanduser()
        for what, path, inside_too in kept:
            if clobbers(target, path, inside_too):
                return (f"pytest option {given!r} points at {target.resolve()}, which is or holds {what} "
                        f"({path.resolve()}): pytest would empty or overwrite it; point it elsewhere")
    return ""


@dataclass(frozen=True)
class RunSettings:
    """One run's settings. Paths are absolute; `config` is the project's `[tool.harness]`."""

    config: HarnessConfig
    golden_dir: Path
    results: Path
    baseline: str = ""  # "" = this environment's own records
    strict: bool = False
    regen: bool = False
    record: bool = False  # write this env's records even when comparing against another env's baseline
    deep: bool = False
    dtype: str = "fp32"
    device: str = "cpu"
    attn: str = "sdpa"
    threads: int = 1
    model: Path | None = None
    assistant: Path | None = None
    fault: str | None = None
    cases: tuple[str, ...] = ()
    seed_salt: int = 0
    latency_strict: bool = False  # a latency field not judged (busy machine) fails
    phase: str = "all"  # "parallel": every test but the timing ones; "timing": only those
    no_cache: bool = False  # compute the reference engine's answers afresh (else: its on-disk cache)
    budget: str | None = None  # --budget (harness/settings/budget.py); None: [tool.harness] budget, else the size rule
    user_models: tuple[UserModel, ...] = field(default=(), compare=False)  # resolved by `validate`

    # construction -------------------------------------------------------------------------
    @classmethod
    def make(cls, config: HarnessConfig, given: dict[str, Any], ci: bool | None = None) -> RunSettings:
        """From the project's settings and the values given on a command line (None: not given)."""
        given = {k: v for k, v in given.items() if v is not None}
        golden = Path(given.pop("golden_dir")).resolve() if "golden_dir" in given else config.golden_dir
        results = Path(given.pop("results")).resolve() if "results" in given else config.reports_dir / "results.json"
        for key in ("model", "assistant"):
            if key in given:
                given[key] = Path(given[key]).resolve()
        if "cases" in given:
            given["cases"] = tuple(given["cases"])
        given.setdefault("baseline", config.baseline)
        if config.budget:
            given.setdefault("budget", config.budget)
        regen = bool(given.get("regen"))
        ci = bool(os.environ.get("CI")) if ci is None else ci
        strict = bool(given.pop("strict", False)) or (ci and not regen)
        # CI runners are busy machines: there a latency field not judged fails, unless the project opts out
        latency_strict = bool(given.pop("latency_strict", False)) or (ci and not regen and config.ci_latency_strict)
        return cls(config=config, golden_dir=golden, results=results, strict=strict, latency_strict=latency_strict,
                   **given)

    @classmethod
    def from_pytest_config(cls, pytest_config: Any, config: HarnessConfig) -> RunSettings:
        """The settings of a pytest run (pytest's own ``--strict`` / ``strict`` ini also make it strict)."""
        given = {o.field: pytest_config.getoption(o.dest, None) for o in OPTIONS}
        if _pytest_strict(pytest_config):
            given["strict"] = True
        return cls.make(config, given)

    @classmethod
    def from_cli(cls, args: Any, config: HarnessConfig) -> RunSettings:
        """The settings of `harness check` / `harness regen` (argparse namespace, dests from `OPTIONS`)."""
        return cls.make(config, {o.field: getattr(args, o.dest, None) for o in OPTIONS})

    def to_pytest_args(self) -> list[str]:
        """The pytest flags that make `from_pytest_config` return these settings in the child run."""
        out: list[str] = []
        defaults = RunSettings(self.config, self.config.golden_dir, self.config.reports_dir / "results.json")
        for option in OPTIONS:
            value = getattr(self, option.field)
            if option.field in ("golden_dir", "results"):
                out += [option.pytest, str(value)]
            elif option.field == "baseline":
                if value:
                    out += [option.pytest, value]
            elif isinstance(value, bool):
                if value:
                    out.append(option.pytest)
            elif isinstance(value, tuple):
                for item in value:
                    out += [option.pytest, str(item)]
            elif value is not None and (value != getattr(defaults, option.field) or option.field == "threads"):
                out += [option.pytest, str(value)]
        return out

    def with_(self, **changes: Any) -> RunSettings:
        return replace(self, **changes)

    # derived ------------------------------------------------------------------------------
    @property
    def read_only(self) -> bool:
        """A deep run is an investigation: it never writes records (unless regenerating on purpose);
        a strict one only reads; a run with a fault injected never writes, whatever the flags."""
        return self.strict or (self.deep and not self.regen) or bool(self.fault)

    @property
    def full(self) -> bool:
        """Every case of the zoo runs: `--budget full` (or `[tool.harness] budget = "full"`), a deep
        run, regen, an injected fault, a case selection or a one-off `--model` run; otherwise
        the zoo runs its quick tier (harness/cases/tier.py)."""
        try:
            full_budget = budget.parse(self.budget) == 0.0
        except budget.BudgetError:
            full_budget = False  # (validate() refuses it before any run)
        return full_budget or self.regen or self.deep or bool(self.fault) or bool(self.cases) or self.one_off

    @property
    def one_off(self) -> bool:
        """`--model PATH`: only that checkpoint's cases run."""
        return self.model is not None

    @property
    def runs_real_model(self) -> bool:
        """The harness's real model runs where the zoo does: not in a one-off `--model` run, not in a
        project whose own models replace the zoo, only if a `models` list names it, never turned off."""
        config = self.config
        return (not self.one_off and (not config.user_models or config.zoo)
                and (not config.models or real.NAME in config.models) and not real.turned_off(config.real_model))

    # validation ---------------------------------------------------------------------------
    def validate(self, front: str = "pytest", fetch: bool = True) -> RunSettings:
        """Check what can be checked without running anything, and resolve the user models
        (harness/settings/models.py `resolve`) and the harness's real model (harness/settings/real.py:
        fetched and converted first where `fetch` and its extra allow). `SettingsError` names the flag (as
        `front` spells it: "cli" or "pytest") or the key."""
        def flag(name: str) -> str:
            return BY_FIELD[name].flag(front)

        try:
            dtype = canonical_dtype(self.dtype)
        except ValueError:
            raise SettingsError(f"{flag('dtype')} {self.dtype!r}: unknown dtype; expected one of "
                                f"{', '.join(DTYPES[:3])}") from None
        if self.threads < 1:
            raise SettingsError(f"{flag('threads')} must be >= 1, got {self.threads}")
        if self.fault and self.regen:
            raise SettingsError(f"{flag('fault')} with --force-regen: a run with an injected fault never writes "
                                "records; drop one of them")
        if self.assistant is not None and self.model is None:
            raise SettingsError(f"{flag('assistant')} needs {flag('model')} PATH (the model it drafts for)")
        try:
            seconds = budget.parse(self.budget, flag("budget"))
        except budget.BudgetError as exc:
            raise SettingsError(str(exc)) from None
        try:
            declared = (from_flags(str(self.model), str(self.assistant) if self.assistant else None),) if self.model \
                else self.config.user_models
            users = tuple(replace(m, plan=budget.plan_for(m.params, seconds)) for m in map(resolve, declared))
        except ModelError as exc:
            raise SettingsError(f"bad model: {exc}") from None
        if self.runs_real_model:
            users = (*users, real.real_model(fetch))
        return replace(self, dtype=dtype, user_models=users)

    def describe(self) -> dict[str, Any]:
        """The settings as plain data (results.json meta)."""
        out = {}
        for f in fields(self):
            if f.name in ("config", "user_models"):
                continue
            value = getattr(self, f.name)
            out[f.name] = str(value) if isinstance(value, Path) else list(value) if isinstance(value, tuple) else value
        return out


def cli_flags() -> Sequence[Option]:
    """The options `harness check` / `harness regen` take as flags of their own."""
    return [o for o in OPTIONS if o.cli]


def _pytest_strict(config: Any) -> bool:
    try:
        return bool(config.getini("strict"))
    except (ValueError, KeyError):
        return False
