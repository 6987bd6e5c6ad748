"""The harness's own reader of tokenizer files (harness/engine/bpe.py), the text suite's oracle,
against the `tokenizers` library (this test may run that library: it is the test of the oracle, not
the oracle): every zoo tokenizer, and variants of them built for the real families' components
(Llama 3's ignore_merges, GPT-2's regex and trimmed offsets, SmolLM2's digits, RoBERTa's and BERT's
templates, Llama 2's Prepend + Replace normalizer, Metaspace schemes, byte_fallback off, the Unicode
normalizers, added-token flags), on a fixed text set and seeded random texts - ids, offsets, decode
and the incremental decode equal; and a component it lacks is named, never read as something else."""

from __future__ import annotations

import copy
import json
import random

import pytest
from tokenizers import Tokenizer
from tokenizers.decoders import DecodeStream

from harness.designs import text as text_design
from harness.designs import tokenizer_zoo
from harness.engine.bpe import Reader, Unsupported
from harness.engine.detokenize import NoOracle, Oracle
from harness.zoo import tokzoo
from harness.zoo.specs import MODELS_DIR

ZOO = ["llama-target", *(t.name for t in tokzoo.TOKENIZERS)]
BYTE_LEVEL = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}


def spec(name: str) -> dict:
    return json.loads((MODELS_DIR / name / "tokenizer.json").read_text(encoding="utf-8"))


def variant(name: str, model: dict | None = None, **stages) -> dict:
    data = copy.deepcopy(spec(name))
    data["model"].update(model or {})
    data.update(stages)
    return data


def _added_flags() -> dict:
    data = spec("tok-added")
    for t in data["added_tokens"]:
        if t["content"] == "<think>":
            t["single_word"] = True
        if t["content"] == "[NAME]":
            t["lstrip"] = t["rstrip"] = True
    return data


# the real families' components on the zoo's vocabularies
VARIANTS = {
    "llama3-ignore-merges": lambda: variant("tok-bytelevel", {"ignore_merges": True}),
    "llama3-split-lost": lambda: variant("tok-bytelevel", pre_tokenizer={**BYTE_LEVEL, "use_regex": False}),
    "gpt2-prefix-trim": lambda: variant("llama-target", pre_tokenizer={**BYTE_LEVEL, "add_prefix_space": True},
                                        post_processor={**BYTE_LEVEL, "add_prefix_space": True}),
    "smollm2-digits": lambda: variant("llama-target", pre_tokenizer={"type": "Sequence", "pretokenizers": [
        {"type": "Digits", "individual_digits": True}, BYTE_LEVEL]}),
    "falcon-punctuation": lambda: variant("llama-target", pre_tokenizer={"type": "Sequence", "pretokenizers": [
        {"type": "Punctuation", "behavior": "Contiguous"}, BYTE_LEVEL, {"type": "Digits", "individual_digits": False}]}),
    "roberta": lambda: variant("llama-target", pre_tokenizer={**BYTE_LEVEL, "add_prefix_space": True},
                               post_processor={"type": "RobertaProcessing", "sep": ["</s>", 2], "cls": ["<s>", 1],
                                               "trim_offsets": True, "add_prefix_space": True}),
    "bert-template": lambda: variant("llama-target", post_processor={"type": "BertProcessing", "sep": ["</s>", 2],
                                                                     "cls": ["<s>", 1]}),
    "nfkc": lambda: variant("tok-bytelevel", normalizer={"type": "NFKC"}),
    "nfd-strip-accents-lower": lambda: variant("tok-bytelevel", normalizer={"type": "Sequence", "normalizers": [
        {"type": "NFD"}, {"type": "StripAccents"}, {"type": "Lowercase"}]}),
    "strip-replace": lambda: variant("tok-bytelevel", normalizer={"type": "Sequence", "normalizers": [
        {"type": "Strip", "strip_left": True, "strip_right": True},
        {"type": "Replace", "pattern": {"Regex": "\\s+"}, "content": " "}]}),
    "rstrip-only": lambda: variant("tok-bytelevel", normalizer={"type": "Strip", "strip_left": False,
                                                                "strip_right": True}),
    "added-nfkc": lambda: variant("tok-added", normalizer={"type": "NFKC"}),
    "added-lowercase": lambda: variant("tok-added", normalizer={"type": "Lowercase"}),
    "added-single-word-strip": _added_flags,
    "llama2-legacy": lambda: variant("tok-spm", pre_tokenizer=None, normalizer={"type": "Sequence", "normalizers": [
        {"type": "Prepend", "prepend": "\u2581"}, {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]}),
    "metaspace-always-split": lambda: variant(
        "tok-spm", pre_tokenizer={"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True},
        decoder={"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True}),
    "spm-unk-fused": lambda: variant("tok-spm", {"byte_fallback": False}),
    "spm-unk-unfused": lambda: variant("tok-spm", {"byte_fallback": False, "fuse_unk": False}),
    "whitespace-no-unk": lambda: variant("llama-target", pre_tokenizer={"type": "Sequence", "pretokenizers": [
        {"type": "WhitespaceSplit"}, {"type": "BertPreTokenizer"}, {"type": "Whitespace"}]},
        decoder={"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"Regex": "\u0120+"}, "content": " "},
                                                  {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 2,
                                                                     "stop": 0}]}),
    "split-behaviours": lambda: variant("tok-bytelevel", pre_tokenizer={"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": "\\p{L}+"}, "behavior": "MergedWithPrevious", "invert": True},
        {"type": "Split", "pattern": {"String": " "}, "behavior": "MergedWithNext", "invert": False},
        {"type": "Split", "pattern": {"Regex": "[aeiou]"}, "behavior": "Contiguous", "invert": False},
        {"type": "CharDelimiterSplit", "delimiter": "x"}, {**BYTE_LEVEL, "use_regex": False}]}),
}

FIXED_TEXTS = [
    "   ", "\t \n", *text_design.TEXTS.values(), *text_design.PROBES.values(),
    *tokenizer_zoo.texts("added", ["<s>", "</s>"], "<s>").values(),
    "<|begin_of_text|>Hi<|eot_id|> [INST] x [/INST]<s>y</s>", "x  <mask>y <tool_call>\n z", "IT'S we'LL 1234567",
    "e\u0301 a\u0323\u0301 \ud55c\uad6d\uc5b4 \u1100\u1161\u11a8 \u0130 \u03a3 \u01c4", "\U0001f917\U0001f917 \x00\x7f\u200b",
]
PIECES = list("abcdeiouxyzABCXYZ   \t\n\n\r.,;:!?'\"()-_0123456789") + [
    "'s", "'LL", "<mask>", "<think>", "[NAME]", "<tool_call>", "</tool_call>", "<|im_start|>", "<s>", "</s>",
    "[INST]", "<|begin_of_text|>", "\u00e9", "e\u0301", "\u65e5\u672c", "\U0001f917", "\U0001d518", "\ufb01",
    "\u2460", "\u00b2", "\u00a0", "\u2003", "\u216b", "\u0130", "\u00df", "\u0301", "\u0323", "\ud55c",
    "\u1100\u1161\u11a8", "\u200b", "\uff48", "\u2026", "   ", "1234567"]


def random_texts(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choice(PIECES) for _ in range(rng.randint(1, 24))) for _ in range(n)]


def encodings_differ(lib: Tokenizer, reader: Reader, texts: list[str]) -> list[tuple[str, bool]]:
    bad = []
    for text in texts:
        for add in (False, True):
            want = lib.encode(text, add_special_tokens=add)
            got = reader.encode(text, add)
            if (list(want.ids), [list(o) for o in want.offsets]) != (got.ids, [list(o) for o in got.offsets]):
                bad.append((text, add))
    return bad


def decodes_differ(lib: Tokenizer, reader: Reader, texts: list[str], stream: bool) -> list[tuple[str, bool]]:
    bad = []
    for text in texts:
        ids = lib.encode(text).ids
        for skip in (False, True):
            if lib.decode(ids, skip_special_tokens=skip) != reader.decode(ids, skip):
                bad.append((text, skip))
            if stream:
                steps = DecodeStream(skip_special_tokens=skip)
                if [steps.step(lib, i) or "" for i in ids] != reader.stream(ids, skip):
                    bad.append((text, skip))
    return bad


@pytest.mark.parametrize("name", ZOO)
def test_the_reader_encodes_and_decodes_every_zoo_tokenizer_as_the_library_does(name):
    directory = MODELS_DIR / name
    oracle = Oracle.of(directory)
    if (directory / "tokenizer.json").is_file():
        lib = Tokenizer.from_file(str(directory / "tokenizer.json"))
    else:  # GPT-2's slow files: the library's reading of the same two files with the same settings
        lib = Tokenizer.from_str(json.dumps(_library_gpt2(directory)))
    texts = FIXED_TEXTS + random_texts(60, seed=len(name))
    assert encodings_differ(lib, oracle.reader, texts) == []
    assert decodes_differ(lib, oracle.reader, texts, stream=True) == []
    for text in FIXED_TEXTS[:6]:  # tokens as the vocabulary names them
        ids = lib.encode(text).ids
        assert oracle.encode(text)["tokens"] == [lib.id_to_token(i) for i in ids]


def _library_gpt2(directory):
    from tokenizers import AddedToken, decoders, models, pre_tokenizers, processors

    tok = Tokenizer(models.BPE.from_file(str(directory / "vocab.json"), str(directory / "merges.txt")))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.add_special_tokens([AddedToken(tokzoo.GPT2_SPECIAL, special=True, normalized=False)])
    return json.loads(tok.to_str())


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_the_reader_runs_each_family_component_as_the_library_does(name):
    data = VARIANTS[name]()
    lib, reader = Tokenizer.from_str(json.dumps(data)), Reader.from_spec(data)
    texts = FIXED_TEXTS + random_texts(40, seed=sum(map(ord, name)))
    assert encodings_differ(lib, reader, texts) == []
    assert decodes_differ(lib, reader, texts, stream=False) == []


def test_a_subword_prefix_and_end_of_word_suffix_merge_as_the_library_does():
    from tokenizers import decoders, models, pre_tokenizers, trainers

    from harness.zoo import build

    lib = Tokenizer(models.BPE(continuing_subword_prefix="##", end_of_word_suffix="</w>", unk_token="[UNK]"))
    lib.pre_tokenizer = pre_tokenizers.Whitespace()
    lib.decoder = decoders.BPEDecoder(suffix="</w>")
    lib.train_from_iterator(build.CORPUS_PATH.read_text().splitlines()[:400], trainers.BpeTrainer(
        vocab_size=200, special_tokens=["[UNK]"], continuing_subword_prefix="##", end_of_word_suffix="</w>",
        show_progress=False))
    reader = Reader.from_spec(json.loads(lib.to_str()))
    texts = FIXED_TEXTS[:12] + random_texts(30, seed=3)
    assert encodings_differ(lib, reader, texts) == []
    assert decodes_differ(lib, reader, texts, stream=False) == []


def test_a_component_the_reader_lacks_is_named_and_nothing_is_judged_by_a_guess(tmp_path):
    for stage, value, named in (("normalizer", {"type": "Precompiled", "precompiled_charsmap": ""}, "Precompiled"),
                                ("pre_tokenizer", {"type": "UnicodeScripts"}, "UnicodeScripts"),
                                ("decoder", {"type": "WordPiece", "prefix": "##", "cleanup": True}, "WordPiece"),
                                ("model", {"type": "Unigram", "vocab": []}, "Unigram")):
        data = {**spec("tok-spm"), stage: value}
        with pytest.raises(Unsupported, match=named):
            Reader.from_spec(data)
        (tmp_path / "tokenizer.json").write_text(json.dumps(data))
        with pytest.raises(NoOracle, match=named) as caught:
            Oracle.of(tmp_path)
        assert caught.value.category == "not-checked"
    (tmp_path / "tokenizer.json").unlink()
    with pytest.raises(NoOracle) as caught:
        Oracle.of(tmp_path)
    assert caught.value.category == "not-checkable"


def test_the_round_trip_promise_is_read_from_the_files():
    assert Reader.from_spec(spec("llama-target")).round_trip_promise() == ""
    assert Reader.from_spec(spec("tok-bytelevel")).round_trip_promise() == ""
    assert "NFC" in Reader.from_spec(spec("tok-added")).round_trip_promise()  # a normalizer may rewrite
    assert "not byte-level" in Reader.from_spec(spec("tok-spm")).round_trip_promise()
    no_norm = variant("tok-added", normalizer=None)
    assert "<mask>" in Reader.from_spec(no_norm).round_trip_promise()  # an lstrip token eats the space before it
    short = variant("llama-target")
    del short["model"]["vocab"]["\u0120"]
    short["model"]["merges"] = [m for m in short["model"]["merges"] if "\u0120" not in "".join(m)]
    assert "byte symbols" in Reader.from_spec(short).round_trip_promise()


def test_the_reader_is_fast_enough_for_a_run():
    """Reading a file and encoding the suite's texts costs milliseconds (Llama 3 sized files: a
    Python BPE of ~170k characters a second, measured beside the library's ~2M)."""
    import time

    start = time.perf_counter()
    reader = Reader.of(MODELS_DIR / "tok-bytelevel")
    for text in FIXED_TEXTS:
        reader.encode(text)
    assert time.perf_counter() - start < 0.5
