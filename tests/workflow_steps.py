"""Run one job of a GitHub Actions workflow here, step by step, as a runner would - so that a test runs
the workflow `harness init --ci github` writes, not a copy of its scripts.

`run_job(workflow, job, cwd=..., env=..., matrix=..., artifacts_dir=...)` parses the YAML and runs the
job's steps in order:

- `run:` steps in bash (`shell: bash`, here or in `defaults.run`: `bash --noprofile --norc -eo
  pipefail`; no shell named: `bash -e`, as Actions does), in `cwd` (the checkout) or the step's
  `working-directory`, with the workflow's, the job's and the step's `env:` merged over the given
  `env` and what a runner sets (CI=true, GITHUB_ACTIONS, GITHUB_EVENT_NAME, GITHUB_WORKSPACE,
  RUNNER_TEMP, GITHUB_OUTPUT, GITHUB_ENV);
- `${{ matrix.X }}`, `${{ env.X }}`, `${{ steps.X.outputs.Y }}`, `${{ github.event_name }}`,
  `${{ github.repository }}` ("owner/project") and `${{ github.event.pull_request.head.repo.full_name }}`
  (the same, or "a-fork/project" with `fork=True`; a property the event lacks is null, as in Actions)
  substituted in `run`, `env`, `with` and `working-directory`; any other expression (a secret, an
  unknown context, a matrix key the job lacks) raises WorkflowError - the test would otherwise pass
  on a script Actions would run differently;
- GITHUB_OUTPUT: a file per step whose `k=v` (and `k<<EOF` ... `EOF`) lines become
  `steps.<id>.outputs.k`; GITHUB_ENV lines join the later steps' environment;
- `if:` evaluated for the expression forms the generated workflow uses (`always()`, `success()`,
  `failure()`, `cancelled()`, `==`, `!=`, `&&`, `||`, `!`, parentheses, Actions' loose equality:
  strings case-insensitive, other mixed types compared as numbers); with no status function a step
  runs only while the job succeeds (`success() && ...`);
- the Actions glue stubbed: `actions/checkout` and `actions/setup-python` do nothing (cwd is the
  checkout, the caller's PATH has the Python), `actions/upload-artifact` copies `with.path` to
  `<artifacts_dir>/<with.name>/` (a directory's contents, as v4 uploads them; a name uploaded twice
  fails, as v4's conflict does), `actions/download-artifact` copies the artifact `with.name` into
  `with.path`, or those matching `with.pattern` into `with.path/<artifact>/`, and
  `actions/github-script` records that it would run (its script and env; the JavaScript is not run);
  any other action raises WorkflowError.

`stub_steps` replaces steps by name (or id): "" = the step does nothing and succeeds (an install
step, when the packages are already in the venv on PATH), other text = that bash script instead. A
failing step fails the job; later steps run only when their `if:` allows it. The JobResult has each
step's exit code, outputs and log, and the job's conclusion.

`workflow_gates(venv, project, tmp)` is the end-to-end use: the generated workflow's cell and chain
jobs on a real project, with the harness of `venv`.
"""

from __future__ import annotations

import fnmatch
import glob
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

EXPRESSION = re.compile(r"\$\{\{\s*(.*?)\s*\}\}", re.S)
STATUS_FUNCTIONS = ("always", "success", "failure", "cancelled")


class WorkflowError(Exception):
    """The workflow asks for something this runner cannot do as Actions would."""


@dataclass
class StepResult:
    name: str
    id: str | None
    ran: bool  # False: its `if:` skipped it
    rc: int | None = None  # None: skipped
    outputs: dict[str, str] = field(default_factory=dict)
    log: str = ""
    stubbed: bool = False
    would_run: dict[str, Any] | None = None  # actions/github-script: its script and env, not run

    @property
    def failed(self) -> bool:
        return self.ran and self.rc != 0


@dataclass
class JobResult:
    job: str
    conclusion: str  # "success" or "failure"
    steps: list[StepResult]

    def step(self, key: str) -> StepResult:
        """The step whose id or name is `key` (or whose `uses:` starts with it)."""
        for step in self.steps:
            if key in (step.id, step.name) or step.name.startswith(key):
                return step
        raise KeyError(f"{self.job}: no step {key!r}: {[s.name for s in self.steps]}")

    def log(self) -> str:
        return "\n".join(f"--- {s.name} (rc {s.rc})\n{s.log}" for s in self.steps if s.ran)


# --- expressions -------------------------------------------------------------------------------

TOKEN = re.compile(r"\s*(?:(?P<op>==|!=|&&|\|\||!|\(|\)|\.)|'(?P<str>(?:[^']|'')*)'|(?P<num>-?\d+(?:\.\d+)?)"
                   r"|(?P<name>[A-Za-z_][A-Za-z0-9_-]*))")


def _tokens(text: str) -> list[tuple[str, str]]:
    out, pos, text = [], 0, text.strip()
    while pos < len(text):
        match = TOKEN.match(text, pos)
        if not match or match.end() == pos:
            raise WorkflowError(f"cannot parse the expression {text!r} at {text[pos:]!r}")
        kind = next(k for k in ("op", "str", "num", "name") if match.group(k) is not None)
        value = match.group(kind)
        out.append((kind, value.replace("''", "'") if kind == "str" else value))
        pos = match.end()
    return out


class _Parser:
    """A recursive-descent evaluator of the expression subset the workflows here use."""

    def __init__(self, text: str, context: Mapping[str, Any], status: Mapping[str, bool]):
        self.text, self.tokens, self.i = text, _tokens(text), 0
        self.context, self.status = context, status

    def peek(self) -> tuple[str, str] | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def take(self, value: str | None = None) -> tuple[str, str]:
        token = self.peek()
        if token is None or (value is not None and token != ("op", value)):
            raise WorkflowError(f"{self.text!r}: expected {value or 'more'} at token {self.i}")
        self.i += 1
        return token

    def parse(self) -> Any:
        value = self.either()
        if self.peek() is not None:
            raise WorkflowError(f"{self.text!r}: unexpected {self.peek()}")
        return value

    def either(self) -> Any:
        value = self.both()
        while self.peek() == ("op", "||"):
            self.take()
            right = self.both()
            value = value if _truthy(value) else right
        return value

    def both(self) -> Any:
        value = self.negation()
        while self.peek() == ("op", "&&"):
            self.take()
            right = self.negation()
            value = right if _truthy(value) else value
        return value

    def negation(self) -> Any:
        if self.peek() == ("op", "!"):
            self.take()
            return not _truthy(self.negation())
        left = self.primary()
        if self.peek() in (("op", "=="), ("op", "!=")):
            op = self.take()[1]
            equal = _loose_equal(left, self.primary())
            return equal if op == "==" else not equal
        return left

    def primary(self) -> Any:
        kind, value = self.take()
        if (kind, value) == ("op", "("):
            inner = self.either()
            self.take(")")
            return inner
        if kind == "str":
            return value
        if kind == "num":
            return float(value)
        if kind != "name":
            raise WorkflowError(f"{self.text!r}: unexpected {value!r}")
        if value in ("true", "false"):
            return value == "true"
        if value == "null":
            return None
        if self.peek() == ("op", "("):
            self.take("(")
            self.take(")")
            if value not in STATUS_FUNCTIONS:
                raise WorkflowError(f"{self.text!r}: the function {value}() is not supported here")
            return self.status[value]
        path = [value]
        while self.peek() == ("op", "."):
            self.take()
            path.append(self.take()[1])
        return self.lookup(path)

    def lookup(self, path: list[str]) -> Any:
        if path[0] not in self.context:
            raise WorkflowError(f"{self.text!r}: the context {path[0]!r} cannot be resolved here")
        value: Any = self.context[path[0]]
        for i, part in enumerate(path[1:], 1):
            if (path[0] == "steps" or path[:2] == ["github", "event"]) and i >= 2 and isinstance(value, dict):
                value = value.get(part)  # an output a step did not set is null, as in Actions
                if value is None:
                    return None
                continue
            if not isinstance(value, dict) or part not in value:
                raise WorkflowError(f"{self.text!r}: {'.'.join(path[:i + 1])} cannot be resolved")
            value = value[part]
        return value


def _truthy(value: Any) -> bool:
    return value not in (None, False, 0, 0.0, "")


def _number(value: Any) -> float:
    if value is None:
        return 0.0
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, (int, float)):
        return float(value)
    try:
        return float(value.strip()) if value.strip() else 0.0
    except ValueError:
        return float("nan")


def _loose_equal(a: Any, b: Any) -> bool:
    """Actions' `==`: strings case-insensitively, else both as numbers (null 0, '' 0, 'abc' NaN)."""
    if isinstance(a, str) and isinstance(b, str):
        return a.lower() == b.lower()
    if a is None and b is None:
        return True
    return _number(a) == _number(b)


def evaluate(text: str, context: Mapping[str, Any], status: Mapping[str, bool] | None = None) -> Any:
    """One expression's value (`${{ }}` around it optional)."""
    match = EXPRESSION.fullmatch(text.strip())
    status = status or {"always": True, "success": True, "failure": False, "cancelled": False}
    return _Parser(match.group(1) if match else text, context, status).parse()


def substitute(text: str, context: Mapping[str, Any]) -> str:
    """`text` with each `${{ expr }}` replaced by its value (null: '', booleans: true / false)."""
    def value(match: re.Match) -> str:
        result = evaluate(match.group(1), context)
        if result is None:
            return ""
        if isinstance(result, bool):
            return "true" if result else "false"
        if isinstance(result, float) and result.is_integer():
            return str(int(result))
        return str(result)

    return EXPRESSION.sub(value, text)


def step_should_run(condition: Any, context: Mapping[str, Any], failed: bool) -> bool:
    status = {"always": True, "success": not failed, "failure": failed, "cancelled": False}
    if condition is None or condition == "":
        return status["success"]
    text = str(condition)
    inner = EXPRESSION.fullmatch(text.strip())
    text = inner.group(1) if inner else text
    if not re.search(r"\b(" + "|".join(STATUS_FUNCTIONS) + r")\s*\(", text):
        text = f"success() && ({text})"
    return _truthy(_Parser(text, context, status).parse())


# --- outputs, artifacts --------------------------------------------------------------------------

def read_key_values(path: Path) -> dict[str, str]:
    """GITHUB_OUTPUT / GITHUB_ENV lines: `k=v`, and `k<<DELIM` ... `DELIM`."""
    values: dict[str, str] = {}
    if not path.is_file():
        return values
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if "<<" in line and ("=" not in line or line.index("<<") < line.index("=")):
            key, delimiter = line.split("<<", 1)
            body = []
            i += 1
            while i < len(lines) and lines[i] != delimiter:
                body.append(lines[i])
                i += 1
            values[key] = "\n".join(body)
        elif "=" in line:
            key, value = line.split("=", 1)
            values[key] = value
        elif line.strip():
            raise WorkflowError(f"{path.name}: a line that is neither k=v nor k<<EOF: {line!r}")
        i += 1
    return values


def upload(with_: Mapping[str, Any], cwd: Path, artifacts_dir: Path) -> tuple[int, str]:
    name = str(with_.get("name") or "artifact")
    paths = [p for p in str(with_.get("path", "")).splitlines() if p.strip()]
    if len(paths) != 1:
        raise WorkflowError(f"upload-artifact {name}: one path is supported here, not {paths}")
    target = artifacts_dir / name
    if target.exists() and str(with_.get("overwrite", "false")).lower() != "true":
        return 1, f"an artifact named {name!r} exists already (v4: 409 Conflict)"
    matches = [Path(m) for m in sorted(glob.glob(str(cwd / paths[0].strip()), recursive=True))]
    if not matches:
        missing = str(with_.get("if-no-files-found", "warn"))
        if missing == "error":
            return 1, f"no files were found with the provided path: {paths[0]}"
        return 0, f"no files were found with the provided path: {paths[0]} ({missing}); no artifact uploaded"
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    for match in matches:
        if match.is_dir():
            shutil.copytree(match, target, dirs_exist_ok=True)
        else:
            shutil.copy2(match, target / match.name)
    return 0, f"uploaded {name}"


def download(with_: Mapping[str, Any], cwd: Path, artifacts_dir: Path) -> tuple[int, str]:
    path = cwd / str(with_.get("path") or ".")
    available = sorted(p.name for p in artifacts_dir.iterdir()) if artifacts_dir.is_dir() else []
    path.mkdir(parents=True, exist_ok=True)
    if with_.get("name"):
        name = str(with_["name"])
        if name not in available:
            return 1, f"artifact not found: {name}"
        shutil.copytree(artifacts_dir / name, path, dirs_exist_ok=True)
        return 0, f"downloaded {name}"
    pattern = str(with_.get("pattern") or "*")
    chosen = [a for a in available if fnmatch.fnmatchcase(a, pattern)]
    merge = str(with_.get("merge-multiple", "false")).lower() == "true"
    for name in chosen:
        shutil.copytree(artifacts_dir / name, path if merge else path / name, dirs_exist_ok=True)
    return 0, f"downloaded {len(chosen)} artifact(s): {', '.join(chosen)}"


# --- the job -------------------------------------------------------------------------------------

def _shell_command(step: Mapping[str, Any], job: Mapping[str, Any], workflow: Mapping[str, Any], script: Path) -> list[str]:
    shell = step.get("shell") or (job.get("defaults") or {}).get("run", {}).get("shell") or \
        (workflow.get("defaults") or {}).get("run", {}).get("shell")
    if shell is None:
        return ["bash", "-e", str(script)]
    if shell == "bash":
        return ["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)]
    raise WorkflowError(f"shell {shell!r} is not supported here (bash only)")


def _matrix(job: Mapping[str, Any], given: Mapping[str, Any] | None, name: str) -> dict[str, Any]:
    declared = ((job.get("strategy") or {}).get("matrix")) or {}
    if not declared:
        if given:
            raise WorkflowError(f"{name}: a matrix was given but the job has none")
        return {}
    if given is None:
        raise WorkflowError(f"{name}: the job has a matrix {declared}; give one combination")
    for key, value in given.items():
        if key not in declared or value not in declared[key]:
            raise WorkflowError(f"{name}: matrix {key}={value!r} is not one of the job's {declared.get(key)}")
    missing = set(declared) - set(given) - {"include", "exclude"}
    if missing:
        raise WorkflowError(f"{name}: the matrix lacks {sorted(missing)}")
    return dict(given)


def run_job(workflow_path: Path, job: str, *, cwd: Path, env: Mapping[str, str], matrix: Mapping[str, Any] | None = None,
            artifacts_dir: Path, event: str = "push", stub_steps: Mapping[str, str] | None = None,
            timeout: float = 1800, verbose: bool = False, fork: bool = False) -> JobResult:
    """Run `job` of the workflow at `workflow_path` (module docstring); its conclusion and steps.
    `fork`: a pull request from a fork (its head repository is not `github.repository`)."""
    workflow = yaml.safe_load(Path(workflow_path).read_text(encoding="utf-8"))
    spec = (workflow.get("jobs") or {}).get(job)
    if spec is None:
        raise WorkflowError(f"no job {job!r} in {workflow_path}")
    stub_steps = dict(stub_steps or {})
    steps_spec = spec.get("steps") or []
    unknown = set(stub_steps) - {s.get("name") for s in steps_spec} - {s.get("id") for s in steps_spec}
    if unknown:
        raise WorkflowError(f"stub_steps names no step of {job}: {sorted(unknown)}")
    cwd = Path(cwd).resolve()
    artifacts_dir = Path(artifacts_dir)
    artifacts_dir.mkdir(parents=True, exist_ok=True)
    repository = "owner/project"
    payload = {"pull_request": {"head": {"repo": {"full_name": "a-fork/project" if fork else repository}}}} \
        if event == "pull_request" else {}
    context: dict[str, Any] = {"matrix": _matrix(spec, matrix, job), "steps": {},
                               "github": {"event_name": event, "repository": repository, "event": payload}}
    results: list[StepResult] = []
    failed = False
    with tempfile.TemporaryDirectory(prefix="runner-temp-") as temp:
        runner_temp = Path(temp)
        github_env = runner_temp / "github-env"
        github_env.touch()
        base = {**env, "CI": "true", "GITHUB_ACTIONS": "true", "GITHUB_EVENT_NAME": event, "GITHUB_REPOSITORY": repository,
                "GITHUB_WORKSPACE": str(cwd), "RUNNER_TEMP": str(runner_temp), "GITHUB_ENV": str(github_env)}
        declared: dict[str, str] = {}  # the env context: the workflow's and the job's env (not the OS's)
        for level in (workflow.get("env") or {}, spec.get("env") or {}):  # env.X sees the levels above
            for key, value in level.items():
                declared[key] = substitute(str(value), {**context, "env": dict(declared)})
        for index, step in enumerate(steps_spec):
            name = str(step.get("name") or step.get("uses") or f"step {index}")
            sid = step.get("id")
            context["env"] = {**declared, **read_key_values(github_env)}
            condition = step.get("if")
            if isinstance(condition, bool):
                condition = "true" if condition else "false"
            result = StepResult(name, sid, ran=step_should_run(condition, context, failed))
            results.append(result)
            if not result.ran:
                if sid:
                    context["steps"][sid] = {"outputs": {}, "outcome": "skipped"}
                if verbose:
                    print(f"runner: {job}: skip {name}", flush=True)
                continue
            step_env = {**base, **context["env"]}
            for key, value in (step.get("env") or {}).items():
                step_env[key] = substitute(str(value), context)
            with_ = {k: substitute(str(v), context) for k, v in (step.get("with") or {}).items()}
            output = runner_temp / f"output-{index}"
            output.touch()
            step_env["GITHUB_OUTPUT"] = str(output)
            workdir = cwd / substitute(str(step.get("working-directory", ".")), context)
            stub = stub_steps.get(name, stub_steps.get(sid)) if (name in stub_steps or sid in stub_steps) else None
            if stub == "":
                result.rc, result.stubbed, result.log = 0, True, "stubbed: nothing run"
            elif "run" in step or stub is not None:
                script = runner_temp / f"step-{index}.sh"
                script.write_text(stub if stub is not None else substitute(str(step["run"]), context), encoding="utf-8")
                result.stubbed = stub is not None
                try:
                    done = subprocess.run(_shell_command(step, spec, workflow, script), cwd=workdir, env=step_env,
                                          capture_output=True, text=True, timeout=timeout)
                    result.rc, result.log = done.returncode, done.stdout + done.stderr
                except subprocess.TimeoutExpired as exc:
                    result.rc, result.log = 124, f"timed out after {timeout} s\n{exc.stdout or ''}"
            else:
                result.rc, result.log, result.would_run = _action(str(step.get("uses", "")), with_, step_env, cwd,
                                                                  artifacts_dir)
            result.outputs = read_key_values(output)
            if sid:
                context["steps"][sid] = {"outputs": result.outputs,
                                         "outcome": "success" if result.rc == 0 else "failure"}
            if result.rc != 0 and not step.get("continue-on-error"):
                failed = True
            if verbose:
                print(f"runner: {job}: {name} -> {result.rc}", flush=True)
    return JobResult(job, "failure" if failed else "success", results)


def _action(uses: str, with_: Mapping[str, Any], env: Mapping[str, str], cwd: Path,
            artifacts_dir: Path) -> tuple[int, str, dict[str, Any] | None]:
    action = uses.split("@", 1)[0]
    if action in ("actions/checkout", "actions/setup-python"):
        return 0, f"{action}: nothing to do here", None
    if action == "actions/upload-artifact":
        return (*upload(with_, cwd, artifacts_dir), None)
    if action == "actions/download-artifact":
        return (*download(with_, cwd, artifacts_dir), None)
    if action == "actions/github-script":
        return 0, "github-script: not run", {"script": with_.get("script", ""), "env": dict(env)}
    raise WorkflowError(f"the action {uses!r} is not stubbed here")


# --- the generated workflow, end to end ----------------------------------------------------------

def harness_env(venv: Path) -> dict[str, str]:
    """The runner's environment: the venv's bin first on PATH, no checkout on PYTHONPATH, no CI or
    GitHub variables of the shell that runs the test."""
    dropped = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "CI", "PYTEST_XDIST_AUTO_NUM_WORKERS", "PYTEST_ADDOPTS")
    env = {k: v for k, v in os.environ.items() if k not in dropped and not k.startswith(("GITHUB_", "RUNNER_"))}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["VIRTUAL_ENV"] = str(venv)
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def workflow_gates(venv: Path, project: Path, tmp: Path, *, label: str = "run", event: str = "pull_request",
                   verbose: bool = True) -> dict[str, Any]:
    """The workflow `harness init --ci github` writes, run on `project` with the harness in `venv`.

    The workflow is written by the venv's `harness init --ci github` (matrix: the venv's own
    transformers and torch) unless the project has one. Its `cell` job runs in the project (the
    checkout) with the install step stubbed - the venv on PATH has the packages installed, which is
    what that step would do - and its `chain` job in an empty workspace of its own, the artifacts
    passing through `tmp/<label>-artifacts`. The project is left as it was (the cell's `cell/`
    folder is removed; the committed records are never written: CI=true is read-only).

    Returns: cell / chain (JobResult), cell_conclusion, chain_conclusion, exit_code (the check's),
    env_key, baseline (the cell's results.json meta.baseline_key), regressed (the categories of its
    regressions), summary (the chain's summary.md) and posted (whether the sticky-comment step would
    have run)."""
    from harness.cli import ci

    env = harness_env(venv)
    workflow = project / ci.WORKFLOW
    if not workflow.exists():
        done = subprocess.run([str(venv / "bin" / "harness"), "init", "--ci", "github"], cwd=project, env=env,
                              capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            raise WorkflowError(f"harness init --ci github: exit {done.returncode}\n{done.stdout}{done.stderr}")
    declared = yaml.safe_load(workflow.read_text(encoding="utf-8"))["jobs"]["cell"]["strategy"]["matrix"]
    matrix = {key: values[0] for key, values in declared.items()}
    artifacts = tmp / f"{label}-artifacts"
    shutil.rmtree(project / "cell", ignore_errors=True)
    try:
        cell = run_job(workflow, "cell", cwd=project, env=env, matrix=matrix, artifacts_dir=artifacts, event=event,
                       stub_steps={ci.INSTALL_STEP: ""}, verbose=verbose)
    finally:
        shutil.rmtree(project / "cell", ignore_errors=True)
    workspace = tmp / f"{label}-chain"
    workspace.mkdir(parents=True)
    chain = run_job(workflow, "chain", cwd=workspace, env=env, artifacts_dir=artifacts, event=event, verbose=verbose)
    kept = artifacts / ci.cell_name(matrix["transformers"], matrix["torch"], matrix["dtype"])
    code = (kept / "check-exit-code").read_text().strip() if (kept / "check-exit-code").is_file() else None
    key = (kept / "env-key").read_text().strip() if (kept / "env-key").is_file() else None
    baseline, regressed = None, []
    if key:
        import json

        runs = sorted((kept / "reports" / key).glob("*/results.json"))
        results = json.loads(runs[-1].read_text()) if runs else {}
        baseline = results.get("meta", {}).get("baseline_key")
        regressed = sorted({o.get("category", "") for o in results.get("outcomes", []) if o.get("status") == "regression"})
    summary = workspace / "chain" / "summary.md"
    post = next((s for s in chain.steps if s.would_run is not None), None)
    return {"cell": cell, "chain": chain, "cell_conclusion": cell.conclusion, "chain_conclusion": chain.conclusion,
            "exit_code": int(code) if code is not None else None, "env_key": key, "baseline": baseline,
            "regressed": regressed,
            "summary": summary.read_text(encoding="utf-8") if summary.is_file() else "", "posted": post is not None}
