"""The subject boundary (harness/subjects/__init__.py): only the subject's exceptions are data."""

from __future__ import annotations

import pytest
import torch

from harness.subjects import error_of, is_subject_error, observe


def test_an_exception_raised_inside_the_subject_is_an_observation():
    from transformers import GenerationConfig

    result, err = observe(lambda: GenerationConfig(max_new_tokens=-1).validate(strict=True))
    assert result is None and err is not None and err["type"] == "ValueError"



def test_a_torch_error_in_harness_code_is_the_harness_bug():
    # the stack decides: a bad tensor op written in a probe (no library frame below it) is the probe's bug
    with pytest.raises(RuntimeError):
        observe(lambda: torch.zeros(2) @ torch.zeros(3))


def test_a_harness_bug_propagates_with_its_traceback():
    def probe():
        return {}["missing"]  # a bug in harness code, not a finding about transformers

    with pytest.raises(KeyError, match="missing"):
        observe(probe)


def test_arguments_the_harness_built_that_do_not_bind_are_the_harness_bug():
    """The call never entered the library: recorded, a wrong call of the harness's would pass in
    every version (issue 63); the library's own call binding wrong arguments stays its error
    (tests/test_fail_closed_weak.py, boundary/harness-binding-error)."""
    from transformers import DynamicCache

    with pytest.raises(TypeError, match="no_such_keyword"):
        observe(lambda: DynamicCache(no_such_keyword=1))


def test_error_text_is_scrubbed_of_local_paths():
    from harness.subjects import _REPO_ROOT

    err = error_of(ValueError(f"cannot open {_REPO_ROOT}/golden/x at 0xdeadbeef12\nsecond line"))
    assert err == {"type": "ValueError", "message": "cannot open <repo>/golden/x at 0x..."}
    assert not is_subject_error(ValueError("never raised"))


def test_a_long_path_is_scrubbed_before_the_message_is_cut():
    """A tmp dir deep enough (a nox session's) must not leak half a path into a record."""
    deep = "/work/.nox/suites-5-14-0/tmp/pytest-of-root/pytest-7/" + "d" * 300
    err = error_of(ValueError(f"{'x' * 200} at {deep}/config.json: no such file"), scrub={deep: "<dir>"})
    assert err["message"] == f"{'x' * 200} at <dir>/config.json: no such file"
    assert len(error_of(ValueError("y" * 1000))["message"]) == 300


def test_harness_code_the_library_calls_back_is_the_harness_bug():
    """A logits processor of the harness's that raises inside generate(): below the library's
    frames there is a harness frame, so the exception is the harness's, whatever raised it."""
    from transformers import LlamaConfig, LlamaForCausalLM, LogitsProcessor, LogitsProcessorList

    class Broken(LogitsProcessor):
        def __call__(self, input_ids, scores):
            return torch.nn.functional.softmax(scores, dim=7)  # torch raising on the harness's arguments

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(hidden_size=8, intermediate_size=16, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=1, vocab_size=32))
    with pytest.raises(IndexError):
        observe(lambda: model.generate(torch.tensor([[1, 2]]), max_new_tokens=2, do_sample=False,
                                       logits_processor=LogitsProcessorList([Broken()])))


def test_a_fault_of_the_catalogue_raises_as_the_library():
    """harness/faults compiles an edited library function under '<fault ...>': its exception is
    the library's (a modelled library bug), not a harness bug."""
    from harness.subjects import FAULT_SOURCE, side_of_file

    namespace: dict = {}
    exec(compile("def edited():\n    raise ValueError('edited library code')\n", f"{FAULT_SOURCE}x: m.f>", "exec"),
         namespace)
    assert side_of_file(f"{FAULT_SOURCE}x: m.f>") == "library"
    _, err = observe(lambda: namespace["edited"]())
    assert err == {"type": "ValueError", "message": "edited library code"}


def test_a_call_whose_callee_cannot_be_read_back_fails_closed():
    """A binding error at a call the boundary cannot resolve safely is not recorded as data."""
    def factory():
        return lambda: None

    with pytest.raises(TypeError):
        observe(lambda: factory()(1))  # the callee is a call's result: not evaluated again


def test_a_library_call_failing_through_a_pass_through_wrapper_is_the_librarys_error():
    """transformers 5.0.0's early-exit generator calls its parent's get_candidates without the
    `is_first_iteration` the parent requires: through the harness's draft recorder (a `pass_through`
    wrapper passing the library's arguments on) that TypeError is the library's finding; through a
    wrapper not marked so it would read as a harness bug."""
    import os

    import transformers

    from harness.subjects import pass_through

    source = ("class Parent:\n    def get(self, x, needed):\n        return x\n"
              "class Child(Parent):\n    def get(self, x, needed):\n        return super().get(x)\n"
              "def run(obj):\n    return obj.get(1, True)\n")
    import harness

    library_file = os.path.join(os.path.dirname(transformers.__file__), "_harness_test_fake_library.py")
    harness_file = os.path.join(os.path.dirname(harness.__file__), "_test_fake_wrapper.py")

    def library(marked: bool) -> dict:
        scope: dict = {}
        exec(compile(source, library_file, "exec"), scope)
        for cls in (scope["Parent"], scope["Child"]):
            made: dict = {"original": cls.get}  # the wrapper's frames are the harness's (its file is under harness/)
            name = "marked" if marked else "unmarked"  # (equal code objects would share the mark)
            exec(compile(f"def {name}(self, x, *args, **kwargs):\n    return original(self, x, *args, **kwargs)\n",
                         harness_file, "exec"), made)
            cls.get = pass_through(made[name]) if marked else made[name]
        return scope

    scope = library(marked=True)
    result, err = observe(lambda: scope["run"](scope["Child"]()))
    assert result is None and err["type"] == "TypeError" and "needed" in err["message"]
    scope = library(marked=False)
    with pytest.raises(TypeError, match="needed"):
        observe(lambda: scope["run"](scope["Child"]()))
