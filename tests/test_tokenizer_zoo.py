"""The tokenizer zoo (harness/zoo/tokzoo.py): a deterministic build equal to the committed
files, the manifest's hashes, the SentencePiece prefix-space contract (harness/engine/spm_contract.py)
read against the harness's own reading of the files (harness/engine/bpe.py), the contract's power to
see the legacy prefix space, and the probes that tell the faults of the pipeline's load apart."""

from __future__ import annotations

import json

import pytest
from tokenizers import Tokenizer

from harness import cases
from harness.designs import tokenizer_zoo
from harness.engine import spm_contract
from harness.engine.detokenize import Oracle
from harness.zoo import build, load, tokzoo
from harness.zoo.checkpoint import fingerprint

SPM = load.MODELS_DIR / "tok-spm"


def spm_texts() -> dict[str, str]:
    oracle = Oracle.of(SPM)
    specials = [t.content for t in oracle.reader.added.values() if t.special]
    return tokenizer_zoo.texts("sentencepiece", specials, "<s>"), specials


def test_the_build_is_deterministic_and_equals_the_committed_files(tmp_path):
    """Training again on the committed corpus gives the committed files, byte for byte."""
    entries = tokzoo.build_all(build.CORPUS_PATH.read_text(), models_dir=tmp_path)
    committed = load.manifest()["tokenizers"]
    assert sorted(entries) == sorted(t.name for t in tokzoo.TOKENIZERS) == sorted(committed)
    for name, entry in entries.items():
        assert entry["files"] == committed[name]["files"] == fingerprint(load.MODELS_DIR / name), name
        assert entry["vocab_size"] <= 512, name  # llama-target's weights serve it
        assert entry["bytes"] < 100_000, name


@pytest.mark.parametrize("name", [t.name for t in tokzoo.TOKENIZERS])
def test_each_tokenizer_directory_matches_the_manifest(name):
    directory = load.check_tokenizer(name)
    files = ["merges.txt", "vocab.json"] if tokzoo.BY_NAME[name].family == "slow-bpe" else ["tokenizer.json"]
    assert sorted(p.name for p in directory.iterdir()) == sorted(["special_tokens_map.json", "tokenizer_config.json",
                                                                  *files])
    assert set(files) <= set(fingerprint(directory)), name  # the manifest's hash check covers the slow files


SLOW = load.MODELS_DIR / "tok-slow-bpe"


def test_the_slow_files_oracle_is_gpt2s_pipeline_read_from_the_two_files(tmp_path):
    """The reader builds GPT-2's pipeline from vocab.json + merges.txt (bpe.py `gpt2_spec`): the same encode as
    the `tokenizers` library's pipeline trained for the fixture, the special token whole, the merges the
    file holds (not ones derived from the vocabulary), and a config's add_prefix_space."""
    oracle = Oracle.of(SLOW)
    trained = tokzoo.train_slow_bpe(build.CORPUS_PATH.read_text())
    for text in ("Hello world, the cat sat.", "<|endoftext|> Hello", "a   b\t\tc\n\n d  "):
        assert oracle.encode(text)["ids"] == trained.encode(text).ids, text
    assert oracle.encode("x<|endoftext|>y")["tokens"][1] == "<|endoftext|>"
    assert oracle.encode("Hello")["tokens"][0] == "H"  # the format's default: no prefix space
    for name in ("vocab.json", "special_tokens_map.json"):
        (tmp_path / name).write_bytes((SLOW / name).read_bytes())
    config = json.loads((SLOW / "tokenizer_config.json").read_text())
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({**config, "add_prefix_space": True}))
    lines = (SLOW / "merges.txt").read_text().splitlines()
    (tmp_path / "merges.txt").write_text("\n".join(lines) + "\n")
    assert Oracle.of(tmp_path).encode("Hello")["tokens"][0].startswith("\u0120")
    (tmp_path / "merges.txt").write_text("\n".join(lines[:3]) + "\n")  # the header and two merges
    assert Oracle.of(tmp_path).encode(" the")["tokens"] == ["\u0120t", "he"]  # the file's merges, not the vocabulary's
    assert oracle.encode(" the")["tokens"] == ["\u0120the"]


def test_the_prefix_space_contract_is_the_pipelines_own_behaviour():
    """The contract, computed from the text alone, equals what the `tokenizers` library does with
    tok-spm's tokenizer.json on every text of the design (pieces, and decode with and without the
    special tokens)."""
    oracle = Oracle.of(SPM)
    texts, specials = spm_texts()
    for key, text in texts.items():
        plain = oracle.encode(text, add_special_tokens=False)
        assert spm_contract.pieces_text(plain["tokens"]) == spm_contract.expected_pieces(text, specials), key
        ids = oracle.encode(text)["ids"]
        for skip in (False, True):
            assert oracle.decode(ids, skip) == spm_contract.expected_decode(text, specials, skip, "<s>"), (key, skip)


def test_the_contract_sees_the_legacy_prefix_space():
    """The same tokenizer with prepend_scheme "always" (legacy=True's pre-tokenizer) breaks the
    contract on a text whose special token is followed by a word: a prefix space after it."""
    data = json.loads((SPM / "tokenizer.json").read_text())
    data["pre_tokenizer"]["prepend_scheme"] = "always"
    legacy = Tokenizer.from_str(json.dumps(data))
    texts, specials = spm_texts()
    text = texts["special-start-nospace"]
    tokens = legacy.encode(text, add_special_tokens=False).tokens
    assert spm_contract.pieces_text(tokens) != spm_contract.expected_pieces(text, specials)


def test_the_incremental_decode_joins_to_the_decode():
    """DecodeStream's pieces (the streaming oracle) joined equal the one-shot decode, per family."""
    for spec in tokzoo.TOKENIZERS:
        oracle = Oracle.of(load.MODELS_DIR / spec.name)
        for text in ("caf\u00e9 \u65e5\u672c\u8a9e \U0001f917", " two  spaces\n\tx", "Stra\u00dfe \u2211"):
            ids = oracle.encode(text)["ids"]
            assert "".join(oracle.stream(ids, True)) == oracle.decode(ids, True), (spec.name, text)


def test_the_case_tables_cover_every_tokenizer_and_template():
    assert [c.model for c in cases.zoo_tokenizers()] == [t.name for t in tokzoo.TOKENIZERS]
    for case in cases.zoo_chats():
        template = case.param("template")
        assert case.model in tokzoo.BY_NAME and tokenizer_zoo.template_file(template).is_file()
        assert template in tokenizer_zoo.HEADERS


def test_the_padding_rule_puts_the_pads_on_the_side_asked_and_masks_them():
    from harness.engine.padding import pad_rows

    assert pad_rows([[5], [6, 7, 8]], 0, "left") == ([[0, 0, 5], [6, 7, 8]], [[0, 0, 1], [1, 1, 1]])
    assert pad_rows([[5], [6, 7, 8]], 0, "right") == ([[5, 0, 0], [6, 7, 8]], [[1, 0, 0], [1, 1, 1]])
    with pytest.raises(ValueError, match="padding side"):
        pad_rows([[5]], 0, "middle")


def _padding_reference(name: str, fault: str | None = None):
    from transformers import AutoTokenizer

    from harness.designs.text import padding
    from harness.faults.catalogue import inject
    from harness.schema import Observation

    directory = load.MODELS_DIR / name
    tok = AutoTokenizer.from_pretrained(str(directory))
    undo = inject(fault) if fault else None
    try:
        obs = Observation()
        padding(obs, tok, directory, Oracle.of(directory))
    finally:
        if undo:
            undo()
    return obs


@pytest.mark.parametrize("name", [t.name for t in tokzoo.TOKENIZERS])
def test_a_batch_padded_by_the_tokenizer_equals_the_rule_on_the_library_s_encode(name):
    obs = _padding_reference(name)
    ref = obs.references["padding_as_specified"]
    assert ref.observed.value == ref.expected.value
    left, right = ref.expected.value["left"], ref.expected.value["right"]
    assert left["attention_mask"][0][0] == 0 and right["attention_mask"][0][-1] == 0  # the short prompt is padded


def test_a_tokenizer_without_a_pad_token_is_recorded_refusing_then_padded_with_eos():
    padded = _padding_reference("tok-spm").fields["padded"].value
    assert padded["pad_token"] is None and "error" in padded["no_pad_token"] and padded["pad_token_set"] == "</s>"


@pytest.mark.parametrize("name", ["tok-spm", "tok-added"])
def test_padding_side_ignored_at_call_time_is_seen(name):
    """padding-side-kwarg-ignored (PR #33385's class): the side asked that differs from the tokenizer's own."""
    pytest.importorskip("transformers.tokenization_utils_tokenizers", reason="the fault edits v5's tokenizers backend")
    ref = _padding_reference(name, "padding-side-kwarg-ignored").references["padding_as_specified"]
    assert ref.observed.value != ref.expected.value


def test_the_probes_tell_apart_what_the_recorded_texts_cannot():
    """With a 512-id vocabulary no merge crosses the split's cuts on the recorded texts: the split read
    as a literal (llama3-split-regex-lost) changes no id of them, but it does on `glued-contractions`;
    NFKC in front (nfkc-normalizer-slipped-in) rewrites `compat-chars` on every tokenizer."""
    from harness.designs import text as text_design
    from harness.engine.bpe import Reader

    data = json.loads((load.MODELS_DIR / "tok-bytelevel" / "tokenizer.json").read_text())
    lost = json.loads(json.dumps(data))
    lost["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {"String": data["pre_tokenizer"]["pretokenizers"][0]
                                                            ["pattern"]["Regex"]}
    nfkc = {**data, "normalizer": {"type": "NFKC"}}
    clean, split_lost, normalized = Reader.from_spec(data), Reader.from_spec(lost), Reader.from_spec(nfkc)
    recorded = tokenizer_zoo.texts("bytelevel", ["<|begin_of_text|>"], "<|begin_of_text|>")
    assert all(clean.encode(t).ids == split_lost.encode(t).ids for t in recorded.values())
    probes = text_design.PROBES
    assert clean.encode(probes["glued-contractions"]).ids != split_lost.encode(probes["glued-contractions"]).ids
    assert clean.encode(probes["compat-chars"]).ids != normalized.encode(probes["compat-chars"]).ids
    assert normalized.decode(normalized.encode(probes["compat-chars"], False).ids) != probes["compat-chars"]
