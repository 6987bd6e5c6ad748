"""What both CI variants (harness/cli/ci.py: GitHub Actions, harness/cli/ci_gitlab.py: GitLab CI) run, in
one place so they cannot drift: the cell job's install, check and gate scripts, the chain job's
script, the sticky comment's marker, the Python and the torch index - and what `harness init --ci`
reads from the project to write them (how it installs genharness, its constraints.txt, where its
checkpoints go).

The gate: each cell runs `harness check` with CI=true (strict: read-only, a field without a record
fails, latency strict) against the project's committed records - its own env's, else the nearest
recorded env of the same device and dtype, so a cell of a newer transformers is checked against the
older version's records - saves the exit code, and its job fails on it after the reports are kept.
The chain job joins the cells' summary.md and fails when a cell failed or left no report.

The scripts read only files and environment variables (no CI templating inside them); CHAIN_SCRIPT
writes its `status=N` line to $GITHUB_OUTPUT (GitLab: a file the job names so). tests/test_ci.py runs
the GitHub jobs step by step (tests/workflow_steps.py) on a real project.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

MARKER = "<!-- genharness-summary -->"  # the sticky comment's first line: found and updated on every run
PYTHON = "3.11"
TORCH_INDEX = "https://download.pytorch.org/whl/cpu"
# the pins a cell of another transformers / torch must not keep (README: "The upgrade workflow")
UNPINNED = "transformers|tokenizers|huggingface_hub|hf-xet|torch"
OTHER_CONSTRAINTS = '"${TMPDIR:-/tmp}/genharness-other-constraints.txt"'


def cell_ids(transformers: Sequence[str], torch: Sequence[str], dtypes: Sequence[str]) -> list[str]:
    """'<transformers>-<torch>-<dtype>' for every cell (its artifact: `cell-<id>`), grouped by (torch,
    dtype), transformers in the order given: the chain lists them so, an upgrade's cells side by side."""
    return [f"{v}-{t}-{d}" for t in torch for d in dtypes for v in transformers]


@dataclass(frozen=True)
class Project:
    """What `harness init --ci` found in the project directory."""

    install: str  # the command that installs the project's own dev dependencies, genharness among them
    found: str  # where that came from ("requirements-dev.txt", "pyproject.toml [dependency-groups] dev"); "" = fallback
    constraints: bool = False  # a constraints.txt in the project root
    models: tuple[str, ...] = ()  # the checkpoint paths [tool.harness.models.*] names


def _names_genharness(requirement: object) -> bool:
    return isinstance(requirement, str) and re.match(r"\s*genharness(?![\w.-])", requirement, re.I) is not None


def _requirements_file(directory: Path) -> Path | None:
    """The first requirements*.txt (root) or requirements/*.txt with a line (not a comment) naming genharness."""
    for path in [*sorted(directory.glob("requirements*.txt")), *sorted(directory.glob("requirements/*.txt"))]:
        try:
            lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            continue
        if any("genharness" in line.split("#", 1)[0].lower() for line in lines):
            return path
    return None


def _pyproject(directory: Path) -> dict:
    from harness.store.reading import InputError, read_toml

    path = directory / "pyproject.toml"
    if not path.is_file():
        return {}
    try:
        return read_toml(path)
    except InputError:
        return {}


def inspect_project(directory: Path, fallback: str) -> Project:
    """How the project in `directory` installs genharness - a requirements file naming it, else
    pyproject.toml's [project] dependencies, an optional-dependencies extra or a [dependency-groups]
    group naming it - else `fallback` (a pinned requirement the workflow says to replace); whether it
    has a constraints.txt; the checkpoint paths of its [tool.harness.models]."""
    data = _pyproject(directory)
    harness_models = data.get("tool", {}).get("harness", {}).get("models", {})
    models = tuple(str(m[key]) for m in harness_models.values() if isinstance(m, dict)
                   for key in ("path", "assistant") if isinstance(m.get(key), str))
    constraints = (directory / "constraints.txt").is_file()
    requirements = _requirements_file(directory)
    if requirements is not None:
        name = requirements.relative_to(directory).as_posix()
        return Project(f"python -m pip install -r {name}", name, constraints, models)
    project = data.get("project", {}) if isinstance(data.get("project"), dict) else {}
    if any(_names_genharness(r) for r in project.get("dependencies", []) or []):
        return Project("python -m pip install -e .", "pyproject.toml [project] dependencies", constraints, models)
    for extra, requirements_ in sorted((project.get("optional-dependencies") or {}).items()):
        if any(_names_genharness(r) for r in requirements_ or []):
            return Project(f'python -m pip install -e ".[{extra}]"', f"pyproject.toml [project.optional-dependencies] "
                           f"{extra}", constraints, models)
    for group, requirements_ in sorted((data.get("dependency-groups") or {}).items()):
        if any(_names_genharness(r) for r in requirements_ or []):  # pip >= 25.1 installs a group
            return Project(f'python -m pip install --upgrade "pip>=25.1"\npython -m pip install --group {group}',
                           f"pyproject.toml [dependency-groups] {group}", constraints, models)
    return Project(f'python -m pip install "{fallback}"', "", constraints, models)


def install_script(project: Project) -> str:
    """The cell's install: torch from the CPU index, the project's own dev dependencies (genharness
    among them) as it declares them, then this cell's transformers and torch over whatever those pin;
    a constraints.txt applies without its transformers / tokenizers / huggingface_hub / hf-xet / torch pins."""
    constrain = f" -c {OTHER_CONSTRAINTS}" if project.constraints else ""
    lines = [f'python -m pip install "torch==$TORCH" --index-url {TORCH_INDEX}']
    if project.constraints:
        lines.append(f"grep -vE '^({UNPINNED})==' constraints.txt > {OTHER_CONSTRAINTS}")
    *before, last = project.install.splitlines()
    lines += [*before, last + constrain, f'python -m pip install "transformers==$TRANSFORMERS" "torch==$TORCH"{constrain}']
    return "\n".join(lines) + "\n"


def install_comment(project: Project) -> str:
    """The comment above the install step: where its genharness line came from, or that it is a stand-in."""
    if project.found:
        text = (f"genharness is installed as the project declares it ({project.found}, found by `harness init "
                "--ci`); then this cell's transformers and torch replace the versions it pins.")
    else:
        text = (f"`harness init --ci` found no requirements*.txt or pyproject.toml naming genharness: "
                f"REPLACE `{project.install}` below by your project's own dev requirements (e.g. "
                "`python -m pip install -r requirements-dev.txt`), so that CI runs the harness you pin.")
    text += (" Not installed with --require-hashes: each cell installs its matrix's transformers and torch, "
             "whose hashes are unknown when this is written; pip checks hashes where your requirements file "
             "carries them (--hash=, e.g. pip-compile --generate-hashes).")
    if project.constraints:
        text += (" constraints.txt is applied without its transformers / tokenizers / huggingface_hub / hf-xet / "
                 "torch pins (they would hold every cell at one version): the README's `grep -vE` line.")
    return text


def checkpoint_paths(project: Project) -> str:
    """Where `harness check` loads the project's checkpoints from, for the comment on providing them."""
    if project.models:
        return ", ".join(project.models) + " (pyproject.toml [tool.harness.models])"
    return "the paths pyproject.toml's [tool.harness.models] gives"


CELL_SCRIPT = """\
mkdir -p cell
baseline=()
if [ -n "${HARNESS_BASELINE:-}" ]; then baseline=(--baseline "$HARNESS_BASELINE"); fi
rc=0
harness check --dtype "$DTYPE" --reports-dir cell/reports "${baseline[@]}" || rc=$?
echo "$rc" > cell/check-exit-code
find cell/reports -mindepth 1 -maxdepth 1 -type d -printf '%f\\n' > cell/env-key 2>/dev/null || true
echo "harness check exited $rc (env $(cat cell/env-key)); the cell's last step fails the job on it"
"""

GATE_SCRIPT = """\
rc=$(cat cell/check-exit-code)
if [ "$rc" != "0" ]; then
  echo "harness check exited $rc: this cell fails (its report: the cell's artifact, reports/)"
fi
exit "$rc"
"""

CHAIN_SCRIPT = """\
mkdir -p chain
status=0
{
  echo "$MARKER"
  echo "# genharness: harness check per cell"
  echo
  echo "Each cell ran \\`harness check\\` strictly (CI=true) against the committed golden records: its env's own,"
  echo "else the nearest recorded env of the same device and dtype - a newer version's cell against an older"
  echo "version's records. That check is the cross-version comparison; the cells write no records."
  echo
  echo "| cell | env key | baseline | harness check exit |"
  echo "|---|---|---|---|"
} > chain/summary.md
reports=""
for item in $CELLS; do
  dir="cells/cell-$item"
  code=$(cat "$dir/check-exit-code" 2>/dev/null || echo "-")
  key=$(head -n 1 "$dir/env-key" 2>/dev/null || true)
  report=""
  if [ -n "$key" ]; then
    report=$(find "$dir/reports/$key" -mindepth 2 -maxdepth 2 -name summary.md 2>/dev/null | sort | tail -n 1 || true)
  fi
  baseline="-"
  if [ -n "$report" ]; then
    baseline=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["meta"].get("baseline_key") or "-")' \\
      "$(dirname "$report")/results.json" 2>/dev/null || echo "-")
    reports="$reports $item:$report"
  fi
  if [ "$code" != "0" ] || [ -z "$report" ]; then status=1; fi
  echo "| $item | ${key:-none, see the cell job log} | $baseline | $code |" >> chain/summary.md
done
for entry in $reports; do
  { echo; echo "---"; echo; echo "**cell ${entry%%:*}**"; echo; cat "${entry#*:}"; } >> chain/summary.md
done
echo "status=$status" >> "$GITHUB_OUTPUT"
"""

FAILED = "a cell's harness check failed, or a cell left no report: see summary.md"


def _block(text: str, indent: int) -> str:
    pad = " " * indent
    return "\n".join(pad + line if line else "" for line in text.splitlines())


def _comment(text: str, indent: int, width: int = 100) -> str:
    """`text` as YAML comment lines at `indent`, wrapped near `width`."""
    import textwrap

    pad = " " * indent + "# "
    return "\n".join(textwrap.wrap(text, width, initial_indent=pad, subsequent_indent=pad))
