"""A finding as something to file upstream: one case's library call written out as a standalone
script (torch and transformers only, no harness import) and an issue body around it.

`plan(suite, case, record, ...)` -> `Plan`: what the script calls and what it compares - the case's
call with the same arguments, seed, dtype and thread count, and the baseline record's values of the
fields asked for. `script(plan)` -> the script's text; `issue_body(...)` -> markdown.

The recipes (one per kind of call a case makes; a case of another kind is refused with the reason):

  generate    outputs' cases: one `model.generate()` on the case's path (plain, assisted with the
              draft schedule pinned, prompt lookup, MTP, ensemble), cache, decoding and seed, with an
              explicit attention mask (as hf.generate makes it); fields error, tokens, text,
              first_logits, target_forwards
  stream      stopping's `<model>.stream.plain|assisted`: greedy generate() with each streamer and
              skip_prompt; fields error, tokens, streamed, pieces
  checkpoint  backends' model cases: a plain from_pretrained and one uncached forward of "long-0";
              fields default_attn_implementation, logits (first and last position)

The script's oracle is the baseline record, nothing else: it prints the observed value beside the
recorded one and where they differ (exact fields: equality, the first differing token of a token
stream; tensors: the record's dtype tolerance, |a - b| <= atol + rtol |b|, as the harness's tensor
comparer), and exits 1 when the installed version differs, 0 when it matches. It mirrors
harness/subjects/hf.py's calls; tests/test_repro.py runs a script against the current env's own
record, so a drift between the two shows there.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.checking.policy import TOLERANCES
from harness.schema import Case, Record

ZOO_PLACEHOLDER = "<repo>/golden/models"  # how a record names the zoo's directory in an error message
MODELS_SUBDIR = "models"  # the zoo's files are copied beside the script, under this folder

RECIPE_FIELDS: dict[str, tuple[str, ...]] = {
    "generate": ("error", "tokens", "text", "first_logits", "target_forwards"),
    "stream": ("error", "tokens", "streamed", "pieces"),
    "checkpoint": ("default_attn_implementation", "logits"),
}
CHECKPOINT_PROMPT = "long-0"  # harness/designs/backends.py PROMPT
LOGIT_POSITIONS = 2  # harness/designs/backends.py LOGIT_POSITIONS
STREAM_COMBINATIONS = [["TextStreamer", False], ["TextStreamer", True],
                       ["TextIteratorStreamer", False], ["TextIteratorStreamer", True]]


class ReproError(ValueError):
    """The case's call cannot be written as a standalone script (with the reason)."""


@dataclass(frozen=True)
class Plan:
    suite: str
    case: Case
    recipe: str
    fields: tuple[str, ...]
    baseline_key: str
    spec: dict[str, Any] = field(default_factory=dict)  # everything the script reads: JSON values only

    @property
    def target(self) -> str:
        return f"{self.suite}/{self.case.id}"


def _row(suite: str) -> Any:
    from harness import (
        cases,  # (imported here: the case tables import torch; rendering a report does not need it)
    )

    return cases.suite(suite)


def recipe_of(suite: str, case: Case) -> str | None:
    """Which recipe makes this case's call (None: none does) - the suite's registry row says
    (harness/cases/<suite>.py `Suite.repro`)."""
    row = _row(suite)
    return row.repro.of(case) if row is not None and row.repro is not None else None


def scripted() -> tuple[str, ...]:
    """The suites a recipe writes (their registry rows hold a `Recipe`)."""
    from harness import cases

    return tuple(s.name for s in cases.SUITES if s.repro is not None)


def scriptable(suite: str, case_id: str) -> bool:
    """Whether a case id names a case a recipe writes (`recipe_of`, from the id alone)."""
    row = _row(suite)
    return row is not None and row.repro is not None and row.repro.scripts(case_id)


def repro_text(f: Any, baseline: str | None, quote: str = "") -> str:
    """The `harness repro` command that writes a finding's standalone script (its first scriptable
    case), or why there is none: the report's case and field are then the reproduction."""
    flag = f" --baseline {baseline}" if baseline else ""
    first = next((o for o in f.outcomes if scriptable(o.suite, o.case)), None)
    more = f" (and {len(f.cases) - 1} more cases)" if len(f.cases) > 1 else ""
    if first:
        return f"{quote}harness repro {first.suite}/{first.case}:{first.field}{flag}{quote}{more}"
    return (f"no script for the {f.outcomes[0].suite} suite ({quote}harness repro{quote} writes "
            f"{', '.join(scripted()[:-1])} and {scripted()[-1]} cases): its report's case and field are the reproduction")


def plan(suite: str, case: Case, record: Record, baseline_key: str, prompts: dict[str, str],
         models: dict[str, str], fields: tuple[str, ...] = ()) -> Plan:
    """The script's plan for `suite/case` against the baseline `record`. `prompts`: prompt id ->
    text (the case's prompts); `models`: model name -> the checkpoint directory as the script
    names it (relative: beside the script); `fields`: those to compare (default: every field the
    recipe expresses that the record holds)."""
    recipe = recipe_of(suite, case)
    if recipe is None:
        raise ReproError(f"{suite}/{case.id}: no standalone recipe for this kind of case; `harness repro` writes "
                         "outputs' generation cases, stopping's stream cases and backends' model cases")
    expressible = RECIPE_FIELDS[recipe]
    asked = fields or tuple(f for f in expressible if f in record.fields)
    unknown = [f for f in asked if f not in expressible]
    if unknown:
        raise ReproError(f"{suite}/{case.id}: field {unknown[0]!r} is not one the script observes "
                         f"(it observes {', '.join(expressible)})")
    absent = [f for f in asked if f not in record.fields]
    if absent:
        raise ReproError(f"{suite}/{case.id}: the baseline record {baseline_key} has no field {absent[0]!r} "
                         f"(it has {', '.join(sorted(record.fields))})")
    env = record.env or {}
    dtype = env.get("dtype", "fp32")
    rtol, atol = TOLERANCES.get(dtype, TOLERANCES["fp32"])
    spec = {
        "target": f"{suite}/{case.id}",
        "baseline_key": baseline_key,
        "baseline_versions": {k: env.get(k) for k in ("transformers", "torch")},
        "dtype": dtype,
        "threads": int(env.get("threads") or 1),
        "models": models,
        "model": case.model,
        "call": _call(recipe, case, prompts),
        "fields": list(asked),
        "kinds": {f: record.fields[f].kind for f in asked},
        "baseline": {f: record.fields[f].value for f in asked},
        "tolerance": {"rtol": rtol, "atol": atol},
    }
    json.dumps(spec)  # the script holds JSON values only
    return Plan(suite, case, recipe, tuple(asked), baseline_key, spec)


def _call(recipe: str, case: Case, prompts: dict[str, str]) -> dict[str, Any]:
    """The arguments of the case's call (harness/subjects/hf.py `Zoo.generate`, `path_args`)."""
    if recipe == "checkpoint":
        return {"prompt": prompts[CHECKPOINT_PROMPT], "positions": LOGIT_POSITIONS}
    path: dict[str, Any] = {}
    if case.path == "prompt_lookup":
        path["prompt_lookup_num_tokens"] = case.draft_tokens
    if case.path == "mtp":
        path["use_mtp"] = True
    if case.weight is not None:
        path["assistant_ensemble_weight"] = case.weight
    call = {"prompt": prompts[case.prompt], "max_new_tokens": case.new_tokens, "assistant": case.assistant,
            "draft_tokens": case.draft_tokens if case.assistant else None}
    if recipe == "stream":
        return {**call, "combinations": STREAM_COMBINATIONS}
    return {**call, "do_sample": case.decoding == "sample", "seed": case.seed,
            "cache_implementation": "static" if case.cache == "static" else None, "path": path}


def models_of(case: Case) -> list[str]:
    """The checkpoints the case's call loads."""
    return [case.model] + ([case.assistant] if case.assistant else [])


def prompt_ids_of(recipe: str, case: Case) -> list[str]:
    return [CHECKPOINT_PROMPT] if recipe == "checkpoint" else [case.prompt]


# ----------------------------------------------------------------------------------------------
# the script


def script(p: Plan) -> str:
    """The script's text: fixed code, and the plan's data as one JSON document in string literals
    that the script parses when it runs (`SPEC = json.loads(...)`). Nothing read from a record - a
    version string, a case id, a value - is ever interpolated into code: each line of the JSON is
    written with repr() (a string literal whatever it holds), and `check_script` parses the result
    to prove that the only statement built from data is that one assignment."""
    tail = _COMMON + _RECIPES[p.recipe] + _MAIN
    text = _HEAD + spec_assignment(p.spec) + tail
    check_script(text, tail)
    return text


def spec_assignment(spec: dict[str, Any]) -> str:
    """`SPEC = json.loads(` + the JSON's lines, each a repr()'d string literal + `)`."""
    lines = json.dumps(spec, indent=1, ensure_ascii=True).splitlines(keepends=True)
    return "SPEC = json.loads(\n" + "".join(f"    {line!r}\n" for line in lines) + ")\n"


def check_script(text: str, tail: str) -> None:
    """The script's module is the fixed code (`_HEAD`, then `tail`) with, between them, one
    `SPEC = json.loads(<string literals>)`: statement for statement the same as the fixed code's
    but for that one, whose argument is string constants only. Anything else (a docstring closed
    early, a statement smuggled in by a record's value) raises `ReproError`; nothing is written."""
    import ast

    try:
        tree = ast.parse(text)
    except SyntaxError as exc:
        raise ReproError(f"the script does not parse ({exc.msg}, line {exc.lineno}); not written") from None
    fixed = ast.parse(_HEAD + "SPEC = json.loads('{}')\n" + tail)
    at = len(ast.parse(_HEAD).body)
    same = len(tree.body) == len(fixed.body) and all(
        ast.dump(a) == ast.dump(b) for i, (a, b) in enumerate(zip(tree.body, fixed.body, strict=True)) if i != at)
    spec = tree.body[at] if same else None
    value = spec.value if isinstance(spec, ast.Assign) else None
    if not (same and isinstance(spec, ast.Assign) and ast.dump(spec.targets[0]) == ast.dump(fixed.body[at].targets[0])
            and len(spec.targets) == 1 and isinstance(value, ast.Call) and ast.unparse(value.func) == "json.loads"
            and not value.keywords and len(value.args) == 1 and isinstance(value.args[0], ast.Constant)
            and isinstance(value.args[0].value, str)):
        raise ReproError("the script's data did not stay data (its code must be the fixed code and one "
                         "SPEC = json.loads(<string literal>)); not written")


_HEAD = '''#!/usr/bin/env python3
"""Reproduces one case's call of a golden record against that baseline record (which case, fields and
record: SPEC["target"], SPEC["fields"], SPEC["baseline_key"], printed when it runs).

Standalone: needs only torch and transformers; the checkpoints are the folders SPEC["models"] names
(relative ones beside this file). Run `python repro.py`: it prints each field as observed with the
installed transformers beside the recorded value and where they differ. Exit 1: the installed version
shows the difference; 0: it matches the baseline record. SPEC is data (JSON parsed at run time).
Written by `harness repro` (genharness).
"""

import functools
import json
import re
import sys
from pathlib import Path

import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer

HERE = Path(__file__).resolve().parent
'''

_COMMON = '''
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16, "fp64": torch.float64}
ZOO_PLACEHOLDER = "<repo>/golden/models"


def checkpoint(name):
    path = Path(SPEC["models"][name])
    return path if path.is_absolute() else HERE / path


def load(name):
    """from_pretrained as the harness loads: safetensors, no remote code, the record's dtype; weights
    a version does not find get seed 0's init."""
    torch.manual_seed(0)
    directory = str(checkpoint(name))
    model = AutoModelForCausalLM.from_pretrained(directory, dtype=DTYPES[SPEC["dtype"]], trust_remote_code=False,
                                                 use_safetensors=True).eval()
    return model, AutoTokenizer.from_pretrained(directory, trust_remote_code=False)


def error_of(exc):
    """An exception as the record keeps it: type and first line, the zoo's folder as <repo>/golden/models."""
    lines = str(exc).strip().splitlines()
    message = lines[0] if lines else ""
    for name in SPEC["models"]:
        if not Path(SPEC["models"][name]).is_absolute():
            message = message.replace(str(checkpoint(name).parent), ZOO_PLACEHOLDER)
    message = re.sub(r"0x[0-9a-f]{6,}", "0x...", message)
    return {"type": type(exc).__name__, "message": message[:300]}


def top_values(rows):
    """[T, V] -> the rows as the record keeps them: whole up to 4096 columns, else each row's 256 largest."""
    rows = torch.as_tensor(rows, dtype=torch.float32)
    return rows.tolist() if rows.shape[-1] <= 4096 else torch.topk(rows, 256, dim=-1).values.tolist()


def assistant_kwargs(call):
    """The assistant with its draft schedule pinned: a constant number of tokens per step, no early stop."""
    if not call["assistant"]:
        return {}
    assistant, _ = load(call["assistant"])
    if call["draft_tokens"] is not None:
        config = assistant.generation_config
        config.num_assistant_tokens = call["draft_tokens"]
        config.num_assistant_tokens_schedule = "constant"
        config.assistant_confidence_threshold = 0.0
    return {"assistant_model": assistant}

'''

_GENERATE = '''
def count_forwards(model):
    counter = {"n": 0}
    original = model.forward

    @functools.wraps(original)  # generate() inspects forward's signature
    def forward(*args, **kwargs):
        counter["n"] += 1
        return original(*args, **kwargs)

    model.forward = forward
    return counter


def observe():
    """The case's one generate() call."""
    call = SPEC["call"]
    model, tok = load(SPEC["model"])
    ids = tok(call["prompt"], return_tensors="pt").input_ids
    kwargs = dict(max_new_tokens=call["max_new_tokens"], do_sample=call["do_sample"], return_dict_in_generate=True,
                  output_scores=True, pad_token_id=model.config.pad_token_id)
    if call["cache_implementation"]:
        kwargs["cache_implementation"] = call["cache_implementation"]
    kwargs.update(assistant_kwargs(call), **call["path"])
    forwards = count_forwards(model)
    if call["seed"] is not None:
        torch.manual_seed(call["seed"])
    print(f"generate({', '.join(f'{k}={v!r}' for k, v in kwargs.items() if k != 'assistant_model')}"
          f"{', assistant_model=' + call['assistant'] if call['assistant'] else ''})")
    try:
        with torch.no_grad():
            out = model.generate(ids, attention_mask=torch.ones_like(ids), **kwargs)
    except Exception as exc:
        return {"error": error_of(exc)}
    new = out.sequences[0, ids.shape[1]:].tolist()
    return {"error": None, "tokens": [new], "text": tok.decode(new),
            "first_logits": top_values(out.scores[0][:1].float()), "target_forwards": forwards["n"]}
'''

_STREAM = '''
class Writes:
    """stdout that keeps each write (print() writes the text, then its end)."""

    def __init__(self):
        self.writes = []

    def write(self, s):
        self.writes.append(s)
        return len(s)

    def flush(self):
        pass


def stream(model, tok, ids, streamer, skip_prompt, path):
    kwargs = dict(max_new_tokens=SPEC["call"]["max_new_tokens"], do_sample=False, return_dict_in_generate=True,
                  output_scores=True, pad_token_id=model.config.pad_token_id, **path)
    if streamer == "TextStreamer":
        kwargs["streamer"] = transformers.TextStreamer(tok, skip_prompt=skip_prompt)
        writes, real = Writes(), sys.stdout
        sys.stdout = writes
        try:
            with torch.no_grad():
                out = model.generate(ids, attention_mask=torch.ones_like(ids), **kwargs)
        finally:
            sys.stdout = real
        pieces = [w for w in writes.writes if w]
    else:
        iterator = transformers.TextIteratorStreamer(tok, skip_prompt=skip_prompt, timeout=2.0)
        kwargs["streamer"] = iterator
        with torch.no_grad():
            out = model.generate(ids, attention_mask=torch.ones_like(ids), **kwargs)
        pieces = list(iterator)
    return pieces, out.sequences[0, ids.shape[1]:].tolist()


def observe():
    """Greedy generate() with each streamer and skip_prompt: the pieces it handed out, in order."""
    call = SPEC["call"]
    model, tok = load(SPEC["model"])
    ids = tok(call["prompt"], return_tensors="pt").input_ids
    path = assistant_kwargs(call)
    errors, pieces, tokens = {}, {}, []
    for streamer, skip in call["combinations"]:
        key = f"{streamer}.skip_prompt={skip}"
        try:
            pieces[key], new = stream(model, tok, ids, streamer, skip, path)
            errors[key] = None
            tokens.append(new)
        except Exception as exc:
            errors[key] = error_of(exc)
    return {"error": errors, "tokens": tokens, "streamed": {k: "".join(v) for k, v in pieces.items()},
            "pieces": pieces}
'''

_CHECKPOINT = '''
def observe():
    """A plain from_pretrained (the library's default attention) and one uncached forward of the prompt."""
    call = SPEC["call"]
    model, tok = load(SPEC["model"])
    ids = tok(call["prompt"], return_tensors="pt").input_ids
    n, k = ids.shape[1], call["positions"]
    positions = sorted({round(i * (n - 1) / (k - 1)) for i in range(k)})
    try:
        with torch.no_grad():
            full = model(ids, use_cache=False).logits[0].float()
    except Exception as exc:
        return {"error": error_of(exc), "default_attn_implementation": model.config._attn_implementation}
    return {"default_attn_implementation": getattr(model.config, "_attn_implementation", None),
            "logits": top_values(full[positions])}
'''

_RECIPES = {"generate": _GENERATE, "stream": _STREAM, "checkpoint": _CHECKPOINT}

_MAIN = '''

def flat(value):
    if isinstance(value, (list, tuple)):
        return [x for v in value for x in flat(v)]
    return [value]


def shape(value):
    return [len(value), *shape(value[0])] if isinstance(value, list) and value else []


def tensor_difference(observed, expected):
    """'' when every element is within the record's dtype tolerance (|a - b| <= atol + rtol |b|)."""
    if shape(observed) != shape(expected):
        return f"shape {shape(observed)} vs the baseline's {shape(expected)}"
    rtol, atol = SPEC["tolerance"]["rtol"], SPEC["tolerance"]["atol"]
    a, b = torch.tensor(flat(observed)), torch.tensor(flat(expected))
    beyond = (a - b).abs() > atol + rtol * b.abs()
    if not beyond.any():
        return ""
    i = int(beyond.nonzero()[0])
    return (f"{int(beyond.sum())}/{beyond.numel()} elements beyond tolerance ({SPEC['dtype']}, rtol {rtol:g}, "
            f"atol {atol:g}): at flat index {i} baseline {float(b[i]):.6g} vs observed {float(a[i]):.6g}; "
            f"max abs err {float((a - b).abs().max()):.3g}")


def token_difference(observed, expected):
    for row, (a, b) in enumerate(zip(observed, expected)):
        step = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
        if step is not None:
            return f"row {row} differs first at new token {step}: baseline {b[step]} vs observed {a[step]}"
        if len(a) != len(b):
            return f"row {row}: {len(a)} new tokens vs the baseline's {len(b)}"
    return f"{len(observed)} rows vs the baseline's {len(expected)}" if len(observed) != len(expected) else ""


def exact_differences(observed, expected, where=""):
    """Where two exact values differ: the key path and both sides, first difference of each list."""
    if observed == expected:
        return []
    if isinstance(observed, dict) and isinstance(expected, dict):
        return [d for k in dict.fromkeys([*expected, *observed])
                for d in exact_differences(observed.get(k, "<absent>"), expected.get(k, "<absent>"), f"{where}.{k}")]
    if isinstance(observed, list) and isinstance(expected, list) and len(observed) == len(expected):
        i = next(i for i, (a, b) in enumerate(zip(observed, expected)) if a != b)
        return exact_differences(observed[i], expected[i], f"{where}[{i}]")
    return [f"{where.lstrip('.') or 'value'}: baseline {shown(expected, 120)} -> observed {shown(observed, 120)}"]


def difference(name, observed, expected):
    kind = SPEC["kinds"][name]
    if kind == "tensor":
        return tensor_difference(observed, expected)
    if observed == expected:
        return ""
    if kind == "tokens":
        return token_difference(observed, expected) or "differs"
    found = exact_differences(observed, expected)
    return "; ".join(found[:4]) + (f" (+{len(found) - 4} more)" if len(found) > 4 else "")


def shown(value, limit=400):
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} characters)"


def main():
    torch.set_num_threads(SPEC["threads"])
    print(f"{SPEC['target']}: transformers {transformers.__version__}, torch {torch.__version__}, {SPEC['dtype']}; "
          f"baseline {SPEC['baseline_key']}")
    print(f"fields: {', '.join(SPEC['fields'])}; the baseline record's versions: "
          f"{', '.join(f'{k} {v!r}' for k, v in SPEC['baseline_versions'].items())}")
    observed = observe()
    differs = 0
    for name in SPEC["fields"]:
        expected = SPEC["baseline"][name]
        print(f"\\n{name}:")
        print(f"  baseline: {shown(expected)}")
        if name not in observed:
            print(f"  observed: not observed - the call raised {observed.get('error')}")
            print("  DIFFERS: not observed")
            differs += 1
            continue
        print(f"  observed: {shown(observed[name])}")
        why = difference(name, observed[name], expected)
        print(f"  DIFFERS: {why}" if why else "  matches the baseline")
        differs += bool(why)
    print(f"\\n{differs} of {len(SPEC['fields'])} fields differ from the baseline "
          f"({'the installed version shows the difference' if differs else 'matches the baseline'})")
    return 1 if differs else 0


if __name__ == "__main__":
    sys.exit(main())
'''


# ----------------------------------------------------------------------------------------------
# the issue body


ENV_ROWS = ("transformers", "torch", "tokenizers", "safetensors", "python", "platform", "dtype", "device",
            "threads", "attn_implementation", "matmul_precision", "deterministic")


def env_table(baseline: dict[str, Any] | None, observed: dict[str, Any] | None, names: tuple[str, str]) -> str:
    """The two environments' fingerprints side by side (a row for each key either has)."""
    baseline, observed = baseline or {}, observed or {}
    keys = [k for k in ENV_ROWS if k in baseline or k in observed]
    keys += sorted(k for k in {*baseline, *observed} if k not in keys)
    lines = [f"| | {names[0]} | {names[1]} |", "|---|---|---|"]
    for k in keys:
        lines.append(f"| {k} | {_cell(baseline.get(k, '-'))} | {_cell(observed.get(k, '-'))} |")
    return "\n".join(lines)


def _cell(value: Any) -> str:
    if isinstance(value, dict):
        value = ", ".join(f"{k} {v}" for k, v in value.items())
    return str(value).replace("|", "\\|")


def issue_body(p: Plan, script_text: str, finding: str, envs: list[tuple[str, dict[str, Any] | None]],
               outputs: list[tuple[str, str, int]]) -> str:
    """Markdown for an upstream issue: the finding in plain words, both environments ((name,
    fingerprint): the baseline's, the observed side's), the script, and each run's output (label,
    text, exit code)."""
    (base_name, base_env), (obs_name, obs_env) = envs
    versions = f"{(base_env or {}).get('transformers', '?')} -> {(obs_env or {}).get('transformers', '?')}"
    parts = [f"## generate(): {', '.join(p.fields)} of `{p.target}` changed ({versions})", "",
             finding.strip() or "(no comparison of the two records at hand)", "",
             "### Environment", "", env_table(base_env, obs_env, (base_name, obs_name)), "",
             "### Reproduction", "",
             f"A standalone script (torch + transformers only). It loads `{', '.join(p.spec['models'])}` "
             "from the checkpoint folders beside it, makes the one call, prints each field beside the value "
             f"recorded with {base_name}, and exits 1 when the installed transformers differs from it.", "",
             "```python", script_text.rstrip(), "```", ""]
    for label, text, code in outputs:
        parts += [f"### Output: {label} (exit {code})", "", "```", text.rstrip(), "```", ""]
    if not outputs:
        parts += ["### Baseline value (the record)", "", "```json",
                  json.dumps(p.spec["baseline"], indent=1)[:4000], "```", ""]
    return "\n".join(parts)


def copy_targets(p: Plan, models_dir: Path) -> dict[str, Path]:
    """model name -> the zoo folder its files are copied from (only those the plan names relatively)."""
    return {name: models_dir / name for name, where in p.spec["models"].items() if not Path(where).is_absolute()}
