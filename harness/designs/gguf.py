"""The GGUF load contract, per version (suites/test_gguf.py; table: harness/cases/gguf.py; the load:
harness/subjects/hf_gguf.py): SmolLM2-135M-Instruct's Q4_1 GGUF (harness/zoo/real.py) loaded by
transformers' `from_pretrained(folder, gguf_file=name)` - model and tokenizer - judged against the
harness's own conversion of the same file (harness/zoo/gguf_convert.py).

The oracle never runs transformers' GGUF code, nor transformers: the conversion reads the file with
the `gguf` library, dequantizes, renames to HF Llama's names, un-permutes q / k (the formula in its
docstring) and writes config.json, model.safetensors and a tokenizer.json built from the metadata;
its tokenizer is run by the harness's own reader (harness/engine/bpe.py through detokenize.Oracle:
neither transformers nor the `tokenizers` library), its chat template rendered by jinja2 here
(`render`: the chat-template convention - sandboxed, trim_blocks, lstrip_blocks, loopcontrols), its
weights run by the reference engine (harness/engine/model.py). A load that raises is a finding - the
error field and `loads_as_converted` - never a skip; what needs the object that did not load is then
noted as not applicable.

  setup            exact   the file (name, sha256), the `real` extra's versions (gguf, accelerate)
                           and the converter's version - presentation: a moved version is `changed`
  load_error       exact   transformers' exception per load ({"model", "tokenizer"}, None: loaded),
                           an outcome field: loading before and raising now is broken, the reverse fixed
 config, tensors, tokenizer and chat name their references below as oracles (tokenizer: specials, ids,
 decode): a difference from the baseline record whose reference fails now and passed there is broken,
 one whose reference passes now and failed there fixed - one finding with that reference, not two
  config           exact   the architecture fields of the config transformers built from the metadata
                           (hf_gguf.ARCH_KEYS; floats as the float32 the file stores)
  tensors          exact   the state dict transformers built, compactly: the tensor count, the sha256
                           of its "name shape" lines, and the tensors not as converted (folded names:
                           missing, unexpected, another shape, values beyond the tolerance); the dtypes
                           are shown beside it, never compared (the run's dtype: an fp32 record against
                           a bf16 run differed in every line)
  weights_digest   exact   sha256 of every tensor's bytes, in name order - presentation: values moved
                           within the tolerance are `changed`; the tolerance is tensors_as_converted's
  tokenizer        exact   the ids of each text of TEXTS (unicode, digits, code, whitespace, special
                           tokens inline, every control token of the file), their decode with and
                           without skip_special_tokens, the named special ids, the ids it lists as
                           special, its length, and the type of each stage of its pipeline
  chat             exact   sha256 of its chat template, each conversation of CHATS rendered and
                           tokenized by apply_chat_template
  generate_error   exact   generate()'s exception on the GGUF model, or None (an outcome field)
  tokens           tokens  greedy case.new_tokens (16) after the "question" conversation (transformers'
                           tokenizer and model end to end), with the engine's teacher-forced margins
  reply            exact   those tokens decoded (follows tokens)
 references, computed in the run against the conversion (the oracle; no transformers GGUF code):
  loads_as_converted    exact  both loads raise nothing (the conversion of the same file loads)
  config_as_converted   exact  `config` against the conversion's config.json (floats as float32)
  tensors_as_converted  exact  tensor by tensor against the conversion's model.safetensors: names
                               (none missing, none unexpected), shapes, and values - max |diff| within
                               eps(dtype) x the tensor's absmax (one rounding of the dequantized value;
                               a tensor from the wrong layer, rows not un-permuted, a head untied are
                               O(absmax) off); the worst diff beside it (observed extras)
  ids_as_converted      exact  each text's ids against the reader's encode of the conversion's tokenizer.json
  decode_as_converted   exact  the reader's ids of each text decoded by transformers (with and without
                               skip_special_tokens) against the reader's decode
  specials_as_converted exact  bos / eos / unk / pad ids and the vocabulary's size against the
                               conversion's tokenizer_config (the metadata's *_token_id) and tokenizer.json
  chat_as_converted     exact  the template's sha256 against the metadata's tokenizer.chat_template
                               (the conversion keeps it verbatim), each conversation's rendered text
                               against `render` of that template, its ids against the reader's encode of
                               that text (no special tokens added: the template writes them)
  logits_as_converted   tensor transformers' logits over its own "question" ids and its greedy tokens against the engine's
                               over the same ids, on the converted weights (top TOP_K columns; in
                               bf16 the per-element rounding rule scaled by the converted model's
                               rounding witness, `witness`: ~12 units, the library's bf16 route ~21
                               from the engine's)
  tokens_as_converted   tokens transformers' greedy tokens (its tokenizer, its model) against the
                               engine's greedy decode of the reader's ids of the rendered conversation
                               (tie-aware): the converted checkpoint as the reference, end to end
  steps_as_converted    tokens each of those tokens against the engine's choice after transformers'
                               own prefix (teacher-forced: the weights alone, every step judged)
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from harness.schema import Case, Observation
from harness.subjects import engine, fold_keys
from harness.subjects import hf_gguf as subject
from harness.subjects.hf import TORCH_DTYPES
from harness.subjects.hf_cache import narrowed

CONVERTED_DTYPE = {"fp32": "float32", "bf16": "bfloat16"}  # the conversion's dtypes (gguf_convert.DTYPES)
TEXTS = {
    "prose": "The capital of France is Paris. It's home to 2,148,000 people!",
    "digits": "In 2024, 42 cats ate 1999 fish: 3.14159 x 1e-5 = 0.0000314159; call 555-0123 or +1 (800) 12.",
    "unicode": "Café déjà vu — naïve façade; Ünïcödé Straße, 日本語のテキスト, 한국어, ☕😀👍🏽 and a zero\u200bwidth space.",
    "code": "def add(a: int, b: int) -> int:\n    \"\"\"Sum.\"\"\"\n    return a + b  # 1 + 1 == 2\n\nprint(add(40, 2))\n",
    "whitespace": "  two leading,  doubled   spaces\tand\ttabs\r\nCRLF\n\n\nblank lines, trailing  ",
    "specials": "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nhello<|im_end|><|endoftext|>",
    "specials-inline": "a<|im_end|>b <|im_start|> c<|endoftext|>d",
}
CHATS = {
    "question": ([{"role": "user", "content": "What is the capital of France?"}], True),
    "turns": ([{"role": "system", "content": "You answer in one word."},
               {"role": "user", "content": "Capital of Japan? 日本"},
               {"role": "assistant", "content": "Tokyo."},
               {"role": "user", "content": "And of Italy?"}], True),
    "no-generation-prompt": ([{"role": "user", "content": "Hi!"}, {"role": "assistant", "content": "Hello."}], False),
}
PROMPT = "question"


def f32(value: Any) -> Any:
    """A float as the shortest decimal of its float32 (GGUF stores float32: 1e-05 and
    9.999999747378752e-06 are one value); anything else as it is."""
    import numpy as np

    if isinstance(value, float):
        return float(str(np.float32(value)))
    return value


def sha256(text: str | None) -> str | None:
    return hashlib.sha256(text.encode("utf-8")).hexdigest() if text is not None else None


def render(template: str, messages: list[dict[str, str]], generation_prompt: bool, **variables: Any) -> str:
    """The chat template rendered by the harness: jinja2's sandbox with the chat-template convention
    (trim_blocks, lstrip_blocks, loop controls, `raise_exception`), never transformers'."""
    import jinja2
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> None:
        raise jinja2.exceptions.TemplateError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.globals["raise_exception"] = raise_exception
    return env.from_string(template).render(messages=messages, add_generation_prompt=generation_prompt, **variables)


def texts(oracle: Any) -> dict[str, str]:
    """TEXTS, and "controls": every special (CONTROL) token of the file, space-separated, as the
    conversion's tokenizer.json lists them."""
    controls = sorted((t for t in oracle.reader.added.values() if t.special), key=lambda t: t.id)
    return {**TEXTS, "controls": " ".join(t.content for t in controls)}


def tolerance(expected: torch.Tensor) -> float:
    """eps(dtype) x the tensor's absmax: one rounding of a dequantized value in the load dtype."""
    return float(torch.finfo(expected.dtype).eps) * float(expected.float().abs().max()) if expected.numel() else 0.0


def tensor_diffs(theirs: dict[str, torch.Tensor], ours: dict[str, torch.Tensor]) -> dict[str, Any]:
    """Names missing / unexpected, shapes differing, values beyond `tolerance` (each a list of
    names), and the worst max |diff| with its tensor."""
    missing, unexpected = sorted(set(ours) - set(theirs)), sorted(set(theirs) - set(ours))
    shape, values, worst = [], [], (0.0, "")
    for name in sorted(set(ours) & set(theirs)):
        a, b = theirs[name], ours[name]
        if tuple(a.shape) != tuple(b.shape):
            shape.append(name)
            continue
        diff = float((a.float() - b.float()).abs().max()) if b.numel() else 0.0
        if not diff <= tolerance(b):  # NaN beyond too
            values.append(name)
        if not diff <= worst[0]:
            worst = (diff, name)
    return {"missing": missing, "unexpected": unexpected, "shape": shape, "values": values,
            "max_abs_diff": worst[0], "worst": worst[1]}


def layout(tensors: dict[str, torch.Tensor]) -> str:
    lines = "".join(f"{n} {list(t.shape)}\n" for n, t in sorted(tensors.items()))
    return hashlib.sha256(lines.encode()).hexdigest()


def weights_digest(tensors: dict[str, torch.Tensor]) -> str:
    digest = hashlib.sha256()
    for name in sorted(tensors):
        digest.update(name.encode())
        digest.update(tensors[name].detach().contiguous().view(torch.uint8).numpy().tobytes()
                      if tensors[name].numel() else b"")
    return digest.hexdigest()


def skip(obs: Observation, names: dict[str, str], reason: str) -> None:
    for name, kind in names.items():
        obs.skipped(name, kind, reason)


MODEL_FIELDS = {"config": "exact", "tensors": "exact", "weights_digest": "exact", "config_as_converted": "exact",
                "tensors_as_converted": "exact", "logits_as_converted": "tensor"}
TOKENIZER_FIELDS = {"tokenizer": "exact", "chat": "exact", "ids_as_converted": "exact", "decode_as_converted": "exact",
                    "specials_as_converted": "exact", "chat_as_converted": "exact"}
GENERATION_FIELDS = {"generate_error": "exact", "tokens": "tokens", "reply": "exact", "tokens_as_converted": "tokens", "steps_as_converted": "tokens"}


def witness(converted: Path, dtype: str) -> float | None:
    """The engine's rounding witness of the converted model in `dtype` (harness/engine/witness.py: its
    logits in that dtype against its fp32 logits over the held-out prompt, at the columns a reference
    compares); None in fp32. The fp32 conversion is made (once) for it."""
    from safetensors.torch import load_file

    from harness.engine.model import Config, Model
    from harness.engine.witness import UNIT_ROUNDOFF, rounding_witness
    from harness.zoo.prompts import BY_ID

    low = TORCH_DTYPES[dtype]
    if low not in UNIT_ROUNDOFF:
        return None
    full = subject.model_files("float32")[1]
    tokens = engine.witness_tokens(full, BY_ID[engine.WITNESS_PROMPT].text)
    config = Config.from_dict(json.loads((Path(converted) / "config.json").read_text()))
    run = {}
    for name, folder in (("low", converted), ("full", full)):
        model = Model(config, load_file(str(Path(folder) / "model.safetensors")), Path(folder))
        run[name] = model.forward(torch.tensor(tokens), torch.arange(len(tokens)), None).logits.float()
    observed, expected = narrowed(run["low"], run["full"])
    return rounding_witness(torch.tensor(observed), torch.tensor(expected), UNIT_ROUNDOFF[low])


def observe(case: Case, dtype: str, rounding: Callable[[float | None], None] | None = None) -> Observation:
    """The case's observation in the run's dtype (fp32, bf16: the conversion in the same dtype).
    `rounding` (the test's `golden.rounding`): told the converted model's rounding witness in a
    low-precision dtype (`witness`), so the low-precision allowances of its references scale with
    it, as a zoo case's do - the golden fixture measures a witness for the zoo's models only."""
    from safetensors.torch import load_file

    from harness.engine.decode import decode
    from harness.engine.detokenize import Oracle
    from harness.engine.model import Config, Model
    from harness.engine.teacher_forced import teacher_forced
    from harness.zoo import real
    from harness.zoo.gguf_convert import CONVERTER_VERSION

    obs = Observation()
    versions = subject.require()
    if dtype not in CONVERTED_DTYPE:
        raise ValueError(f"the gguf suite runs in {sorted(CONVERTED_DTYPE)}, not {dtype!r}")
    gguf, converted = subject.model_files(CONVERTED_DTYPE[dtype])
    if rounding is not None:
        rounding(witness(converted, dtype))
    obs.add("setup", {"file": gguf.name, "sha256": real.GGUF_SHA256, **versions, "converter": CONVERTER_VERSION},
            presentation=True)
    loaded = TORCH_DTYPES[dtype]
    model, model_error = subject.load_model(gguf, loaded)
    tokenizer, tokenizer_error = subject.load_tokenizer(gguf)
    errors = {"model": model_error, "tokenizer": tokenizer_error}
    obs.add("load_error", errors, outcome="each")
    obs.reference("loads_as_converted", errors, {"model": None, "tokenizer": None}, implementations_differ=False)

    config = json.loads((Path(converted) / "config.json").read_text())
    tokenizer_config = json.loads((Path(converted) / "tokenizer_config.json").read_text())
    oracle = Oracle.of(converted)
    weights = load_file(str(Path(converted) / "model.safetensors"))
    engine_model = Model(Config.from_dict(config), weights, Path(converted))

    # the model: config, tensors
    if model_error is None:
        theirs = {k: f32(v) for k, v in subject.config_values(model.config).items()}
        obs.add("config", theirs, oracle="config_as_converted")
        obs.reference("config_as_converted", theirs, {k: f32(config.get(k)) for k in subject.ARCH_KEYS},
                      implementations_differ=False)
        tensors = subject.state(model)
        # the conversion writes a tied head once (the embedding); the loaded model lists it under both names
        ours = dict(weights)
        if config.get("tie_word_embeddings") and "lm_head.weight" not in ours:
            ours["lm_head.weight"] = ours["model.embed_tokens.weight"]
        diffs = tensor_diffs(tensors, ours)
        off = sorted({*diffs["missing"], *diffs["unexpected"], *diffs["shape"], *diffs["values"]})
        obs.add("tensors", {"count": len(tensors), "layout": layout(tensors), "mismatching": fold_keys(off)},
                oracle="tensors_as_converted", show={"dtypes": sorted({str(t.dtype).removeprefix("torch.") for t in tensors.values()})})
        obs.add("weights_digest", weights_digest(tensors), presentation=True)
        obs.reference("tensors_as_converted", {k: fold_keys(diffs[k]) for k in ("missing", "unexpected", "shape", "values")},
                      {k: {} for k in ("missing", "unexpected", "shape", "values")}, implementations_differ=False,
                      observed_extras={"max_abs_diff": diffs["max_abs_diff"], "worst": diffs["worst"],
                                       "tolerance": "eps(dtype) x the tensor's absmax"})
    else:
        skip(obs, {k: v for k, v in MODEL_FIELDS.items() if k != "logits_as_converted"},
             f"transformers' GGUF model load raised {model_error['type']} (load_error)")

    # the tokenizer: ids, decode, specials, chat
    chats: dict[str, dict[str, Any]] = {}
    rendered: dict[str, str | None] = {}
    if tokenizer_error is None:
        every = texts(oracle)
        expected_ids = {label: oracle.encode(text)["ids"] for label, text in every.items()}
        ids = {label: subject.encode(tokenizer, text) for label, text in every.items()}
        ids = {label: got if error is None else error for label, (got, error) in ids.items()}
        decoded = {label: {skip_special: subject.decode(tokenizer, expected_ids[label], skip_special)
                           for skip_special in (False, True)} for label in every}
        decoded = {label: {("skip_special" if s else "text"): (got if err is None else err) for s, (got, err) in d.items()}
                   for label, d in decoded.items()}
        specials = subject.specials(tokenizer)
        obs.add("tokenizer", {"ids": ids, "decoded": decoded, "specials": specials,
                              "pipeline": subject.pipeline(tokenizer)},
                oracle=["specials_as_converted", "ids_as_converted", "decode_as_converted"])
        obs.reference("ids_as_converted", ids, expected_ids, implementations_differ=False)
        obs.reference("decode_as_converted", decoded,
                      {label: {"text": oracle.decode(expected_ids[label]),
                               "skip_special": oracle.decode(expected_ids[label], skip_special_tokens=True)}
                       for label in every}, implementations_differ=False)
        vocab = len(set(oracle.reader.model.vocab.values()) | set(oracle.reader.added))
        named = {"bos": "bos_token", "eos": "eos_token", "unk": "unk_token", "pad": "pad_token"}
        obs.reference("specials_as_converted", {**{k: specials[k] for k in named}, "vocab_size": specials["vocab_size"]},
                      {**{k: oracle.token_to_id(tokenizer_config[v]) if tokenizer_config.get(v) is not None else None
                          for k, v in named.items()}, "vocab_size": vocab}, implementations_differ=False)
        template = tokenizer_config.get("chat_template")
        variables = {k: tokenizer_config.get(k) for k in ("bos_token", "eos_token", "unk_token", "pad_token")}
        chats = {label: subject.chat(tokenizer, messages, prompt) for label, (messages, prompt) in CHATS.items()}
        theirs_chat = {"template_sha256": sha256(getattr(tokenizer, "chat_template", None)),
                       "conversations": {label: {"text": c["text"], "ids": c["ids"], "error": c["error"]}
                                         for label, c in chats.items()}}
        rendered = {label: render(template, messages, prompt, **variables) if template else None
                    for label, (messages, prompt) in CHATS.items()}
        obs.add("chat", theirs_chat, oracle="chat_as_converted")
        obs.reference("chat_as_converted", theirs_chat,
                      {"template_sha256": sha256(template),
                       "conversations": {label: {"text": text, "error": None,
                                                 "ids": oracle.encode(text, add_special_tokens=False)["ids"] if text else None}
                                         for label, text in rendered.items()}}, implementations_differ=False)
    else:
        skip(obs, TOKENIZER_FIELDS, f"transformers' GGUF tokenizer load raised {tokenizer_error['type']} (load_error)")

    # generation: logits, greedy tokens, every step
    prompt = chats.get(PROMPT, {}).get("ids")
    if model_error is not None or prompt is None:
        why = (f"transformers' GGUF model load raised {model_error['type']} (load_error)" if model_error is not None
               else f"no {PROMPT!r} prompt: transformers' GGUF tokenizer did not render it (load_error, chat)")
        skip(obs, {"logits_as_converted": "tensor", **GENERATION_FIELDS}, why)
        return obs
    eos = config.get("eos_token_id")
    tokens, error = subject.greedy(model, prompt, case.new_tokens)
    obs.add("generate_error", error, outcome="error")
    sequence = [*prompt, *(tokens or [])]  # one forward of each side: the prompt's rows, then each new token's
    expected = engine_model.forward(torch.tensor(sequence), torch.arange(len(sequence)), None).logits.float()
    obs.reference("logits_as_converted", *narrowed(subject.logits(model, sequence), expected), kind="tensor")
    if error is not None:
        skip(obs, {k: v for k, v in GENERATION_FIELDS.items() if k != "generate_error"},
             f"generate() on the GGUF model raised {error['type']} (generate_error)")
        return obs
    forced = teacher_forced(expected, len(prompt), tokens)
    obs.add("tokens", [tokens], kind="tokens", margins=[forced.gaps], scales=[forced.scales])
    obs.add("reply", tokenizer.decode(tokens), follows="tokens")
    engine.forced_reference(obs, "steps_as_converted", tokens, forced, [f"step {i}" for i in range(len(tokens))])
    if not rendered[PROMPT]:
        obs.skipped("tokens_as_converted", "tokens", "the file has no chat template to render the prompt with")
        return obs
    expected_prompt = oracle.encode(rendered[PROMPT], add_special_tokens=False)["ids"]
    greedy = decode(engine_model, expected_prompt, case.new_tokens, eos_token_id=eos if isinstance(eos, int) else engine.EOS)
    obs.reference("tokens_as_converted", [tokens], [greedy.tokens], kind="tokens",
                  expected_extras={"margins": [greedy.margins], "scales": [greedy.scales]})
    return obs
