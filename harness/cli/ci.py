"""`harness init --ci github [--transformers V ...] [--torch V ...] [--dtype D ...]`: a GitHub
Actions workflow (.github/workflows/genharness.yml) that runs the check on CI runners and gates on it
(`--ci gitlab`: the same jobs and scripts as .gitlab-ci.yml, harness/cli/ci_gitlab.py).

- one `cell` job per (transformers, torch, dtype): installs genharness as the project declares it
  (its requirements file or pyproject.toml, found when the workflow is written; ci_scripts.py
  inspect_project), then that cell's transformers and torch; runs `harness check` with CI=true
  (strict: read-only, a field without a record fails) against the project's committed records -
  its env's own, else the nearest recorded env of the same device and dtype (`HARNESS_BASELINE`
  names one instead); uploads its reports, exit code and env key as the artifact `cell-<id>`
  (whatever the check did), and then fails when the check did;
- one `chain` job after them all: the cells' summary.md joined into one comment, posted (and
  updated on every push) as a single sticky pull-request comment, and the job fails when a cell
  failed or left no report. A pull request from a fork gets a read-only token: the comment is
  skipped with a notice (the summary stays in the `cells-summary` artifact), and a write the token
  is refused (HTTP 403) is a notice too - never what turns the job red.

Every action is pinned by its commit SHA, the tag it was in a comment beside it (`ACTIONS`: the
commit each major tag pointed to when it was written), so a moved or compromised tag changes nothing.

A commented step after the checkout says how the checkpoints can reach the runner. The scripts
read only files and environment variables (no `${{ }}` inside them), so tests/test_ci.py runs the
jobs step by step (tests/workflow_steps.py) on a real project.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from harness.cli import ci_gitlab
from harness.cli.ci_scripts import (
    CELL_SCRIPT,
    CHAIN_SCRIPT,
    FAILED,
    GATE_SCRIPT,
    MARKER,
    PYTHON,
    Project,
    _block,
    _comment,
    cell_ids,
    checkpoint_paths,
    inspect_project,
    install_comment,
    install_script,
)
from harness.cli.project import UsageError

WORKFLOW = Path(".github/workflows/genharness.yml")
# action -> (commit, the tag it was): what each major tag (checkout@v4 ...) pointed to when pinned
ACTIONS = {
    "actions/checkout": ("11d5960a326750d5838078e36cf38b85af677262", "v4.4.0"),
    "actions/setup-python": ("a26af69be951a213d495a4c3e4e4022e16d87065", "v5.6.0"),
    "actions/upload-artifact": ("ea165f8d65b6e75b540449e92b4886f43607fa02", "v4.6.2"),
    "actions/download-artifact": ("d3f86a106a0bac45b974a628896c90dbdf5c8093", "v4.3.0"),
    "actions/github-script": ("f28e40c7f34bde8b3046d885e986cb6290c5673b", "v7.1.0"),
    "actions/cache": ("0057852bfaa89a56745cba8c7296529d2fc39830", "v4.3.0"),
}
FORK_NOTICE = ("genharness: a pull request from a fork gets a read-only token, so the summary comment is skipped; "
               "summary.md is in this run's cells-summary artifact")


def uses(action: str) -> str:
    """`action@<commit>  # <tag>`: a step's `uses:` value, pinned."""
    commit, tag = ACTIONS[action]
    return f"{action}@{commit}  # {tag}"

INSTALL_STEP = "Install genharness and this cell's transformers and torch"
CHECK_STEP = "harness check against the committed records (strict)"


def cell_name(transformers: str, torch: str, dtype: str) -> str:
    return f"cell-{transformers}-{torch}-{dtype}"


STICKY_SCRIPT = """\
const fs = require('fs');
const marker = process.env.MARKER;
const body = fs.readFileSync('chain/summary.md', 'utf8').slice(0, 65000);
const { owner, repo } = context.repo;
const issue_number = context.issue.number;
try {
  const comments = await github.paginate(github.rest.issues.listComments, { owner, repo, issue_number });
  const mine = comments.find((c) => c.body && c.body.startsWith(marker));
  if (mine) {
    await github.rest.issues.updateComment({ owner, repo, comment_id: mine.id, body });
  } else {
    await github.rest.issues.createComment({ owner, repo, issue_number, body });
  }
} catch (error) {
  if (error.status !== 403) throw error;
  // a token that cannot write (a fork's pull request): the summary stays in the cells-summary artifact
  core.notice(`genharness: the token cannot write the summary comment (${error.message}); ` +
              'summary.md is in the cells-summary artifact');
}
"""


def _list(values: Sequence[str]) -> str:
    return json.dumps(list(values))


def checkpoint_step(project: Project) -> str:
    """The commented-out step after the checkout: how the checkpoints reach the runner."""
    return f"""\
      # - name: Provide the model checkpoint
      #   # `harness check` loads your checkpoints from {checkpoint_paths(project)};
      #   # without them the cell fails. Pick one:
      #   # - committed in the repository (a small checkpoint): nothing to do, leave this commented;
      #   # - Git LFS: `with: lfs: true` on the checkout above, or uncomment this step as it is;
      #   # - a cache: `uses: {uses("actions/cache")}` in place of `run:`, `with:` the checkpoint's directory
      #   #   as `path:` and a `key:` naming its version (a download step to fill it on a miss);
      #   # - a download to that path in place of `run:`, e.g.
      #   #   `run: huggingface-cli download ORG/NAME --local-dir path/to/your/model`.
      #   run: git lfs pull"""


def github_workflow(transformers: Sequence[str], torch: Sequence[str], dtypes: Sequence[str],
                    project: Project) -> str:
    """The workflow's YAML text."""
    return f"""\
# written by `harness init --ci github` (genharness): one job per (transformers, torch, dtype) cell runs
# `harness check` strictly (CI=true) against the committed golden records and fails when it does; then one
# job joins the cells' summary.md into one sticky pull-request comment and fails when a cell failed.
name: genharness

on:
  pull_request:
  workflow_dispatch:

permissions:
  contents: read

concurrency:
  group: genharness-${{{{ github.ref }}}}
  cancel-in-progress: true

defaults:
  run:
    shell: bash

env:
  # an env key every cell is checked against (`harness check --baseline`); "" = each cell's own env's
  # committed records, else the nearest recorded env of the same device and dtype (the older version's)
  HARNESS_BASELINE: ""

jobs:
  cell:
    name: "check: transformers ${{{{ matrix.transformers }}}}, torch ${{{{ matrix.torch }}}}, ${{{{ matrix.dtype }}}}"
    runs-on: ubuntu-latest
    timeout-minutes: 90
    strategy:
      fail-fast: false
      matrix:
        transformers: {_list(transformers)}
        torch: {_list(torch)}
        dtype: {_list(dtypes)}
    steps:
      - uses: {uses("actions/checkout")}
{checkpoint_step(project)}
      - uses: {uses("actions/setup-python")}
        with:
          python-version: "{PYTHON}"
{_comment(install_comment(project), 6)}
      - name: {INSTALL_STEP}
        env:
          TRANSFORMERS: ${{{{ matrix.transformers }}}}
          TORCH: ${{{{ matrix.torch }}}}
        run: |
{_block(install_script(project), 10)}
      - name: {CHECK_STEP}
        id: check
        env:
          CI: "true"  # strict: read-only, a field without a record fails, latency strict
          DTYPE: ${{{{ matrix.dtype }}}}
        run: |
{_block(CELL_SCRIPT, 10)}
      - uses: {uses("actions/upload-artifact")}
        if: always()
        with:
          name: cell-${{{{ matrix.transformers }}}}-${{{{ matrix.torch }}}}-${{{{ matrix.dtype }}}}
          path: cell/
          if-no-files-found: warn
      - name: Fail the cell when harness check failed
        run: |
{_block(GATE_SCRIPT, 10)}

  chain:
    needs: cell
    if: always()
    runs-on: ubuntu-latest
    permissions:
      contents: read
      pull-requests: write
    steps:
      - uses: {uses("actions/download-artifact")}
        with:
          pattern: cell-*
          path: cells
      - name: Join the cells' summary.md
        id: chain
        env:
          CELLS: {json.dumps(" ".join(cell_ids(transformers, torch, dtypes)))}
          MARKER: "{MARKER}"
        run: |
{_block(CHAIN_SCRIPT, 10)}
      - uses: {uses("actions/upload-artifact")}
        if: always()
        with:
          name: cells-summary
          path: chain/
      - name: Post summary.md as one sticky comment
        if: github.event_name == 'pull_request' && github.event.pull_request.head.repo.full_name == github.repository
        uses: {uses("actions/github-script")}
        env:
          MARKER: "{MARKER}"
        with:
          script: |
{_block(STICKY_SCRIPT, 12)}
      - name: Skip the comment on a fork's pull request
        if: github.event_name == 'pull_request' && github.event.pull_request.head.repo.full_name != github.repository
        run: |
          echo "::notice title=genharness::{FORK_NOTICE}"
      - name: Fail when a cell failed
        if: steps.chain.outputs.status != '0'
        run: |
          echo "{FAILED}"
          exit 1
"""


def write_workflow(directory: Path, kind: str, transformers: Sequence[str], torch: Sequence[str],
                   dtypes: Sequence[str], fallback: str) -> Path:
    """Write the workflow file (refusing to overwrite one that exists): GitHub Actions, or the GitLab
    CI variant (harness/cli/ci_gitlab.py). How it installs genharness is read from the project in
    `directory` (ci_scripts.inspect_project); `fallback`, a pinned requirement, where it says nothing."""
    writers = {"github": (WORKFLOW, github_workflow), "gitlab": (ci_gitlab.PIPELINE, ci_gitlab.gitlab_pipeline)}
    if kind not in writers:
        raise UsageError(f"--ci {kind}: one of {', '.join(writers)}")
    if not transformers or not torch or not dtypes:
        raise UsageError("--ci needs at least one --transformers, --torch and --dtype value")
    relative, text = writers[kind]
    path = directory / relative
    if path.exists():
        raise UsageError(f"{path} exists; delete it to write it again")
    project = inspect_project(directory, fallback)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text(transformers, torch, dtypes, project), encoding="utf-8")
    return path


def defaults() -> tuple[list[str], list[str], str]:
    """The installed transformers and torch versions, and this harness's own pinned requirement (the
    install line's stand-in when the project declares no genharness dependency)."""
    from importlib.metadata import version

    torch = version("torch").split("+")[0]
    return [version("transformers")], [torch], f"genharness=={version('genharness')}"


def add_arguments(p) -> None:
    p.add_argument("--ci", choices=("github", "gitlab"), help="write a CI workflow instead: one job per (transformers, "
                   "torch, dtype) cell running a strict `harness check` against the committed records, failing "
                   "when it fails, and a job joining their summaries (github: .github/workflows/genharness.yml; "
                   "gitlab: .gitlab-ci.yml)")
    p.add_argument("--transformers", nargs="+", metavar="V", help="--ci: the transformers versions, oldest first "
                                                                   "(default: the installed one)")
    p.add_argument("--torch", nargs="+", metavar="V", help="--ci: the torch versions (default: the installed one)")
    p.add_argument("--dtype", nargs="+", metavar="D", default=["fp32"], help="--ci: the dtypes (default fp32)")


def cmd_ci(args) -> int:
    transformers, torch, requirement = defaults()
    cwd = Path.cwd()
    path = write_workflow(cwd, args.ci, args.transformers or transformers, args.torch or torch, args.dtype, requirement)
    project = inspect_project(cwd, requirement)
    cells = len(args.transformers or transformers) * len(args.torch or torch) * len(args.dtype)
    print(f"harness: wrote {path.relative_to(cwd)}: {cells} cell(s), each `harness check` strict (CI=true) against "
          "the committed records, then a job joining their summaries")
    print("harness: genharness installed by " + (f"`{project.install.splitlines()[-1]}` ({project.found})"
          if project.found else f"`{project.install}` - no requirements file or pyproject.toml names genharness: "
          "replace it by your project's own dev requirements"))
    print("harness: installs are not hash-checked (--require-hashes): each cell's transformers and torch are its "
          "matrix's versions, whose hashes are unknown now; pip checks them where your requirements carry --hash=")
    print("harness: commit your golden records and the workflow; provide the checkpoints on the runner (the "
          "commented step after the checkout)")
    return 0
