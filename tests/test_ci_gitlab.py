"""`harness init --ci gitlab` (harness/cli/ci_gitlab.py): the .gitlab-ci.yml mirrors the GitHub workflow -
one parallel:matrix cell job per (transformers, torch, dtype) running the same install, strict check
and gate scripts, one chain job after them running the same chain script (tests/test_ci.py runs the
GitHub jobs with them) - and its own parts run as written: a cell keeps its artifact in its own
folder and fails on the check's exit code, the merge-request note is created once and then updated
(against a local stand-in for GitLab's notes API), and the chain job fails on the chain's status."""

import json
import os
import shutil
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import yaml

from harness.cli import ci, ci_gitlab, main

VERSIONS = ["5.14.0", "5.24.0"]


def pipeline(tmp_path: Path) -> dict:
    path = ci.write_workflow(tmp_path, "gitlab", VERSIONS, ["2.13.0"], ["fp32"], "genharness==0.1.0")
    assert path == tmp_path / ".gitlab-ci.yml"
    return yaml.safe_load(path.read_text())


def github(tmp_path: Path) -> dict:
    return yaml.safe_load(ci.write_workflow(tmp_path, "github", VERSIONS, ["2.13.0"], ["fp32"],
                                            "genharness==0.1.0").read_text())


def runs(job: dict) -> list[str]:
    return [s["run"] for s in job["steps"] if "run" in s]


def sh(script: str, cwd: Path, **env) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-e", "-c", script], cwd=cwd, env={**os.environ, **env}, capture_output=True,
                          text=True, timeout=60)


def test_the_jobs_and_commands_mirror_the_github_workflow(tmp_path):
    lab, hub = pipeline(tmp_path / "lab"), github(tmp_path / "hub")
    assert lab["stages"] == ["cells", "chain"] and lab["variables"] == hub["env"] == {"HARNESS_BASELINE": ""}
    cell, chain = lab["cell"], lab["chain"]
    assert cell["parallel"]["matrix"] == [{"TRANSFORMERS": VERSIONS, "TORCH": ["2.13.0"], "DTYPE": ["fp32"]}]
    assert hub["jobs"]["cell"]["strategy"]["matrix"] == {"transformers": VERSIONS, "torch": ["2.13.0"],
                                                         "dtype": ["fp32"]}
    hub_cell = runs(hub["jobs"]["cell"])  # install, check, gate
    assert cell["script"][:2] == hub_cell[:2] and cell["script"][3] == hub_cell[2]
    assert cell["variables"]["CI"] == "true" == next(s for s in hub["jobs"]["cell"]["steps"]
                                                     if s.get("name") == ci.CHECK_STEP)["env"]["CI"]
    assert cell["artifacts"] == {"when": "always", "name": "cell-$TRANSFORMERS-$TORCH-$DTYPE", "paths": ["cells/"]}
    assert chain["needs"] == [{"job": "cell", "artifacts": True}] and chain["when"] == "always"
    hub_chain = runs(hub["jobs"]["chain"])
    assert chain["script"][0] == hub_chain[0]  # the same chain script
    hub_env = next(s for s in hub["jobs"]["chain"]["steps"] if s.get("id") == "chain")["env"]
    assert {k: chain["variables"][k] for k in hub_env} == hub_env
    assert chain["artifacts"]["paths"] == ["chain/"]


def fake_harness(directory: Path, rc: int) -> dict[str, str]:
    """A `harness` that writes a report under --reports-dir as `harness check` does and exits `rc`."""
    directory.mkdir()
    (directory / "harness").write_text(f"""#!/bin/bash
mkdir -p cell/reports/tf$TRANSFORMERS/20260101-000000
echo "# tf$TRANSFORMERS" > cell/reports/tf$TRANSFORMERS/20260101-000000/summary.md
exit {rc}
""")
    (directory / "harness").chmod(0o755)
    return {"PATH": f"{directory}{os.pathsep}{os.environ['PATH']}"}


def test_each_cell_keeps_its_artifact_and_fails_on_the_check(tmp_path):
    cell = pipeline(tmp_path)["cell"]
    for version, rc in zip(VERSIONS, (0, 1), strict=True):
        env = {**fake_harness(tmp_path / f"bin-{version}", rc), "TRANSFORMERS": version, "TORCH": "2.13.0",
               "DTYPE": "fp32", "HARNESS_BASELINE": "", "CI": "true"}
        shutil.rmtree(tmp_path / "cell", ignore_errors=True)
        done = sh("\n".join(cell["script"][1:]), tmp_path, **env)  # check, keep, gate: one job's script
        assert done.returncode == rc, done.stdout + done.stderr
    chain = pipeline(tmp_path / "again")["chain"]["variables"]["CELLS"].split()
    for item, version, rc in zip(chain, VERSIONS, (0, 1), strict=True):  # the chain script's own path: cells/cell-$item
        kept = tmp_path / "cells" / f"cell-{item}"
        assert (kept / "env-key").read_text() == f"tf{version}\n" and (kept / "check-exit-code").read_text() == f"{rc}\n"


def test_the_chain_job_fails_on_the_chain_scripts_status(tmp_path):
    fail = pipeline(tmp_path)["chain"]["script"][2]
    (tmp_path / "chain").mkdir()
    for status, code in (("status=0", 0), ("status=1", 1)):
        (tmp_path / ci_gitlab.STATUS_FILE).write_text(status + "\n")
        assert sh(fail, tmp_path).returncode == code


class Notes(BaseHTTPRequestHandler):
    """GitLab's merge-request notes API, as far as the note script uses it."""

    notes: list[dict] = []
    calls: list[tuple[str, str]] = []

    def reply(self, data) -> None:
        body = json.dumps(data).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        self.calls.append(("GET", self.path))
        page = parse_qs(urlsplit(self.path).query)["page"]
        self.reply(self.notes if page == ["1"] else [])

    def do_POST(self):
        self.calls.append(("POST", self.path))
        note = {"id": len(self.notes) + 7, **json.loads(self.rfile.read(int(self.headers["Content-Length"])))}
        self.notes.append(note)
        self.reply(note)

    def do_PUT(self):
        self.calls.append(("PUT", self.path))
        data = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        note = next(n for n in self.notes if self.path.startswith(f"/api/v4/projects/3/merge_requests/5/notes/{n['id']}"))
        note.update(data)
        self.reply(note)

    def log_message(self, *args):
        pass


def test_the_note_is_posted_once_then_updated(tmp_path):
    note = pipeline(tmp_path)["chain"]["script"][1]
    (tmp_path / "chain").mkdir()
    server = HTTPServer(("127.0.0.1", 0), Notes)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    Notes.notes[:] = [{"id": 1, "body": "someone else's note"}]
    env = {"CI_API_V4_URL": f"http://127.0.0.1:{server.server_port}/api/v4", "CI_PROJECT_ID": "3",
           "CI_MERGE_REQUEST_IID": "5", "GENHARNESS_GITLAB_TOKEN": "t", "MARKER": ci.MARKER}
    try:
        for text in ("first pipeline", "second pipeline"):
            (tmp_path / "chain" / "summary.md").write_text(f"{ci.MARKER}\n{text}\n")
            done = sh(note, tmp_path, **env)
            assert done.returncode == 0, done.stderr
    finally:
        server.shutdown()
    assert [n["body"] for n in Notes.notes] == ["someone else's note", f"{ci.MARKER}\nsecond pipeline\n"]
    assert [c[0] for c in Notes.calls if c[0] != "GET"] == ["POST", "PUT"]
    done = sh(note, tmp_path, **{**env, "GENHARNESS_GITLAB_TOKEN": ""})
    assert done.returncode == 0 and "no note posted" in done.stdout


def test_init_ci_gitlab_writes_the_pipeline_once(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["init", "--ci", "gitlab", "--transformers", "5.14.0", "5.24.0"]) == 0
    assert (tmp_path / ci_gitlab.PIPELINE).is_file()
    assert main(["init", "--ci", "gitlab"]) == 2
    assert "exists; delete it to write it again" in capsys.readouterr().err
