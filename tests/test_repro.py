"""`harness repro` (harness/cli/repro.py, harness/report/repro.py): a case's call as a standalone
script, judged by the record it was written against. These run the generated script with the
installed transformers only: against this env's own record it must match (exit 0) - which also
keeps the script's call equal to the harness's (harness/subjects/hf.py) - and against a perturbed
record it must show the difference (exit 1). The cross-version runs (5.14.0 vs 5.24.0) are in
docs/upgrades/repro.md."""

import ast
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from harness import cases
from harness.cli import main
from harness.cli.repro import checkpoints_of, prompts_of
from harness.report import repro
from harness.schema import Field
from harness.store.env import key_of
from harness.store.records import GoldenStore
from harness.zoo.specs import MODELS_DIR

ROOT = Path(__file__).resolve().parents[1]
STORE = GoldenStore(ROOT / "golden" / "records")
KEY = key_of()
CASE = next(c for c in cases.outputs() if c.id == "llama-target.plain.dynamic.short-0.greedy")
pytestmark = pytest.mark.skipif(STORE.read(KEY, "outputs", CASE.id) is None,
                                reason=f"no record of outputs/{CASE.id} for this env ({KEY})")


def write(tmp_path: Path, record, fields=()) -> Path:
    """The script for CASE against `record`, with the zoo's files copied beside it."""
    plan = repro.plan("outputs", CASE, record, KEY, prompts_of(CASE, "generate", {}), checkpoints_of(CASE, {}),
                      fields)
    for name, source in repro.copy_targets(plan, MODELS_DIR).items():
        dest = tmp_path / repro.MODELS_SUBDIR / name
        dest.mkdir(parents=True)
        for f in source.iterdir():
            (dest / f.name).write_bytes(f.read_bytes())
    path = tmp_path / "repro.py"
    path.write_text(repro.script(plan))
    return path


def run(script: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, script.name], cwd=script.parent, capture_output=True, text=True, timeout=300)


def test_the_script_imports_only_torch_and_transformers(tmp_path):
    tree = ast.parse(write(tmp_path, STORE.read(KEY, "outputs", CASE.id)).read_text())
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert imported - set(sys.stdlib_module_names) == {"torch", "transformers"}


def test_against_this_envs_own_record_the_script_matches(tmp_path):
    done = run(write(tmp_path, STORE.read(KEY, "outputs", CASE.id)))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 of 5 fields differ" in done.stdout  # error, tokens, text, first_logits, target_forwards


def test_a_perturbed_baseline_makes_it_exit_1_naming_where(tmp_path):
    record = STORE.read(KEY, "outputs", CASE.id)
    tokens = record.fields["tokens"]
    shifted = [[tokens.value[0][0] + 1, *tokens.value[0][1:]]]
    logits = record.fields["first_logits"]
    bumped = [[logits.value[0][0] + 0.5, *logits.value[0][1:]]]
    perturbed = replace(record, fields={**record.fields, "tokens": Field("tokens", shifted, tokens.extras),
                                        "first_logits": Field("tensor", bumped)})
    done = run(write(tmp_path, perturbed, ("tokens", "first_logits", "text")))
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"row 0 differs first at new token 0: baseline {shifted[0][0]} vs observed {tokens.value[0][0]}" in done.stdout
    assert "1/" in done.stdout and "elements beyond tolerance" in done.stdout and "at flat index 0" in done.stdout
    assert "2 of 3 fields differ" in done.stdout  # text was not perturbed: it still matches


def test_a_case_without_a_recipe_or_a_field_it_does_not_observe_is_refused():
    record = STORE.read(KEY, "outputs", CASE.id)
    caches = next(c for c in cases.models() if c.model == "llama-target")
    with pytest.raises(repro.ReproError, match="no standalone recipe"):
        repro.plan("caches", caches, record, KEY, {}, {})
    with pytest.raises(repro.ReproError, match="'drafts' is not one the script observes"):
        repro.plan("outputs", CASE, record, KEY, prompts_of(CASE, "generate", {}), {}, ("drafts",))


def test_the_command_writes_the_script_the_checkpoint_and_an_issue_with_both_envs(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    out = tmp_path / "out"
    assert main(["repro", f"outputs/{CASE.id}:tokens", "--baseline", KEY, "--against", KEY,
                 "--out", str(out), "--no-run"]) == 0
    assert sorted(p.name for p in (out / "models" / "llama-target").iterdir()) == sorted(
        p.name for p in (MODELS_DIR / "llama-target").iterdir())
    issue = (out / "issue.md").read_text()
    assert f"| transformers | {STORE.env_of(KEY)['transformers']} |" in issue
    assert (out / "repro.py").read_text().strip() in issue
    assert "- `tokens`: **pass**" in issue  # the record against itself: the harness's own verdict
    assert main(["repro", "caches/llama-target", "--baseline", KEY, "--out", str(out), "--no-run"]) == 2
    assert "`harness repro` writes scripts for outputs, stopping, backends" in capsys.readouterr().err


def test_a_pull_requests_summary_leads_with_the_regressions_and_their_repro_commands(tmp_path, monkeypatch):
    from harness.checking.findings import group_findings
    from harness.report import load_results
    from harness.report.repro import scriptable
    from harness.report.terminal import markdown_summary
    from harness.schema import Status

    results = load_results(ROOT / "docs" / "upgrades" / "5.14.0-to-5.24.0" / "results.json")
    text = markdown_summary(results)
    regressions = [f for f in group_findings(results.outcomes) if f.status is Status.REGRESSION]
    commands = [line.split("`")[1] for line in text.splitlines() if line.strip().startswith("repro: `harness repro ")]
    none = [line for line in text.splitlines() if line.strip().startswith("repro: no script for the ")]
    assert len(commands) + len(none) == len(regressions) and commands and none  # one line each; never a command that errors
    assert all(scriptable(*c.split()[2].split(":")[0].split("/", 1)) for c in commands)
    from harness.report.repro import scripted
    assert set(scripted()) == {s.name for s in cases.SUITES if s.repro}  # what the summary says is what the rows hold
    assert text.index("Verdict: **regression**") < text.index("## To decide") < text.index(commands[0]) \
        < text.index("<details>") < text.index("## Per suite") < text.index("</details>")
    monkeypatch.chdir(ROOT)  # the second regression's command (the static cache overflow), as printed, writes its script
    target, *flags = commands[1].split()[2:]
    assert target == "outputs/glm4moe-mtp.mtp.static.short-0.greedy:error"
    assert main(["repro", target, *flags, "--out", str(tmp_path / "r"), "--no-run"]) == 0
    assert (tmp_path / "r" / "repro.py").is_file()
