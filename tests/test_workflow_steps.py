"""tests/workflow_steps.py, the step runner the CI tests run the generated workflow with, on a small
hand-written workflow: env levels and matrix substitution, step outputs, `if:` (default success,
always(), failure(), an output compared, the event), a failing step failing the job, pipefail,
artifacts uploaded by two matrix cells and downloaded by a pattern, the github-script stub, stubbed
steps, and the loud refusal of what it cannot resolve. Seconds; no harness run."""

from pathlib import Path

import pytest

from workflow_steps import WorkflowError, evaluate, run_job

WORKFLOW = """\
name: t
on: push
defaults:
  run:
    shell: bash
env:
  GREETING: hello
jobs:
  make:
    strategy:
      matrix:
        v: ["1", "2"]
    env:
      JOB_VAR: job-${{ env.GREETING }}
    steps:
      - uses: actions/checkout@v4
      - name: write
        id: w
        env:
          V: ${{ matrix.v }}
        run: |
          mkdir -p out
          echo "$GREETING $JOB_VAR $V $CI" > out/file.txt
          echo "answer=4${{ matrix.v }}" >> "$GITHUB_OUTPUT"
          printf 'text<<EOF\\nline one\\nline two\\nEOF\\n' >> "$GITHUB_OUTPUT"
      - name: use the output
        if: steps.w.outputs.answer != '0'
        run: echo "got ${{ steps.w.outputs.answer }}" > out/got.txt
      - name: never, the output is not 0
        if: steps.w.outputs.answer == '0'
        run: touch out/never
      - uses: actions/upload-artifact@v4
        with:
          name: out-${{ matrix.v }}
          path: out/
      - name: fails when the matrix says so
        id: fail
        run: |
          [ "${{ matrix.v }}" != "2" ]
          echo after
      - name: skipped once a step failed
        run: touch skipped-ran
      - name: runs on failure
        if: failure()
        run: touch failure-ran
      - name: always runs
        if: always()
        run: echo always
  join:
    steps:
      - uses: actions/download-artifact@v4
        with:
          pattern: out-*
          path: got
      - name: read
        id: r
        run: |
          echo "one=$(cat got/out-1/file.txt)" >> "$GITHUB_OUTPUT"
          echo "two=$(cat got/out-2/got.txt)" >> "$GITHUB_OUTPUT"
      - name: pipefail
        run: false | true
      - name: post
        if: always() && github.event_name == 'pull_request'
        uses: actions/github-script@v7
        env:
          MARKER: m
        with:
          script: console.log(process.env.MARKER)
"""


@pytest.fixture
def workflow(tmp_path: Path) -> Path:
    path = tmp_path / "wf.yml"
    path.write_text(WORKFLOW)
    return path


def test_steps_outputs_if_failure_and_artifacts(workflow: Path, tmp_path: Path):
    artifacts, env = tmp_path / "artifacts", {"PATH": "/usr/bin:/bin"}
    cells = {}
    for v in ("1", "2"):
        cwd = tmp_path / f"cell{v}"
        cwd.mkdir()
        cells[v] = run_job(workflow, "make", cwd=cwd, env=env, matrix={"v": v}, artifacts_dir=artifacts)
    one, two = cells["1"], cells["2"]
    assert one.conclusion == "success" and two.conclusion == "failure"
    assert one.step("w").outputs == {"answer": "41", "text": "line one\nline two"}
    assert (tmp_path / "cell1" / "out" / "file.txt").read_text() == "hello job-hello 1 true\n"
    assert not one.step("never, the output is not 0").ran
    assert two.step("fail").rc == 1 and "after" not in two.step("fail").log  # bash -e stops at the failure
    assert not two.step("skipped once a step failed").ran and not (tmp_path / "cell2" / "skipped-ran").exists()
    assert two.step("runs on failure").rc == 0 and (tmp_path / "cell2" / "failure-ran").exists()
    assert not (tmp_path / "cell1" / "failure-ran").exists() and one.step("always runs").rc == 0
    assert two.step("always runs").rc == 0
    assert sorted(p.name for p in artifacts.iterdir()) == ["out-1", "out-2"]  # each cell's out/ contents

    join = tmp_path / "join"
    join.mkdir()
    pushed = run_job(workflow, "join", cwd=join, env=env, artifacts_dir=artifacts)
    assert pushed.step("r").outputs == {"one": "hello job-hello 1 true", "two": "got 42"}
    assert pushed.step("pipefail").rc == 1 and pushed.conclusion == "failure"  # shell: bash sets -o pipefail
    assert not pushed.step("post").ran
    pr = run_job(workflow, "join", cwd=tmp_path / "join", env=env, artifacts_dir=artifacts, event="pull_request")
    posted = pr.step("post")
    assert posted.ran and posted.would_run["script"] == "console.log(process.env.MARKER)"
    assert posted.would_run["env"]["MARKER"] == "m"


def test_an_artifact_name_uploaded_twice_fails(workflow: Path, tmp_path: Path):
    for attempt in (1, 2):
        cwd = tmp_path / f"run{attempt}"
        cwd.mkdir()
        done = run_job(workflow, "make", cwd=cwd, env={"PATH": "/usr/bin:/bin"}, matrix={"v": "1"},
                       artifacts_dir=tmp_path / "artifacts")
    assert done.step("actions/upload-artifact").rc == 1 and done.conclusion == "failure"


def test_stubbed_steps(workflow: Path, tmp_path: Path):
    done = run_job(workflow, "make", cwd=tmp_path, env={"PATH": "/usr/bin:/bin"}, matrix={"v": "2"},
                   artifacts_dir=tmp_path / "a", stub_steps={"fail": "", "write": "mkdir -p out; echo x > out/x"})
    assert done.conclusion == "success" and done.step("fail").stubbed and done.step("write").stubbed
    assert (tmp_path / "out" / "x").read_text() == "x\n"
    with pytest.raises(WorkflowError, match="names no step"):
        run_job(workflow, "make", cwd=tmp_path, env={}, matrix={"v": "2"}, artifacts_dir=tmp_path / "a",
                stub_steps={"instal": ""})


def test_what_it_cannot_resolve_is_refused(workflow: Path, tmp_path: Path):
    with pytest.raises(WorkflowError, match="matrix"):
        run_job(workflow, "make", cwd=tmp_path, env={}, artifacts_dir=tmp_path / "a")  # no matrix given
    with pytest.raises(WorkflowError, match="not one of"):
        run_job(workflow, "make", cwd=tmp_path, env={}, matrix={"v": "3"}, artifacts_dir=tmp_path / "a")
    secret = tmp_path / "secret.yml"
    secret.write_text(WORKFLOW.replace("${{ matrix.v }}\n        run: |\n          mkdir",
                                       "${{ secrets.TOKEN }}\n        run: |\n          mkdir"))
    with pytest.raises(WorkflowError, match="secrets"):
        run_job(secret, "make", cwd=tmp_path, env={}, matrix={"v": "1"}, artifacts_dir=tmp_path / "a")
    typo = tmp_path / "typo.yml"
    typo.write_text(WORKFLOW.replace("if: steps.w.outputs.answer != '0'", "if: steps.ww.outputs.answer != '0'"))
    with pytest.raises(WorkflowError, match="steps.ww"):
        run_job(typo, "make", cwd=tmp_path, env={"PATH": "/usr/bin:/bin"}, matrix={"v": "1"},
                artifacts_dir=tmp_path / "b")


def test_expressions_compare_as_actions_does():
    context = {"steps": {"s": {"outputs": {"status": "0", "name": "Ok"}}}, "github": {"event_name": "push"}}
    assert evaluate("steps.s.outputs.status != '0'", context) is False
    assert evaluate("steps.s.outputs.name == 'ok'", context) is True  # strings: case-insensitive
    assert evaluate("steps.s.outputs.missing != '0'", context) is False  # null and '0' are both 0
    assert evaluate("!(github.event_name == 'pull_request') && steps.s.outputs.status == 0", context) is True
