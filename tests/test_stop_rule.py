"""The harness's stop rule (harness/engine/stopping.py) on streams built here, where the answer is
derivable by hand (an eos id planted at step i, a stop word ending at token j, a length limit),
its streaming bound, the independent decode (harness/engine/detokenize.py) against the zoo
tokenizer; and the stopping / streaming faults caught on an EMPTY store - a first run with no
baseline record, where only the in-run oracles can see them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.engine import stopping
from harness.engine.detokenize import Decoder
from harness.engine.stopping import StopRule, late_pieces, least_pieces, prefix_texts

ROOT = Path(__file__).resolve().parents[1]
WORDS = ["P", " one", " two", " three", " four", " five", " six", " seven", " eight"]  # token id i -> WORDS[i]


def decode(ids: list[int]) -> str:
    return "".join(WORDS[i] for i in ids)


def stream_with(token: int, at: int, length: int = 8, filler: int = 1) -> list[int]:
    """A stream of `length` ids, `filler` everywhere except `token` at index `at`."""
    return [token if i == at else filler for i in range(length)]


@pytest.mark.parametrize("at", range(6))
def test_an_eos_id_at_index_i_stops_after_i_plus_one_tokens(at):
    rule = StopRule.of(prompt_len=1, eos=[7], max_new_tokens=6)
    stream = stream_with(7, at)
    got = rule.stop(stream, prefix_texts(decode, [0], stream))
    assert got == {"new_tokens": at + 1, "by": ["eos"] + (["max_length"] if at + 1 == 6 else [])}


@pytest.mark.parametrize(("min_new", "at"), [(3, 1), (3, 2), (3, 4), (1, 0)])
def test_min_new_tokens_lets_an_eos_stop_only_from_that_many_tokens(min_new, at):
    rule = StopRule.of(prompt_len=1, eos=[7], max_new_tokens=8, min_new_tokens=min_new)
    stream = [7 if i in (at, 5) else 1 for i in range(8)]  # the eos id at `at`, and again at index 5
    first = at if at + 1 >= min_new else 5
    assert rule.stop(stream, prefix_texts(decode, [0], stream))["new_tokens"] == first + 1


@pytest.mark.parametrize(("prompt_len", "max_new_tokens", "max_length", "budget"),
                         [(4, 5, None, 5), (4, None, 9, 5), (4, 5, 6, 5), (10, None, 12, 2)])
def test_the_length_limit_is_max_new_tokens_else_max_length_minus_the_prompt(prompt_len, max_new_tokens, max_length,
                                                                              budget):
    rule = StopRule.of(prompt_len, max_new_tokens=max_new_tokens, max_length=max_length)
    stream = list(range(1, 9))
    assert rule.stop(stream, prefix_texts(decode, [0] * prompt_len, stream)) == \
        {"new_tokens": budget, "by": ["max_length"]}


@pytest.mark.parametrize("word", range(2, 7))
def test_a_stop_string_stops_at_the_token_that_completes_it(word):
    stream = list(range(1, 9))
    stop = WORDS[word - 1][-2:] + WORDS[word][:3]  # spans the end of token word-1 and the start of token word
    rule = StopRule.of(prompt_len=1, stop_strings=[stop], max_new_tokens=8)
    assert rule.stop(stream, prefix_texts(decode, [0], stream)) == {"new_tokens": word, "by": ["stop_string"]}


def test_a_stop_string_already_in_the_prompt_does_not_stop():
    rule = StopRule.of(prompt_len=2, stop_strings=["one"], max_new_tokens=3)
    stream = [2, 3, 4]
    assert rule.stop(stream, prefix_texts(decode, [0, 1], stream))["by"] == ["max_length"]


@pytest.mark.parametrize(("before", "after", "stop", "matches"), [
    ("P a", "P a bc", "bc", True), ("P a b", "P a bc", "bc", True), ("P a bc", "P a bcd", "bc", False),
    ("P a", "P a bcd", "bc", True), ("xbc", "xbc a", "bc", False)])
def test_a_stop_string_matches_only_when_it_overlaps_the_last_token(before, after, stop, matches):
    assert stopping.ends_in_last_token(before, after, stop) is matches


@pytest.mark.parametrize(("first", "second"), [(1, 4), (4, 1), (2, 2)])
def test_a_batch_is_as_long_as_its_last_row_and_an_earlier_row_is_padded(first, second):
    rule = StopRule.of(prompt_len=1, eos=[7], max_new_tokens=8)
    streams = [stream_with(7, first), stream_with(7, second)]
    want = stopping.rows(rule, streams, [prefix_texts(decode, [0], s) for s in streams], pad=0)
    length = max(first, second) + 1
    assert want["length"] == length
    for row, at in zip(want["rows"], (first, second), strict=True):
        assert row == [1] * at + [7] + [0] * (length - at - 1)


def test_a_stream_that_ends_before_any_stop_is_cut_where_it_ends():
    rule = StopRule.of(prompt_len=1, eos=[7], max_new_tokens=8)
    want = stopping.rows(rule, [[1, 2, 3]], [prefix_texts(decode, [0], [1, 2, 3])], pad=0)
    assert want["stops"] == [{"new_tokens": None, "by": []}] and want["rows"] == [[1, 2, 3]]


# ----------------------------------------------------------------------------------------------
# streaming


def test_every_new_word_needs_a_piece_once_the_next_space_comes():
    new = [2, 3, 4, 5, 6]  # " two three four five six": each token's leading space completes what came before
    assert least_pieces(prefix_texts(decode, [], new)) == len(new)
    assert least_pieces(prefix_texts(decode, [0], new), prompt_streamed=True) == len(new)  # "P": no word of its own
    assert least_pieces(prefix_texts(decode, [0, 1], new), prompt_streamed=True) == len(new) + 1  # "P one": one more
    assert least_pieces([""] + ["nospace" * k for k in range(1, 6)]) == 0  # no word is ever complete


@pytest.mark.parametrize("window", [1, 2, 3, 5])
def test_a_put_of_several_tokens_is_one_piece(window):
    new = list(range(1, 9))
    assert least_pieces(prefix_texts(decode, [], new), window=window) == -(-len(new) // window)  # ceil


def test_the_pieces_of_text_a_streamer_handed_out():
    from harness.designs.stopping import text_pieces

    assert text_pieces(["a ", "", "b", "\n"], "TextStreamer") == 2  # its closing newline is not text
    assert text_pieces(["a ", "", "b", "\n"], "TextIteratorStreamer") == 3


def test_the_independent_decode_reads_the_zoo_tokenizer_json_as_transformers_decodes_it():
    from transformers import AutoTokenizer

    directory = ROOT / "golden" / "models" / "llama-target"
    decoder = Decoder.of(directory)
    assert isinstance(decoder, Decoder)
    library = AutoTokenizer.from_pretrained(str(directory))
    ids = library.encode("Once upon a time, the fox said: \"héllo\" </s>")
    assert decoder(ids) == library.decode(ids)


def test_no_independent_decode_without_a_tokenizer_json(tmp_path):
    assert "no tokenizer.json" in Decoder.of(tmp_path)
    (tmp_path / "tokenizer.json").write_text("{}")
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"clean_up_tokenization_spaces": True}))
    assert "clean_up_tokenization_spaces" in Decoder.of(tmp_path)


# ----------------------------------------------------------------------------------------------
# the faults on an empty store (a first run: no baseline, so only the in-run oracles can catch)

FIRST_RUN_CATCHES = {  # fault -> (case glob, the oracle field that must regress)
    "stopping-criteria-one-step-late": ("llama-target.stop.*", "stops_as_specified"),
    "streamer-holds-text-until-end": ("llama-target.stream.plain", "pieces_as_formed"),
    "eos-list-first-id-only": ("llama-target.stop.eos-list", "stops_as_specified"),
    "min-new-tokens-released-late": ("llama-target.stop.min-new-tokens-release", "stops_as_specified"),
    "streamer-skip-prompt-streams-prompt": ("llama-target.stream.plain", "streamed_equals_decode"),
    "assisted-stream-drops-bonus-token": ("llama-target.stream.assisted", "streamed_equals_decode"),
    "stop-string-single-char-raises": ("llama-target.stop.stop-string-never", "stops_as_specified"),
}


def first_run(tmp_path: Path, case: str, fault: str | None) -> tuple[int, list[dict]]:
    """A non-strict run of the stopping suite's `case` against an empty store, with `fault`
    injected: (pytest's exit code, the run's outcomes)."""
    results = tmp_path / "results.json"
    cmd = [sys.executable, "-m", "pytest", str(ROOT / "suites" / "test_stopping.py"), "-p", "no:cacheprovider", "-q",
           "-n", "0", "--rootdir", str(ROOT), "--golden-dir", str(tmp_path / "store"), "--harness-results", str(results),
           "--harness-case", f"stopping:{case}"] + (["--inject-fault", fault] if fault else [])
    (tmp_path / "store").mkdir()
    env = {k: v for k, v in os.environ.items() if k != "CI"}  # CI would make the run strict: every field fails
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600, env=env, check=False)
    assert results.exists(), (proc.stdout + proc.stderr)[-2000:]
    return proc.returncode, json.loads(results.read_text())["outcomes"]


@pytest.mark.long
@pytest.mark.parametrize("fault", sorted(FIRST_RUN_CATCHES))
def test_a_stopping_or_streaming_fault_fails_a_first_run(tmp_path, fault):
    case, field = FIRST_RUN_CATCHES[fault]
    code, outcomes = first_run(tmp_path, case, fault)
    regressed = {o["field"] for o in outcomes if o["status"] == "regression"}
    assert code == 1 and field in regressed, (code, regressed)
    assert all(o["against"] == "reference" for o in outcomes if o["status"] == "regression")  # no baseline to see it


@pytest.mark.long
def test_a_first_run_without_a_fault_is_clean(tmp_path):
    code, outcomes = first_run(tmp_path, "llama-target.st*", None)
    assert code == 0, [o for o in outcomes if o["status"] == "regression"][:3]
    judged = {o["field"] for o in outcomes if o["against"] == "reference" and o["status"] == "pass"}
    assert {"stops_as_specified", "criteria_as_specified", "pad_fill_as_specified", "streamed_equals_decode",
            "pieces_as_formed"} <= judged


def test_a_piece_held_back_past_the_put_that_formed_it_is_late():
    """pieces_in_time's rule: after k new ids at least the text up to the last space of texts[k] is out.
    texts: "", "a", "a ", "a b", "a b " - the words are formed at puts 2 and 4."""
    texts = ["", "a", "a ", "a b", "a b "]
    assert late_pieces([(1, 0), (2, 2), (3, 2), (4, 4)], texts) == []  # each word out when formed
    assert late_pieces([(1, 1), (2, 3), (3, 3), (4, 4)], texts) == []  # earlier (letters at once) is fine
    late = late_pieces([(1, 0), (2, 0), (3, 2), (4, 2)], texts)  # one put late: the same pieces
    assert late == ["after 2 new ids: 0 characters handed out, 2 formed", "after 4 new ids: 2 characters handed out, 4 formed"]
