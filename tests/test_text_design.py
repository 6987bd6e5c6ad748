"""The text suite's pure logic (harness/designs/text.py, harness/cases/ `tokenizers` / `chats`):
the round trip's promise read from the files, the declared known deviation, messages found in order, the generation prompt as
what follows the prompt-less text, the zoo's tokenizers grouped by their files' digests; and that
the suite's references fail on a perturbed tokenizer and a perturbed template."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from harness import cases
from harness.designs import text
from harness.engine import detokenize
from harness.zoo.specs import MODELS_DIR


def test_the_round_trip_promise_is_read_from_the_files_not_from_the_loaded_pipeline():
    """round_trip_lossless asks the harness's reading of the files (bpe.py), so a normalizer slipped
    into the load (fault nfkc-normalizer-slipped-in) no longer makes it skip itself: it runs, and the
    probe of compatibility characters comes back rewritten."""
    from harness.faults.catalogue import inject
    from harness.zoo.load import load_hf

    zoo, case = _Zoo(), cases.tokenizers()[0]
    obs = text.tokenizer(zoo, case)
    assert "round_trip_lossless" in obs.references and _failed(obs) == set()
    undo = inject("nfkc-normalizer-slipped-in")
    try:
        _, faulty = load_hf(cases.TARGET)
    finally:
        undo()
    assert text.pipeline(faulty)["normalizer"] is not None  # what the old promise read, and skipped on
    obs = text.tokenizer(_Zoo(faulty), case)
    ref = obs.references["round_trip_lossless"]
    assert ref.observed.value["probe:compat-chars"] != text.PROBES["compat-chars"]
    assert {"round_trip_lossless", "encode_as_tokenizers_lib"} <= _failed(obs)


def test_the_known_deviation_is_the_files_flags_reset_for_tokens_named_as_bare_strings_in_5x_only():
    added = MODELS_DIR / "tok-added"
    reset = {"<mask>": {"lstrip": False, "rstrip": False}, "<tool_call>": {"lstrip": False, "rstrip": False}}
    assert text.strip_flags_reset(added, "5.24.0") == text.strip_flags_reset(added, "5.0.0") == reset
    assert text.strip_flags_reset(added, "4.57.6") == {}  # 4.57 honours the flags: the same loss there fails
    assert text.strip_flags_reset(MODELS_DIR / "tok-spm", "5.24.0") == {}  # no flagged token named so


def test_a_known_deviation_explains_only_the_texts_it_reproduces_exactly(monkeypatch):
    """A text whose encode equals the files read with the declared mechanism is held to that answer
    and listed as information; a text that differs in any other way still fails the reference."""
    from harness.engine.detokenize import Oracle

    monkeypatch.setattr(text.hf, "version", lambda: "5.24.0")
    directory = MODELS_DIR / "tok-added"
    oracle = Oracle.of(directory)
    texts = {"mask": "x <mask> y", "plain": "Hello world"}
    known = oracle.with_added(text.strip_flags_reset(directory, "5.24.0"))
    got = {part: {k: known.encode(t, add) for k, t in texts.items()}
           for part, add in (("plain", False), ("special", True))}
    got["plain"]["plain"] = {**got["plain"]["plain"], "ids": [1, 2]}  # another deviation on another text
    expected = {part: {k: oracle.encode(t, add) for k, t in texts.items()}
                for part, add in (("plain", False), ("special", True))}
    assert got["plain"]["mask"] != expected["plain"]["mask"]  # the files' reading strips the space
    obs = text.Observation()
    text._known_deviation(obs, oracle, directory, texts, got, expected)
    assert expected["plain"]["mask"] == got["plain"]["mask"] and expected["plain"]["plain"] != got["plain"]["plain"]
    note = obs.notes["known_upstream_deviation"]
    assert note.status == "info" and note.category == "known-deviation"
    assert note.diff["texts"] == ["plain.mask", "special.mask"]
    monkeypatch.setattr(text.hf, "version", lambda: "4.57.6")  # not known there: nothing explained
    fresh = {part: {k: oracle.encode(t, add) for k, t in texts.items()}
             for part, add in (("plain", False), ("special", True))}
    obs = text.Observation()
    text._known_deviation(obs, oracle, directory, texts, got, fresh)
    assert "known_upstream_deviation" not in obs.notes and fresh["plain"]["mask"] != got["plain"]["mask"]


@pytest.mark.parametrize(("rendered", "contents", "found"), [
    ("<s>sys: A</s>user: B</s>", ["A", "B"], True),
    ("<s>user: B</s>", ["A", "B"], False),  # the system message dropped
    ("<s>B then A", ["A", "B"], False),  # out of order
    ("A A", [" A ", "A"], True),  # stripped, and a repeated content found twice
    ("A", ["A", "A"], False),  # ... but not once for two messages
])
def test_messages_are_found_stripped_and_in_the_conversation_s_order(rendered, contents, found):
    assert text.contents_in_order(rendered, contents) is found


def test_the_generation_prompt_is_what_follows_the_prompt_less_text():
    assert text.appended("ab<hdr>", "ab") == {"prefix": True, "appended": "<hdr>"}
    assert text.appended("ab", "ab") == {"prefix": True, "appended": ""}  # dropped: nothing appended
    assert text.appended("xb<hdr>", "ab") == {"prefix": False, "appended": None}  # the turns themselves changed


@pytest.mark.parametrize(("seen", "header", "reads_flag", "holds"), [
    ({"prefix": True, "appended": "<hdr>"}, "<hdr>", True, True),  # the fixture: exactly its header
    ({"prefix": True, "appended": ""}, "<hdr>", True, False),  # ... dropped
    ({"prefix": True, "appended": "assistant:"}, None, True, True),  # a user's template that reads the flag
    ({"prefix": True, "appended": ""}, None, True, False),  # ... and appends nothing
    ({"prefix": True, "appended": ""}, None, False, True),  # a Llama-2-style template: no header to add
    ({"prefix": False, "appended": None}, None, True, False),  # the flag changed the turns themselves
])
def test_the_generation_prompt_expected_of_the_fixture_and_of_a_user_s_template(seen, header, reads_flag, holds):
    assert (text.expected_generation_prompt(seen, header, reads_flag) == seen) is holds


def test_the_fixture_template_s_generation_prompt_is_the_header_the_design_expects():
    assert repr(text.HEADER)[1:-1] in text.TEMPLATE_FILE.read_text()


def test_zoo_tokenizers_group_by_the_digests_of_their_tokenizer_files_only():
    manifest = {"models": {
        "a": {"files": {"tokenizer.json": "t1", "tokenizer_config.json": "c1", "model.safetensors": "w1"}},
        "b": {"files": {"tokenizer.json": "t1", "tokenizer_config.json": "c1", "model.safetensors": "w2"}},
        "c": {"files": {"tokenizer.json": "t1", "tokenizer_config.json": "c2"}},  # another config: another tokenizer
    }}
    assert cases.tokenizer_groups(manifest, ["b", "a", "c", "d"]) == [("b", "a"), ("c",), ("d",)]
    assert cases.tokenizer_groups(None, ["a", "b"]) == [("a",), ("b",)]  # no manifest: each its own


def test_the_tables_name_each_case_once_and_reach_a_user_model():
    from harness.settings.models import UserModel

    zoo = cases.tokenizers() + cases.chats()
    assert len({c.id for c in zoo}) == len(zoo)
    shared = [m for c in cases.tokenizers() for m in c.param("shared_by")]
    assert sorted(shared) == sorted(s.name for s in cases.SPECS)  # every zoo model's tokenizer is observed once

    class Run:
        user_models = (UserModel("mine", Path("/nowhere"), "--model", paths=("plain",)),)
        config = SimpleNamespace(models_dir=MODELS_DIR)
        deep = False

    mine = [c.id for c in cases.tokenizers(Run()) + cases.chats(Run()) if c.model == "mine"]
    assert mine == ["mine.tokenizer", "mine.chat"]
    assert all(c.param("own") for c in cases.tokenizers(Run()) + cases.chats(Run()) if c.model == "mine")


# ----------------------------------------------------------------------------------------------
# the references catch a perturbed subject


def _failed(obs) -> set[str]:
    return {name for name, r in obs.references.items() if r.observed.value != r.expected.value}


class _Zoo:
    """The one zoo model these tests load, with its tokenizer replaceable."""

    device = "cpu"

    def __init__(self, tokenizer=None):
        from harness.zoo.load import load_hf

        model, tok = load_hf(cases.TARGET)
        self.loaded = SimpleNamespace(model=model, tokenizer=tokenizer or tok)
        self.checkpoints = SimpleNamespace(directory=lambda name: MODELS_DIR / name)

    def load(self, name):
        return self.loaded


def test_the_tokenizer_references_hold_and_fail_when_batch_decode_keeps_special_tokens():
    zoo = _Zoo()
    case = cases.tokenizers()[0]
    assert _failed(text.tokenizer(zoo, case)) == set()

    tok = zoo.loaded.tokenizer
    original = type(tok).decode

    class KeepsSpecial(type(tok)):
        def decode(self, token_ids, skip_special_tokens=False, **kwargs):
            batched = isinstance(token_ids, list) and token_ids and isinstance(token_ids[0], list)
            return original(self, token_ids, skip_special_tokens=skip_special_tokens and not batched, **kwargs)

        def batch_decode(self, sequences, skip_special_tokens=False, **kwargs):  # 4.57's does not go through decode
            return [original(self, s, skip_special_tokens=False, **kwargs) for s in sequences]

    tok.__class__ = KeepsSpecial
    try:
        assert _failed(text.tokenizer(zoo, case)) == {"batch_decode_equals_single"}
    finally:
        tok.__class__ = KeepsSpecial.__bases__[0]


def test_the_clean_up_reference_fails_when_the_bpe_guard_is_lost(monkeypatch):
    """A decode that runs the WordPiece clean-up on byte-level BPE text although the version declares
    it skipped (bpe-clean-up-strips-spaces' class: `x != y` -> `x!= y`) fails clean_up_as_specified;
    a version without the guard (4.57 - 5.13) is held to the clean-up instead."""
    zoo = _Zoo()
    case = cases.tokenizers()[0]
    tok = zoo.loaded.tokenizer
    original = type(tok).decode

    class CleansAnyway(type(tok)):
        def decode(self, token_ids, skip_special_tokens=False, clean_up_tokenization_spaces=None, **kwargs):
            out = original(self, token_ids, skip_special_tokens=skip_special_tokens, **kwargs)
            return detokenize.clean_up(out) if clean_up_tokenization_spaces else out

    tok.__class__ = CleansAnyway
    try:
        monkeypatch.setattr(tok, detokenize.BPE_GUARD, False, raising=False)
        assert "clean_up_as_specified" in _failed(text.tokenizer(zoo, case))
        monkeypatch.delattr(tok, detokenize.BPE_GUARD, raising=False)  # no guard declared: the rule applies
        assert "clean_up_as_specified" not in _failed(text.tokenizer(zoo, case))
    finally:
        tok.__class__ = CleansAnyway.__bases__[0]


def test_the_clean_up_rule_drops_spaces_before_punctuation_and_contractions_only():
    assert detokenize.clean_up("Hello , world . It 's x != y") == "Hello, world. It's x!= y"
    assert detokenize.cleaned_up_as_specified(" a , b", "BPE", False) == " a , b"  # the guard declared, unset
    assert detokenize.cleaned_up_as_specified(" a , b", "BPE", True) == " a, b"
    assert detokenize.cleaned_up_as_specified(" a , b", "BPE", None) == " a, b"  # a version without the guard
    assert detokenize.cleaned_up_as_specified(" a , b", "WordPiece", False) == " a, b"


def test_the_chat_references_fail_when_a_template_drops_the_system_message_and_the_generation_prompt(monkeypatch):
    zoo = _Zoo()
    case = cases.chats()[0]
    assert _failed(text.chat(zoo, case)) == set()
    template = text.TEMPLATE_FILE.read_text()
    broken = (template.replace("+ system_message -}}", "-}}")
              .replace("{%- if add_generation_prompt -%}", "{%- if false -%}"))
    assert broken != template
    monkeypatch.setattr(text, "TEMPLATE_FILE", SimpleNamespace(read_text=lambda: broken))
    assert _failed(text.chat(zoo, case)) == {"generation_prompt_appended", "messages_in_order"}


def test_the_sanitized_chat_reference_fails_when_the_flag_is_ignored():
    from harness.subjects.hf_text import chat_tokenizer, supports_sanitize

    if not supports_sanitize():
        pytest.skip("this transformers' apply_chat_template has no sanitize_control_tokens")
    tok, error = chat_tokenizer(MODELS_DIR / cases.TARGET, text.TEMPLATE_FILE.read_text())
    assert error is None
    obs = text.Observation()
    text.control_tokens(obs, tok)
    bos, eos = tok.bos_token_id, tok.eos_token_id  # the template's bos, the message's eos + bos text, the turn's eos
    assert _failed(obs) == set() and obs.fields["control_tokens_in_content"].value["special_ids"] == [bos, eos, bos, eos]

    original = type(tok).apply_chat_template

    class IgnoresSanitize(type(tok)):
        def apply_chat_template(self, conversation, **kwargs):
            kwargs.pop("sanitize_control_tokens", None)
            return original(self, conversation, **kwargs)

    tok.__class__ = IgnoresSanitize
    obs = text.Observation()
    text.control_tokens(obs, tok)
    assert _failed(obs) == {"sanitized_content_is_text"}


def test_a_decode_that_refuses_a_batch_is_v4s_api_not_a_reference_failure_while_batch_decode_still_counts():
    """4.57's decode takes one sequence (a batch: TypeError) - `return_types` records that across
    versions; the reference then holds batch_decode alone to the single decodes."""
    zoo = _Zoo()
    case = cases.tokenizers()[0]
    tok = zoo.loaded.tokenizer
    original = type(tok).decode

    class V4Decode(type(tok)):
        def decode(self, token_ids, **kwargs):
            if isinstance(token_ids, list) and token_ids and isinstance(token_ids[0], list):
                return self._decode(token_ids)  # raises in transformers' code, as 4.57's decode does
            return original(self, token_ids, **kwargs)

        def batch_decode(self, sequences, **kwargs):
            return [self.decode(s, **kwargs) for s in sequences]

    class V4DecodeKeepsSpecial(V4Decode):
        def batch_decode(self, sequences, **kwargs):
            return [self.decode(s, **{**kwargs, "skip_special_tokens": False}) for s in sequences]

    try:
        tok.__class__ = V4Decode
        obs = text.tokenizer(zoo, case)
        assert _failed(obs) == set() and "decode" not in obs.references["batch_decode_equals_single"].observed.value
        tok.__class__ = V4DecodeKeepsSpecial
        assert _failed(text.tokenizer(zoo, case)) == {"batch_decode_equals_single"}
    finally:
        tok.__class__ = V4Decode.__bases__[0]


def test_a_component_the_reader_lacks_leaves_the_file_references_not_checked_naming_it(tmp_path):
    """The reader refuses what it does not implement (here a Precompiled normalizer): every reference
    that reads the files is `not checked` with the component named - never a pass, never the library."""
    import json
    import shutil

    zoo, case = _Zoo(), cases.tokenizers()[0]
    for f in (MODELS_DIR / cases.TARGET).iterdir():
        if f.name.startswith("tokenizer"):
            shutil.copy(f, tmp_path / f.name)
    data = json.loads((tmp_path / "tokenizer.json").read_text())
    data["normalizer"] = {"type": "Precompiled", "precompiled_charsmap": ""}
    (tmp_path / "tokenizer.json").write_text(json.dumps(data))
    zoo.checkpoints.directory = lambda name: tmp_path
    obs = text.tokenizer(zoo, case)
    for name in (*text.LIBRARY_REFERENCES, "round_trip_lossless", "clean_up_as_specified", "padding_as_specified"):
        note = obs.notes[name]
        assert (note.status, note.category) == ("skipped", "not-checked") and "Precompiled" in note.detail, name
