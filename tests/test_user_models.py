"""Your own checkpoints as subjects (harness/settings/models.py, the suites' `cases` marker, `harness check
--model`): bad input is refused up front naming the key and the fix (exit 2, nothing written), and a
checkpoint the zoo lacks (a tiny random Qwen3, tests/user_checkpoints.py) runs end to end: records
written, a clean rerun passes, a weight perturbed in place regresses exactly the fields it must.
"""

from __future__ import annotations

import importlib.util
import json
import pickle
import shutil
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from harness import cases as tables
from harness.checking.findings import group_findings
from harness.cli import main
from harness.report import load_results
from harness.report.page import model_of
from harness.settings.config import ConfigError, parse_config
from harness.settings.models import ModelError, UserModel, from_flags, resolve
from harness.zoo.specs import MODELS_DIR
from user_checkpoints import other_tokenizer, perturb, qwen3

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[1]
pytest_plugins = ["pytester"]


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> dict[str, Path]:
    """A tiny Qwen3 target and assistant (zoo tokenizer) and one with another tokenizer."""
    root = tmp_path_factory.mktemp("ckpt")
    return {"target": qwen3(root / "tiny-qwen3"), "assistant": qwen3(root / "tiny-qwen3-small", layers=1, seed=1),
            "other": other_tokenizer(root / "other-tok")}


def project(root: Path, models: str = "") -> Path:
    """A project of one's own: records and reports in tmp, the zoo from the checkout."""
    (root / "records").mkdir(parents=True, exist_ok=True)
    (root / "pyproject.toml").write_text(textwrap.dedent(f"""
        [tool.harness]
        golden_dir = "records"
        models_dir = "{MODELS_DIR}"
        reports_dir = "reports"
    """) + textwrap.dedent(models))
    return root


def written(root: Path) -> list[Path]:
    return [p for p in (root / "records").rglob("*") if p.is_file()] + list((root / "reports").glob("*"))


# ----------------------------------------------------------------------------------------------
# configuration: keys and types (no file access)


@pytest.mark.parametrize(("table", "says"), [
    ('[tool.harness.models.mine]\npath = "m"\npaths = ["plain", "beam"]', "paths: unknown path 'beam'"),
    ('[tool.harness.models.mine]\npath = "m"\ncolour = "red"', "mine] colour: unknown key"),
    ('[tool.harness.models.mine]\nassistant = "a"', "mine] path: missing"),
    ('[tool.harness.models.mine]\npath = "m"\ndtype = "int8"', "dtype: 'int8' is not one of"),
    ('[tool.harness.models."my.model"]\npath = "m"', "no dots"),
    ('[tool.harness.models.llama-target]\npath = "m"', "one of the harness's own models"),
    ('[tool.harness.models.smollm2-135m]\npath = "m"', "one of the harness's own models"),
])
def test_bad_model_tables_name_the_key(tmp_path, table, says):
    with pytest.raises(ConfigError, match=r"pyproject.toml: \[tool.harness.models") as info:
        parse_config(tmp_path, tomllib.loads(table)["tool"]["harness"])
    assert says in str(info.value)


def test_a_model_table_resolves_paths_under_the_root(tmp_path):
    settings = parse_config(tmp_path, {"models": {"mine": {"path": "ckpt", "assistant": "/abs/small",
                                                           "paths": ["plain"], "dtype": "bf16"}}})
    (model,) = settings.user_models
    assert (model.path, model.assistant, model.paths, model.dtype) == (tmp_path / "ckpt", Path("/abs/small"),
                                                                         ("plain",), "bf16")
    assert settings.models == ()  # the list form (zoo selection) stays separate


# ----------------------------------------------------------------------------------------------
# the case table


def test_user_cases_come_from_the_resolved_paths_and_prompts(checkpoints, tmp_path):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"id": "hello", "text": "Once upon a time"}\n\n{"text": "The end"}\n')
    model = resolve(UserModel("mine", checkpoints["target"], "test", assistant=checkpoints["assistant"],
                              prompts_file=prompts))
    assert model.paths == ("plain", "assisted", "prompt_lookup", "ensemble")  # no MTP layers in a Qwen3
    assert [p.id for p in model.prompts] == ["hello", "p3"]
    cases = tables.user_outputs(model)
    run = SimpleNamespace(user_models=(model,), deep=False)
    # per path and weight: 2 caches x 2 prompts greedy + 1 sampled; ensemble at 2 weights
    assert len(cases) == 3 * 5 + 2 * 5
    assert all(c.id.startswith("mine.") and c.model == "mine" for c in cases)
    assert {c.assistant for c in cases if c.path in ("assisted", "ensemble")} == {"mine.assistant"}
    assert tables.outputs(run)[-len(cases):] == cases and tables.models(run)[-1].id == "mine"
    zoo_ids = {c.id for c in tables.outputs()}
    assert zoo_ids == {c.id for c in tables.outputs(run)} - {c.id for c in cases}  # the zoo's rows unchanged
    assert model_of("mine.plain.dynamic.hello.greedy", ["mine", "llama-target"]) == "mine"
    (latency,) = [c for c in tables.latency(run) if c.model == "mine"]
    assert (latency.id, latency.param("paths"), latency.assistant) == (
        "mine.generate", ("plain", "assisted", "prompt_lookup", "ensemble"), "mine.assistant")


def test_a_flagged_model_is_named_after_its_directory():
    assert from_flags("/models/My Llama.v2").name == "My-Llama-v2"
    assert from_flags(str(MODELS_DIR / "llama-target")).name == "user-llama-target"  # never a zoo name


# ----------------------------------------------------------------------------------------------
# bad input: exit 2, the key and the fix, nothing written


class Boom:
    """Unpickling this creates a file: proof that a pickle was (not) loaded."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def bad_input(case: str, root: Path, checkpoints: dict[str, Path]) -> tuple[list[str], list[str]]:
    """(argv, what the message must say) for one kind of bad input."""
    if case == "missing-path":
        return ["--model", str(root / "nowhere")], ["--model", str(root / "nowhere"), "does not exist",
                                                     "save_pretrained"]
    if case == "no-config":
        (root / "weights").mkdir()
        (root / "weights" / "model.safetensors").write_bytes(b"\0" * 8)
        return ["--model", str(root / "weights")], ["--model", "has no config.json", "save_pretrained"]
    if case == "pickle-only":
        ckpt = root / "pickled"
        ckpt.mkdir()
        (ckpt / "config.json").write_text(json.dumps({"model_type": "qwen3"}))
        (ckpt / "pytorch_model.bin").write_bytes(pickle.dumps(Boom(root / "unpickled")))
        return ["--model", str(ckpt)], ["--model", "only pickle weights", "pytorch_model.bin",
                                        "safe_serialization=True"]
    if case == "tokenizer-mismatch":
        return (["--model", str(checkpoints["target"]), "--assistant", str(checkpoints["other"])],
                ["--assistant", "does not share", "tokenizer"])
    if case == "unknown-path":
        project(root, f'[tool.harness.models.mine]\npath = "{checkpoints["target"]}"\npaths = ["plain", "beam"]\n')
        return [], ["[tool.harness.models.mine] paths", "unknown path 'beam'", "known: plain"]
    if case == "assisted-without-assistant":
        project(root, f'[tool.harness.models.mine]\npath = "{checkpoints["target"]}"\npaths = ["assisted"]\n')
        return [], ["[tool.harness.models.mine] paths", "needs an assistant", "assistant"]
    if case == "bad-prompts":
        (root / "prompts.jsonl").write_text('{"text": "fine"}\n{"id": "x"}\n')
        project(root, f'[tool.harness.models.mine]\npath = "{checkpoints["target"]}"\nprompts = "prompts.jsonl"\n')
        return [], ["[tool.harness.models.mine] prompts", "prompts.jsonl:2", "non-empty \"text\""]
    assert case == "assistant-without-model"
    return ["--assistant", str(checkpoints["assistant"])], ["--assistant needs --model"]


@pytest.mark.parametrize("case", ["missing-path", "no-config", "pickle-only", "tokenizer-mismatch", "unknown-path",
                                  "assisted-without-assistant", "bad-prompts", "assistant-without-model"])
def test_bad_input_is_exit_2_naming_the_key_and_fix_and_writes_nothing(tmp_path, capfd, checkpoints, case):
    root = project(tmp_path / "proj")
    argv, says = bad_input(case, root, checkpoints)
    assert main(["check", "--root", str(root), *argv]) == 2
    err = capfd.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    for text in says:
        assert text in err, (text, err)
    assert written(root) == []
    assert not (tmp_path / "proj" / "unpickled").exists()  # refused, never loaded


def test_resolve_refuses_mtp_on_a_model_without_mtp_layers(checkpoints):
    with pytest.raises(ModelError, match="'mtp' needs multi-token-prediction layers"):
        resolve(UserModel("mine", checkpoints["target"], "here", paths=("mtp",)))


# ----------------------------------------------------------------------------------------------
# harness init


def test_init_writes_a_starter_block_that_loads_and_refuses_a_second_time(tmp_path, monkeypatch, capfd, checkpoints):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "mine"\n')
    assert main(["init", "--model", str(checkpoints["target"]), "--name", "prod"]) == 0
    text = (tmp_path / "pyproject.toml").read_text()
    assert text.startswith('[project]\nname = "mine"\n') and "# dtype = " in text
    settings = parse_config(tmp_path, tomllib.loads(text)["tool"]["harness"])
    assert [m.name for m in settings.user_models] == ["prod"] and settings.golden_dir.is_dir()
    assert resolve(settings.user_models[0]).paths == ("plain", "prompt_lookup")
    capfd.readouterr()
    assert main(["init"]) == 2
    assert "already has [tool.harness]" in capfd.readouterr().err


def test_init_writes_paths_relative_to_the_project_a_gitignore_and_refuses_a_missing_model(tmp_path, monkeypatch,
                                                                                          capfd, checkpoints):
    monkeypatch.chdir(tmp_path)
    assert main(["init", "--model", "./nope"]) == 2
    assert "--model ./nope" in capfd.readouterr().err and not (tmp_path / "pyproject.toml").exists()
    shutil.copytree(checkpoints["target"], tmp_path / "models" / "mine")
    (tmp_path / ".gitignore").write_text("*.log")
    assert main(["init", "--model", "./models/../models/mine"]) == 0
    text = (tmp_path / "pyproject.toml").read_text()
    assert 'path = "models/mine"' in text and str(tmp_path) not in text and "\nmodels_dir" not in text
    assert (tmp_path / ".gitignore").read_text().splitlines() == ["*.log", "reports/", ".pytest_cache/", "__pycache__/",
                                                                  ".hypothesis/", ".benchmarks/"]
    config = parse_config(tmp_path, tomllib.loads(text)["tool"]["harness"])
    assert config.user_models[0].path == tmp_path / "models" / "mine" and config.models_dir == MODELS_DIR
    assert "git-ignored reports/" in capfd.readouterr().out


# ----------------------------------------------------------------------------------------------
# end to end: harness check on a checkpoint the zoo lacks


def outcomes(results: Path) -> list[dict]:
    return json.loads(results.read_text())["outcomes"]


ONLY = "prod and not latency"  # timing is measured statistically; this test's verdicts are exact


@pytest.mark.long
def test_a_tiny_qwen3_runs_through_harness_check_then_passes_then_catches_a_perturbed_weight(
        tmp_path, capfd, pytester: pytest.Pytester):
    ckpt = qwen3(tmp_path / "prod-qwen3")
    root = project(tmp_path / "proj", f'[tool.harness.models.prod]\npath = "{ckpt}"\npaths = ["plain"]\n'
                                      'prompts = "prompts.jsonl"\n')
    (root / "prompts.jsonl").write_text('{"id": "story", "text": "Anna had a red ball, and"}\n')

    # first run through the CLI (a pytest subprocess): records written under <env-key>/<suite>/
    assert main(["check", "--root", str(root), "--suites", str(REPO / "suites"), "--", "-k", ONLY]) == 0
    records = sorted(p.relative_to(root / "records").as_posix().split("/", 1)[1] for p in (root / "records").rglob("*.json"))
    assert records == sorted(["backends/prod.json", "batching/prod.batch.greedy.json", "batching/prod.batch.right-padded.json",
                       "batching/prod.batch.tokenizer-padded.json", "compiled/prod.compiled.aot_eager.json",
                       "caches/prod.json", "continuous/prod.cb.greedy.json", "loading/prod.as-shipped.json",
                       "outputs/prod.plain.dynamic.story.greedy.json",
                       "outputs/prod.plain.dynamic.story.sample0.json", "outputs/prod.plain.static.story.greedy.json",
                       "sampling/prod.plain.combined.story-70.k2.json", "sampling/prod.plain.top_k.story-70.k2.json",
                       *sorted(f"stopping/{c.id}.json" for c in tables.stop_cases("prod", ("story", "story"))
                               + tables.stream_cases("prod", ("story", "story"), None)),
                       *(f"beam/{c.id}.json" for c in tables.beam_cases("prod", ("story", "story"))
                         + tables.beam_mode_cases("prod", "story")),
                       "text/prod.chat.json", "text/prod.tokenizer.json",
                       # the int8 case where torchao (the serving extra) is installed; without it nothing is written
                       *(["quantized/prod.quantized.int8-weight-only.json"] if importlib.util.find_spec("torchao") else [])])
    (first,) = (root / "reports").glob("*/*/results.json")
    assert {o["status"] for o in outcomes(first)} == {"new", "pass", "skipped", "info"}
    skipped = {o["field"]: o["detail"] for o in outcomes(first) if o["status"] == "skipped"}
    engine = {"equals_reference_engine", "logits_vs_engine", "rollback_vs_engine", "engine_rollback_vs_fresh",
              "tokens_as_engine", "steps_as_engine", "attention_as_defined"}
    if importlib.util.find_spec("torchao"):  # the int8 case's references run the engine on the dequantized weights
        engine |= {"tokens_as_dequantized", "logits_as_dequantized", "steps_as_dequantized"}
    else:  # the int8 case skipped with the serving extra's install line
        assert "genharness[serving]" in skipped.pop("<supported>")
    fits = {"joint", "distribution"}  # black-box fits whose N cannot rule out the smallest TV that matters
    # one prompt is one continuous-batching request: nothing for served_together to see shared
    assert set(skipped) == engine | fits | {"served_together"}
    assert "fewer than two requests decoded more than one token" in skipped["served_together"]
    assert all("does not implement model_type 'qwen3'" in skipped[f] for f in engine)
    assert all(skipped[f].startswith("not checked") for f in fits), {f: skipped[f] for f in fits}
    out = capfd.readouterr().out
    assert "per model:" in out and "prod" in out

    # the reruns in process (the same plugin and suites, without a second interpreter start; torch and
    # transformers stay imported across them: tests/conftest.py)
    def rerun(name: str):
        results = tmp_path / f"{name}.json"
        run = pytester.runpytest_inprocess(str(REPO / "suites"), "--rootdir", str(root), "-p", "no:cacheprovider",
                                           "--harness-results", str(results), "-k", ONLY)
        return run, outcomes(results)

    run, again = rerun("clean")
    assert run.ret == 0 and {o["status"] for o in again} == {"pass", "skipped", "info"}

    # x1.5 on the final norm scales every logit by 1.5: greedy argmax (tokens, text, cache
    # layout, keys) cannot move, the logit fields, the sampled stream and the exact sampling
    # distributions must (exact-distribution-changed: the model's own distribution changed, not the sampler)
    perturb(ckpt, "model.norm.weight", 1.5)
    run, perturbed = rerun("perturbed")
    assert run.ret == 1
    # every case says its checkpoint changed, and the report's first finding groups the rest under it
    assert {(o["status"], o["category"]) for o in perturbed if o["field"] == "checkpoint"} == {
        ("changed", "checkpoint-changed")}
    first = group_findings(load_results(tmp_path / "perturbed.json").outcomes)[0]
    assert first.sentence().startswith("the checkpoint of prod changed (model.safetensors sha256 ")
    assert {o.field for f in first.under for o in f.outcomes} >= {"first_logits", "joint", "distribution"}
    regressed = {(o["case"], o["field"]) for o in perturbed if o["status"] == "regression"}
    # beam search ranks sequences by the log-softmax of the scaled logits: every case's scores move, and a
    # search may take other paths (tokens, beam indices, and the setup's extra eos ids that follow them)
    beam = {r for r in regressed if ".beam." in r[0]}
    assert {c for c, f in beam if f == "sequences_scores"} == {f"prod.beam.{s[0]}" for s in tables.BEAM_SETTINGS}
    assert {f for _, f in beam} <= {"sequences_scores", "tokens", "beam_indices", "setup"}
    regressed -= beam
    assert regressed == {("prod", "logits"), ("prod.as-shipped", "logits"), ("prod.plain.dynamic.story.greedy", "first_logits"),
                         ("prod.batch.greedy", "first_logits"), ("prod.batch.right-padded", "first_logits"),
                         ("prod.batch.tokenizer-padded", "first_logits"),
                         ("prod.plain.static.story.greedy", "first_logits"),
                         ("prod.plain.dynamic.story.sample0", "first_logits"),
                         ("prod.plain.dynamic.story.sample0", "tokens"), ("prod.plain.dynamic.story.sample0", "text"),
                         ("prod.plain.dynamic.story.sample0", "distribution"),
                         ("prod.plain.top_k.story-70.k2", "joint"), ("prod.plain.combined.story-70.k2", "joint")}
    assert {o["category"] for o in perturbed if o["status"] == "regression" and o["field"] in ("joint", "distribution")} \
        == {"exact-distribution-changed"}


@pytest.mark.long
def test_a_one_off_model_run_works_where_there_is_no_project(tmp_path, monkeypatch, capfd, checkpoints):
    """`harness check --model PATH` in a directory with no [tool.harness]: it says where its records
    go, then writes them there (./golden/records, or --records DIR)."""
    work = tmp_path / "anywhere"
    work.mkdir()
    monkeypatch.chdir(work)
    assert main(["check", "--model", str(checkpoints["target"]), "--", "-k", "backends or caches"]) == 0
    out = capfd.readouterr().out
    assert "a one-off run of --model: records go to golden/records/ (choose with --records DIR" in out
    assert out.index("records go to") < out.index("harness: running")
    written = sorted(p.parent.name for p in (work / "golden" / "records").rglob("*.json"))
    assert written == ["backends", "caches"] and "records written: wrote" in out
    from argparse import Namespace

    from harness.cli.project import one_off_store, open_project

    project = open_project(Namespace(root=None, harness_model="m", harness_golden_dir=str(work / "mine"),
                                     reports_dir=None))
    one_off_store(project)
    assert project.one_off and (work / "mine").is_dir() and "records go to mine/" in capfd.readouterr().out


# ----------------------------------------------------------------------------------------------
# a real vocabulary (32k-256k) stays tractable


def test_large_vocabularies_keep_the_top_of_the_distribution_aligned():
    import torch

    from harness.subjects.hf_cache import TOP_K, VOCAB_LIMIT, narrowed, top_values

    small = torch.randn(2, 512)
    assert top_values(small) == small.tolist() and narrowed(small, small) == (small.tolist(), small.tolist())
    torch.manual_seed(0)
    big = torch.randn(3, 32_000)
    kept = torch.tensor(top_values(big))
    assert kept.shape == (3, TOP_K) and torch.equal(kept[:, 0], big.max(-1).values)
    assert torch.equal(torch.tensor(top_values(big[:, torch.randperm(32_000)])), kept)  # ids do not matter
    drifted = big + 1e-7 * torch.randn_like(big)
    a, b = narrowed(drifted, big)
    assert len(a[0]) == len(b[0]) == TOP_K and VOCAB_LIMIT < big.shape[-1]
    assert torch.allclose(torch.tensor(a), torch.tensor(b), atol=1e-6)  # the same columns on both sides
    assert torch.tensor(b).max() == big.max()


# ----------------------------------------------------------------------------------------------
# a model's own dtype: its records and comparisons say so (golden.numerics, suites/conftest.py)

NUMERICS_SUITE = '''
import json
from pathlib import Path


def test_toy(golden):
    golden.numerics("bf16")
    golden.check("logits", json.loads((Path(__file__).parent / "value.json").read_text()), kind="tensor")
'''


def test_a_model_in_its_own_dtype_records_and_compares_in_it(pytester: pytest.Pytester):
    pytester.makefile(".toml", pyproject='[tool.harness]\ngolden_dir = "records"\n')
    (pytester.path / "records").mkdir()
    pytester.makepyfile(test_toy=NUMERICS_SUITE)
    (pytester.path / "value.json").write_text("[8.0, -3.0]")
    pytester.runpytest_inprocess("-p", "no:cacheprovider").assert_outcomes(passed=1)
    (record,) = (pytester.path / "records").rglob("*.json")
    assert json.loads(record.read_text())["env"]["dtype"] == "bf16" and record.parts[-3].endswith("-fp32")
    # 0.5 % drift: beyond fp32's tolerance (rtol 1.3e-6), within bf16's (1.6e-2)
    (pytester.path / "value.json").write_text("[8.04, -3.015]")
    pytester.runpytest_inprocess("-p", "no:cacheprovider").assert_outcomes(passed=1)
    # the same drift in the run's own fp32 is a regression
    record.unlink()
    (pytester.path / "test_toy.py").write_text(NUMERICS_SUITE.replace('    golden.numerics("bf16")\n', ""))
    (pytester.path / "value.json").write_text("[8.0, -3.0]")
    pytester.runpytest_inprocess("-p", "no:cacheprovider").assert_outcomes(passed=1)
    (pytester.path / "value.json").write_text("[8.04, -3.015]")
    pytester.runpytest_inprocess("-p", "no:cacheprovider").assert_outcomes(failed=1)


# ----------------------------------------------------------------------------------------------
# harness regen --model: one checkpoint's cases, never a removal of the others'

TOY_SUITE = '''
import pytest
import torch

from harness.schema import Case


@pytest.mark.parametrize("case", [Case("tiny-qwen3", name="one")])  # a case of the --model checkpoint
def test_toy(case, golden):
    golden.check("value", 1)
'''


def test_regen_with_model_is_partial_and_keeps_other_records(tmp_path, checkpoints, capfd):
    from harness.schema import Field
    from harness.store.env import env_key, fingerprint
    from harness.store.records import GoldenStore

    root = project(tmp_path / "proj")
    (root / "suites").mkdir()
    (root / "suites" / "test_toy.py").write_text(TOY_SUITE)
    fp = fingerprint()
    store = GoldenStore(root / "records")
    kept = store.update(env_key(fp), "toy", "llama-target.plain.dynamic.short-0.greedy", fp,
                        {"value": Field("exact", 1)}).path
    assert main(["regen", "--yes", "--root", str(root), "--model", str(checkpoints["target"])]) == 0
    out = capfd.readouterr().out
    assert "--model runs one checkpoint's cases" in out and "nothing is removed" in out
    assert kept.is_file() and (kept.parent / "one.json").is_file()
