"""`harness init --ci gitlab`: the GitLab CI variant (.gitlab-ci.yml) of the GitHub workflow (harness/cli/ci.py).

The same two steps, run by the same shell scripts (harness/cli/ci_scripts.py):

- a `cell` job with `parallel: matrix:` - one job per (transformers, torch, dtype) - installs
  genharness as the project declares it and the cell's versions, runs `harness check` with CI=true
  against the project's committed records, keeps the cell as its artifact under
  `cells/cell-<transformers>-<torch>-<dtype>/` (GitLab hands a later job every needed job's
  artifacts in one tree, so each cell has its own folder: the layout the GitHub chain job's
  download-artifact step makes; `artifacts: when: always`), and fails on the check's exit code;
- a `chain` job that `needs` every cell (and runs when one failed): the cells' summary.md joined
  into one merge-request note updated on every pipeline (found by its first line, `MARKER`; posted
  with a project access token in the CI/CD variable GENHARNESS_GITLAB_TOKEN - GitLab's job token
  cannot write notes), then the job fails when a cell failed or left no report.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

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
    install_comment,
    install_script,
)

PIPELINE = Path(".gitlab-ci.yml")
STATUS_FILE = "chain/status"  # where CHAIN_SCRIPT's `status=N` line goes (GitHub: $GITHUB_OUTPUT)

CELL_KEEP = 'mkdir -p cells && cp -r cell "cells/cell-${TRANSFORMERS}-${TORCH}-${DTYPE}"\n'

NOTE_SCRIPT = """\
python - <<'EOF'
import json, os, urllib.request
token, iid = os.environ.get("GENHARNESS_GITLAB_TOKEN"), os.environ.get("CI_MERGE_REQUEST_IID")
if not token or not iid:
    print("no merge request or no GENHARNESS_GITLAB_TOKEN: summary.md is in the chain artifact, no note posted")
    raise SystemExit(0)
api = f"{os.environ['CI_API_V4_URL']}/projects/{os.environ['CI_PROJECT_ID']}/merge_requests/{iid}/notes"
def call(method, url, data=None):
    body = json.dumps(data).encode() if data is not None else None
    request = urllib.request.Request(url, body, {"PRIVATE-TOKEN": token, "Content-Type": "application/json"},
                                     method=method)
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.load(response)
notes, page = [], 1
while batch := call("GET", f"{api}?per_page=100&page={page}"):
    notes, page = notes + batch, page + 1
body = open("chain/summary.md", encoding="utf-8").read()[:1000000]
mine = next((n for n in notes if n["body"].startswith(os.environ["MARKER"])), None)
if mine:
    call("PUT", f"{api}/{mine['id']}", {"body": body})
else:
    call("POST", api, {"body": body})
EOF
"""

FAIL_SCRIPT = f"""\
if [ "$(cat {STATUS_FILE})" != "status=0" ]; then
  echo "{FAILED}"
  exit 1
fi
"""


def _list(values: Sequence[str]) -> str:
    return json.dumps(list(values))


def gitlab_pipeline(transformers: Sequence[str], torch: Sequence[str], dtypes: Sequence[str], project: Project) -> str:
    """The .gitlab-ci.yml text."""
    return f"""\
# written by `harness init --ci gitlab` (genharness): one job per (transformers, torch, dtype) cell runs
# `harness check` strictly (CI=true) against the committed golden records and fails when it does; then one
# job joins the cells' summary.md into one merge-request note and fails when a cell failed.
workflow:
  rules:
    - if: $CI_PIPELINE_SOURCE == "merge_request_event"
    - if: $CI_PIPELINE_SOURCE == "web"

stages:
  - cells
  - chain

variables:
  # an env key every cell is checked against (`harness check --baseline`); "" = each cell's own env's
  # committed records, else the nearest recorded env of the same device and dtype (the older version's)
  HARNESS_BASELINE: ""

cell:
  stage: cells
  image: python:{PYTHON}
  timeout: 90 minutes
  parallel:
    matrix:
      - TRANSFORMERS: {_list(transformers)}
        TORCH: {_list(torch)}
        DTYPE: {_list(dtypes)}
  variables:
    CI: "true"  # strict: read-only, a field without a record fails, latency strict
  # The model checkpoint: `harness check` loads it from {checkpoint_paths(project)};
  # without it the cell fails. Committed in the repository: nothing to do; Git LFS: the
  # runner fetches LFS objects when git-lfs is installed; a cache: `cache: {{key: <its version>, paths:
  # [<its directory>]}}`; a download to that path: uncomment and adapt
  # before_script:
  #   - huggingface-cli download ORG/NAME --local-dir path/to/your/model
  script:
{_comment(install_comment(project), 4)}
    - |
{_block(install_script(project), 6)}
    - |
{_block(CELL_SCRIPT, 6)}
    - |
{_block(CELL_KEEP, 6)}
    - |
{_block(GATE_SCRIPT, 6)}
  artifacts:
    when: always
    name: "cell-$TRANSFORMERS-$TORCH-$DTYPE"
    paths:
      - cells/

chain:
  stage: chain
  image: python:{PYTHON}
  needs:
    - job: cell
      artifacts: true
  when: always
  variables:
    CELLS: {json.dumps(" ".join(cell_ids(transformers, torch, dtypes)))}
    MARKER: "{MARKER}"
    GITHUB_OUTPUT: {STATUS_FILE}  # the shared chain script writes its status line here
  script:
    - |
{_block(CHAIN_SCRIPT, 6)}
    - |
{_block(NOTE_SCRIPT, 6)}
    - |
{_block(FAIL_SCRIPT, 6)}
  artifacts:
    when: always
    name: cells-summary
    paths:
      - chain/
"""
