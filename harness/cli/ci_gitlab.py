"""`harness init --ci gitlab`: the GitLab CI variant (.gitlab-ci.yml) of the GitHub workflow (harness/cli/ci.py).

The same two steps, run by the same shell scripts (harness/cli/ci_scripts.py):

- a `cell` job with `parallel: matrix:` - one job per (transformers, torch, dtype) - runs
  `harness check` into a fresh store and keeps the cell as its artifact under
  `cells/cell-<transformers>-<torch>-<dtype>/` (GitLab hands a later job every needed job's
  artifacts in one tree, so each cell has its own folder: the layout the GitHub chain job's
  download-artifact step makes);
- a `chain` job that `needs` every cell (and runs when one failed): `harness merge`, `harness compare`
  along the chain, summary.md as one merge-request note updated on every pipeline (found by its
  first line, `MARKER`; posted with a project access token in the CI/CD variable
  GENHARNESS_GITLAB_TOKEN - GitLab's job token cannot write notes), then the job fails on a
  regression or a cell that recorded nothing.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from harness.cli.ci_scripts import CELL_SCRIPT, CHAIN_SCRIPT, MARKER, PYTHON, TORCH_INDEX, _block, chain_order

PIPELINE = Path(".gitlab-ci.yml")
STATUS_FILE = "chain/status"  # where CHAIN_SCRIPT's `status=N` line goes (GitHub: $GITHUB_OUTPUT)

CELL_KEEP = 'mkdir -p cells && mv cell "cells/cell-${TRANSFORMERS}-${TORCH}-${DTYPE}"\n'

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
  echo "a link of the upgrade chain has a regression, or a cell recorded nothing: see summary.md"
  exit 1
fi
"""


def _list(values: Sequence[str]) -> str:
    return json.dumps(list(values))


def gitlab_pipeline(transformers: Sequence[str], torch: Sequence[str], dtypes: Sequence[str], requirement: str) -> str:
    """The .gitlab-ci.yml text."""
    install = (f'python -m pip install "torch==$TORCH" --index-url {TORCH_INDEX}\n'
               'python -m pip install "$HARNESS_REQUIREMENT" "transformers==$TRANSFORMERS" "torch==$TORCH"\n')
    chain_install = (f'python -m pip install "torch=={torch[0]}" --index-url {TORCH_INDEX}\n'
                     'python -m pip install "$HARNESS_REQUIREMENT"\n')
    return f"""\
# written by `harness init --ci gitlab` (genharness): one job per (transformers, torch, dtype) cell
# running `harness check`, then one job that merges the cells' records, renders the upgrade chain,
# posts summary.md as one merge-request note and fails on regressions.
workflow:
  rules:
    - if: $CI_PIPELINE_SOURCE == "merge_request_event"
    - if: $CI_PIPELINE_SOURCE == "web"

stages:
  - cells
  - chain

variables:
  HARNESS_REQUIREMENT: {json.dumps(requirement)}

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
    CI: ""  # not strict: a first run in the fresh store records what it checked
  script:
    - |
{_block(install, 6)}
    - |
{_block(CELL_SCRIPT, 6)}
    - |
{_block(CELL_KEEP, 6)}
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
    CHAIN: {json.dumps(" ".join(chain_order(transformers, torch, dtypes)))}
    MARKER: "{MARKER}"
    GITHUB_OUTPUT: {STATUS_FILE}  # the shared chain script writes its status line here
  script:
    - |
{_block(chain_install, 6)}
    - |
{_block(CHAIN_SCRIPT, 6)}
    - |
{_block(NOTE_SCRIPT, 6)}
    - |
{_block(FAIL_SCRIPT, 6)}
  artifacts:
    when: always
    name: upgrade-chain
    paths:
      - chain/
"""
