"""`harness init --ci github [--transformers V ...] [--torch V ...] [--dtype D ...]`: a GitHub
Actions workflow (.github/workflows/genharness.yml) that scales the check out over CI runners
(`--ci gitlab`: the same jobs and scripts as .gitlab-ci.yml, harness/cli/ci_gitlab.py).

- one `cell` job per (transformers, torch, dtype): installs those versions, runs `harness check` into
  a fresh record store (a first run: the in-run references still judge every case, and a faulty
  case is never recorded), and uploads the cell - its record set, its reports and the check's exit
  code - as the artifact `cell-<transformers>-<torch>-<dtype>`;
- one `chain` job after them all: `harness merge` of every cell's records into one store,
  `harness compare` for each upgrade link (consecutive transformers versions of one torch and
  dtype, in the order given), the links' summary.md joined into one comment posted (and updated
  on every push) as a single sticky pull-request comment, and the job fails when a link has a
  regression or a cell recorded nothing.

The chain job's script reads only files and environment variables (no `${{ }}` inside it), so
tests/test_ci.py runs it as written on two real cells' records.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from harness.cli import ci_gitlab
from harness.cli.ci_scripts import CELL_SCRIPT, CHAIN_SCRIPT, MARKER, PYTHON, TORCH_INDEX, _block, chain_order
from harness.cli.project import UsageError

WORKFLOW = Path(".github/workflows/genharness.yml")


def cell_name(transformers: str, torch: str, dtype: str) -> str:
    return f"cell-{transformers}-{torch}-{dtype}"


STICKY_SCRIPT = """\
const fs = require('fs');
const marker = process.env.MARKER;
const body = fs.readFileSync('chain/summary.md', 'utf8').slice(0, 65000);
const { owner, repo } = context.repo;
const issue_number = context.issue.number;
const comments = await github.paginate(github.rest.issues.listComments, { owner, repo, issue_number });
const mine = comments.find((c) => c.body && c.body.startsWith(marker));
if (mine) {
  await github.rest.issues.updateComment({ owner, repo, comment_id: mine.id, body });
} else {
  await github.rest.issues.createComment({ owner, repo, issue_number, body });
}
"""


def _list(values: Sequence[str]) -> str:
    return json.dumps(list(values))


def github_workflow(transformers: Sequence[str], torch: Sequence[str], dtypes: Sequence[str],
                    requirement: str) -> str:
    """The workflow's YAML text."""
    install = (f'python -m pip install "torch==$TORCH" --index-url {TORCH_INDEX}\n'
               'python -m pip install "$HARNESS_REQUIREMENT" "transformers==$TRANSFORMERS" "torch==$TORCH"\n')
    chain_torch = (f'python -m pip install "torch=={torch[0]}" --index-url {TORCH_INDEX}\n'
                   'python -m pip install "$HARNESS_REQUIREMENT"\n')
    return f"""\
# written by `harness init --ci github` (genharness): one job per (transformers, torch, dtype) cell
# running `harness check`, then one job that merges the cells' records, renders the upgrade chain,
# posts summary.md as one sticky pull-request comment and fails on regressions.
name: genharness

on:
  pull_request:
  workflow_dispatch:

permissions:
  contents: read

concurrency:
  group: genharness-${{{{ github.ref }}}}
  cancel-in-progress: true

env:
  HARNESS_REQUIREMENT: {json.dumps(requirement)}

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
      - uses: actions/checkout@v4
      - uses: actions/setup-python@v5
        with:
          python-version: "{PYTHON}"
      - name: Install this cell's versions
        env:
          TRANSFORMERS: ${{{{ matrix.transformers }}}}
          TORCH: ${{{{ matrix.torch }}}}
        run: |
{_block(install, 10)}
      - name: harness check (this cell's records into a fresh store)
        env:
          CI: ""  # not strict: a first run in the fresh store records what it checked
          DTYPE: ${{{{ matrix.dtype }}}}
        run: |
{_block(CELL_SCRIPT, 10)}
      - uses: actions/upload-artifact@v4
        if: always()
        with:
          name: cell-${{{{ matrix.transformers }}}}-${{{{ matrix.torch }}}}-${{{{ matrix.dtype }}}}
          path: cell/
          if-no-files-found: error

  chain:
    needs: cell
    if: always()
    runs-on: ubuntu-latest
    permissions:
      contents: read
      pull-requests: write
    steps:
      - uses: actions/checkout@v4
      - uses: actions/setup-python@v5
        with:
          python-version: "{PYTHON}"
      - name: Install genharness
        run: |
{_block(chain_torch, 10)}
      - uses: actions/download-artifact@v4
        with:
          pattern: cell-*
          path: cells
      - name: harness merge, then harness compare along the upgrade chain
        id: chain
        env:
          CHAIN: {json.dumps(" ".join(chain_order(transformers, torch, dtypes)))}
          MARKER: "{MARKER}"
        run: |
{_block(CHAIN_SCRIPT, 10)}
      - uses: actions/upload-artifact@v4
        if: always()
        with:
          name: upgrade-chain
          path: chain/
      - name: Post summary.md as one sticky comment
        if: github.event_name == 'pull_request'
        uses: actions/github-script@v7
        env:
          MARKER: "{MARKER}"
        with:
          script: |
{_block(STICKY_SCRIPT, 12)}
      - name: Fail on regressions
        if: steps.chain.outputs.status != '0'
        run: |
          echo "a link of the upgrade chain has a regression, or a cell recorded nothing: see summary.md"
          exit 1
"""


def write_workflow(directory: Path, kind: str, transformers: Sequence[str], torch: Sequence[str],
                   dtypes: Sequence[str], requirement: str) -> Path:
    """Write the workflow file (refusing to overwrite one that exists): GitHub Actions, or the GitLab
    CI variant (harness/cli/ci_gitlab.py)."""
    writers = {"github": (WORKFLOW, github_workflow), "gitlab": (ci_gitlab.PIPELINE, ci_gitlab.gitlab_pipeline)}
    if kind not in writers:
        raise UsageError(f"--ci {kind}: one of {', '.join(writers)}")
    if not transformers or not torch or not dtypes:
        raise UsageError("--ci needs at least one --transformers, --torch and --dtype value")
    relative, text = writers[kind]
    path = directory / relative
    if path.exists():
        raise UsageError(f"{path} exists; delete it to write it again")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text(transformers, torch, dtypes, requirement), encoding="utf-8")
    return path


def defaults() -> tuple[list[str], list[str], str]:
    """The installed transformers and torch versions, and this harness's own requirement."""
    from importlib.metadata import version

    torch = version("torch").split("+")[0]
    return [version("transformers")], [torch], f"genharness=={version('genharness')}"


def add_arguments(p) -> None:
    p.add_argument("--ci", choices=("github", "gitlab"), help="write a CI workflow instead: one job per (transformers, "
                   "torch, dtype) cell and an upgrade-chain job (github: .github/workflows/genharness.yml; gitlab: "
                   ".gitlab-ci.yml)")
    p.add_argument("--transformers", nargs="+", metavar="V", help="--ci: the transformers versions, oldest first "
                                                                   "(default: the installed one)")
    p.add_argument("--torch", nargs="+", metavar="V", help="--ci: the torch versions (default: the installed one)")
    p.add_argument("--dtype", nargs="+", metavar="D", default=["fp32"], help="--ci: the dtypes (default fp32)")


def cmd_ci(args) -> int:
    transformers, torch, requirement = defaults()
    path = write_workflow(Path.cwd(), args.ci, args.transformers or transformers, args.torch or torch,
                          args.dtype, requirement)
    print(f"harness: wrote {path.relative_to(Path.cwd())}: {len(args.transformers or transformers)} transformers x "
          f"{len(args.torch or torch)} torch x {len(args.dtype)} dtype cells, then the upgrade chain")
    return 0
