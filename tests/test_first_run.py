"""A user's first run is about the user's model (issue 43): a project with models of its own runs
only theirs unless `zoo = true`; a half-precision checkpoint runs in its own dtype unless the config
says otherwise; a refused one-off `--model` writes nothing; a crash of the library on the model is
listed in the terminal and summary.md (harness/report/library_errors.py)."""

from __future__ import annotations

import json
import pickle
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from harness.checking.findings import group_findings
from harness.cli import main
from harness.plugin.selection import wanted_model
from harness.report import library_errors
from harness.report.page import model_views, outcome_view
from harness.report.terminal import collapsed, markdown_summary, print_summary
from harness.schema import Outcome, Results, Status
from harness.settings.config import ConfigError, parse_config
from harness.settings.models import UserModel, resolve
from user_checkpoints import qwen3


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    return qwen3(tmp_path_factory.mktemp("ckpt") / "tiny-qwen3", layers=1)


def item_of(model: str | None):
    return SimpleNamespace(callspec=SimpleNamespace(params={"case": SimpleNamespace(model=model)}))


@pytest.mark.parametrize("zoo", [False, True])
def test_a_project_with_its_own_models_runs_the_zoo_only_when_asked(tmp_path, zoo):
    config = parse_config(tmp_path, {"zoo": zoo, "models": {"mine": {"path": "m"}}})
    run = SimpleNamespace(user_models=config.user_models, one_off=False, config=config)
    assert wanted_model(item_of("mine"), run) and wanted_model(item_of(None), run)  # a model-less test runs
    assert wanted_model(item_of("llama-target"), run) is zoo
    no_models = SimpleNamespace(user_models=(), one_off=False, config=parse_config(tmp_path, {}))
    assert wanted_model(item_of("llama-target"), no_models)  # the harness's own project: the zoo


def test_zoo_must_be_a_boolean(tmp_path):
    with pytest.raises(ConfigError, match="zoo: expected true or false"):
        parse_config(tmp_path, {"zoo": "yes"})


@pytest.mark.parametrize(("saved", "configured", "runs_in"), [
    ("bfloat16", None, "bf16"), ("float16", None, "fp16"), ("float32", None, None), ("bfloat16", "fp32", "fp32")])
def test_a_checkpoint_runs_in_its_own_dtype_unless_configured(tmp_path, checkpoint, saved, configured, runs_in):
    ckpt = tmp_path / "ckpt"
    shutil.copytree(checkpoint, ckpt)
    config = json.loads((ckpt / "config.json").read_text())
    config.pop("torch_dtype", None)
    (ckpt / "config.json").write_text(json.dumps({**config, "dtype": saved}))
    assert resolve(UserModel("mine", ckpt, "here", dtype=configured)).dtype == runs_in


class Boom:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def test_a_refused_one_off_run_writes_nothing(tmp_path, monkeypatch, capfd):
    ckpt = tmp_path / "pickled"
    ckpt.mkdir()
    (ckpt / "config.json").write_text(json.dumps({"model_type": "qwen3"}))
    (ckpt / "pytorch_model.bin").write_bytes(pickle.dumps(Boom(tmp_path / "unpickled")))
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    assert main(["check", "--model", str(ckpt)]) == 2
    assert "only pickle weights" in capfd.readouterr().err
    assert list(work.iterdir()) == [] and not (tmp_path / "unpickled").exists()


def raised(case: str, error: dict[str, str], field: str = "error") -> Outcome:
    return Outcome("outputs", case, field + library_errors.SUFFIX, "exact", Status.INFO,
                   library_errors.sentence(field, error), diff=dict(error), against="reference")


def test_a_library_error_on_your_model_is_listed_first_with_its_cases():
    index = {"type": "IndexError", "message": "index_copy_(): index 43 is out of bounds"}
    assert library_errors.errors_in(index) == [index]
    assert library_errors.errors_in({"dynamic": None, "static": index}) == [index]
    assert library_errors.errors_in(None) == [] and library_errors.errors_in({"type": "x"}) == []
    key = {"type": "KeyError", "message": "'position_ids'"}
    refusal = {"type": "ValueError", "message": "assisted generate is only supported for batch_size = 1"}
    outcomes = [raised("mine.a", index), raised("mine.b", index), raised("mine.c", key), raised("mine.d", refusal),
                Outcome("outputs", "mine.a", "error", "exact", Status.PASS, "equal")]
    assert library_errors.grouped(outcomes) == [
        (library_errors.sentence("error", index), ["outputs/mine.a", "outputs/mine.b"]),
        (library_errors.sentence("error", key), ["outputs/mine.c"])]
    assert library_errors.grouped(outcomes, crashes=False) == [(library_errors.sentence("error", refusal),
                                                                ["outputs/mine.d"])]
    lines = library_errors.terminal_lines(outcomes)
    assert "3 case(s)" in lines[0] and "IndexError" in lines[1] and "outputs/mine.b" in lines[1]
    assert "1 case(s) where transformers refused" in lines[-1]
    summary = markdown_summary(Results({}, None, outcomes))
    assert summary.index("## Library crashes on your models") < summary.index("## Per suite")
    assert "`outputs/mine.c`" in summary and "KeyError: 'position_ids'" in summary
    assert library_errors.terminal_lines(outcomes[4:]) == []


def test_one_cause_is_one_row_and_the_model_table_counts_cases_as_findings_do(capsys):
    """A checkpoint changed in every case of the model: one row "(+N more)"; the per-model table
    counts suite/case pairs (a case id such as `mine` is a case of several suites)."""
    change = "the checkpoint changed (model.safetensors)"
    outcomes = [Outcome(suite, case, "checkpoint", "checkpoint", Status.CHANGED, change, "checkpoint-changed")
                for suite, case in [("backends", "mine"), ("caches", "mine"), ("outputs", "mine.a")]]
    outcomes.append(Outcome("outputs", "mine.a", "tokens", "tokens", Status.CHANGED, "token 3 differs"))
    rows = collapsed(outcomes)
    assert [(o.field, suites, case) for o, suites, case in rows] == [
        ("checkpoint", "3 suites", "mine (+2 more)"), ("tokens", "outputs", "mine.a")]
    results = Results({}, None, outcomes, meta={"user_models": ["mine"]})
    print_summary(results, "run")
    printed = capsys.readouterr().out
    assert printed.count(change) == 1 + sum(change in f.sentence() for f in group_findings(outcomes))
    (view,) = model_views([outcome_view(i, o) for i, o in enumerate(outcomes)], ["mine"])
    assert view.cases == len({c for f in group_findings(outcomes) for c in f.cases}) == 3


@pytest.mark.parametrize(("ci", "table", "strict"), [(False, {}, False), (True, {}, True),
                                                    (True, {"ci_latency_strict": False}, False)])
def test_under_ci_latency_not_judged_fails_unless_the_project_opts_out(tmp_path, ci, table, strict):
    from harness.settings.run import RunSettings

    assert RunSettings.make(parse_config(tmp_path, table), {}, ci=ci).latency_strict is strict
    assert RunSettings.make(parse_config(tmp_path, table), {"latency_strict": True}, ci=ci).latency_strict


def test_a_run_whose_latency_was_not_judged_says_so_in_its_verdict_line():
    from harness.cli.common import verdict_line

    busy = Outcome("latency", "mine.generate", "generate_plain", "latency", Status.SKIPPED,
                   "not judged: the machine was busy", "not-judged")
    judged = Outcome("latency", "mine.generate", "prefill", "latency", Status.PASS, "within noise")
    line = verdict_line(Results({}, {}, [busy, judged]))
    assert line.startswith("verdict: pass") and "latency NOT judged in 1 field(s)" in line
    assert "NOT judged" not in verdict_line(Results({}, {}, [judged]))


def test_a_first_run_failing_only_its_own_references_says_it_is_the_library_and_what_to_do():
    """A user's Gemma 2 (sliding-window static cache) recompiling at every decode step under the compiled
    suite (transformers #44609) fails `no_recompile_within_cache` on its first run: no record is needed to
    see it, and the run is not written as golden. The terminal, summary.md and the page say it is a
    finding in the library and name the two next steps; a regression against a record never reads so."""
    from harness.checking.findings import library_hint
    from harness.report.page import context

    library = Outcome("compiled", "mine.compiled.aot_eager", "no_recompile_within_cache", "exact", Status.REGRESSION,
                      "other: 0 -> 1", "real-change", against="reference")
    upgrade = Outcome("outputs", "mine.greedy", "tokens", "tokens", Status.REGRESSION, "token 3: 7 -> 9",
                      "real-change")
    new = Outcome("compiled", "mine.compiled.aot_eager", "tokens", "tokens", Status.NEW, "no baseline record")
    first = Results({}, {}, [library, new])
    hint = library_hint(first)
    assert "1 field(s) fail the run's own references" in hint and "`harness regen`" in hint
    summary = markdown_summary(first)
    assert "fail the run's own references" in summary.split("Counts:")[0]
    # `harness repro` has no script for the compiled suite: the summary says so instead of a command that errors
    assert "harness repro compiled/" not in summary and "repro: no script for the compiled suite" in summary
    assert "fail the run's own references" in context(first)["verdict_text"]
    for other in ([library, upgrade], [upgrade], [new]):  # one regression from a record: no such word
        results = Results({}, {}, other)
        assert library_hint(results) == "" and "own references" not in context(results)["verdict_text"]
