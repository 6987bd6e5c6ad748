"""What both CI variants (harness/cli/ci.py: GitHub Actions, harness/cli/ci_gitlab.py: GitLab CI) run, in
one place so they cannot drift: the cell job's and the chain job's shell scripts, the sticky
comment's marker, the Python and the torch index, the chain's order.

CHAIN_SCRIPT reads only files and environment variables (no CI templating inside it) and writes
its `status=N` line to $GITHUB_OUTPUT (GitLab: a file the job names so), so tests/test_ci.py runs it
as written on two real cells' records.
"""

from __future__ import annotations

from collections.abc import Sequence

MARKER = "<!-- genharness-summary -->"  # the sticky comment's first line: found and updated on every run
PYTHON = "3.11"
TORCH_INDEX = "https://download.pytorch.org/whl/cpu"


def chain_order(transformers: Sequence[str], torch: Sequence[str], dtypes: Sequence[str]) -> list[str]:
    """'<torch>-<dtype>:<transformers>' for every cell, grouped by (torch, dtype), transformers in
    the order given: consecutive items of one group are an upgrade link."""
    return [f"{t}-{d}:{v}" for t in torch for d in dtypes for v in transformers]


CELL_SCRIPT = """\
mkdir -p cell/records
set +e
harness check --dtype "$DTYPE" --golden-dir cell/records --reports-dir cell/reports
echo "$?" > cell/check-exit-code
set -e
find cell/records -mindepth 1 -maxdepth 1 -type d -printf '%f\\n' > cell/env-key
"""

CHAIN_SCRIPT = """\
mkdir -p ci-store chain
harness merge --golden-dir ci-store cells/cell-*/records
status=0
{
  echo "$MARKER"
  echo "# genharness: the upgrade chain"
  echo
  echo "| cell | env key | harness check exit |"
  echo "|---|---|---|"
} > chain/summary.md
for item in $CHAIN; do
  dir="cells/cell-${item#*:}-${item%%:*}"
  key=$(cat "$dir/env-key" 2>/dev/null || true)
  echo "| ${item#*:} ${item%%:*} | ${key:-none, see the cell job log} | $(cat "$dir/check-exit-code" 2>/dev/null || echo '-') |" >> chain/summary.md
  [ -n "$key" ] || status=1
done
previous_group=""
previous_key=""
for item in $CHAIN; do
  group=${item%%:*}
  key=$(cat "cells/cell-${item#*:}-${group}/env-key" 2>/dev/null || true)
  [ -n "$key" ] || continue  # a cell that recorded nothing: the link goes around it
  if [ -n "$previous_key" ] && [ "$group" = "$previous_group" ]; then
    out="chain/${previous_key}-to-${key}"
    rc=0
    harness compare --golden-dir ci-store "$previous_key" "$key" --out "$out" || rc=$?
    if [ "$rc" -ne 0 ]; then status=1; fi
    { echo; echo "## ${previous_key} -> ${key} (exit ${rc})"; echo; cat "$out/summary.md"; } >> chain/summary.md
  fi
  previous_group=$group
  previous_key=$key
done
echo "status=$status" >> "$GITHUB_OUTPUT"
"""


def _block(text: str, indent: int) -> str:
    pad = " " * indent
    return "\n".join(pad + line if line else "" for line in text.splitlines())
