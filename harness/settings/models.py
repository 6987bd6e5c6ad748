"""Your own checkpoints as subjects: a `UserModel` per `[tool.harness.models.NAME]` table or
`harness check --model PATH [--assistant PATH]`, checked before anything runs.

```toml
[tool.harness.models.my-model]
path = "/models/my-llama"             # a save_pretrained directory (safetensors only; never unpickled)
assistant = "/models/my-llama-small"  # optional: enables the assisted / ensemble cases
dtype = "bf16"                        # optional: this model's dtype (default: its config.json's bf16 / fp16, else the run's)
prompts = "prompts.jsonl"             # optional: one JSON object a line, {"text": ..., "id": ...}
paths = ["plain", "assisted", "prompt_lookup", "mtp"]  # optional subset (default: all it supports; "early_exit" if asked)
```

Three steps, each a small pure function over plain data:

- `parse_models_table` (called by harness/settings/config.py): key names and types, no file access;
- `from_flags`: `--model PATH` is named after its directory;
- `resolve` (the up-front check of `harness check` / the suites' conftest): the directory has a
  config.json and safetensors weights (a pickle-only checkpoint is refused, never loaded), the
  prompts file parses, the assistant's tokenizer has the model's vocabulary, the paths asked for
  exist and the model supports them. It returns the `UserModel` with its effective `paths` and
  its prompts loaded; every problem is a `ModelError` naming the file / key / flag and the fix.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from harness.schema import PATHS
from harness.settings.budget import Plan
from harness.store.reading import InputError, read_json
from harness.zoo.load import REMOTE_CODE_FIX, remote_code
from harness.zoo.prompts import PROMPTS, Prompt

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")  # a case-id prefix: no dots, safe in file names
PROMPT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")
KEYS = ("path", "assistant", "dtype", "prompts", "paths")
DTYPES = ("fp32", "bf16", "fp16")
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")
DEFAULT_PROMPTS = ("short-0", "long-0")  # the zoo's held-out prompts, when the model has none of its own
SHIPPED_NAME = "smollm2-135m"  # the harness's real model (harness/settings/real.py NAME): no model of yours takes it
ASSISTANT_PATHS = ("assisted", "ensemble")


class ModelError(ValueError):
    """A user model that cannot be checked; the message names the file / key / flag and the fix."""


@dataclass(frozen=True)
class UserModel:
    """One checkpoint of yours the suites run. `origin` names where it was configured (for
    messages): ``pyproject.toml [tool.harness.models.NAME]`` or ``--model``."""

    name: str
    path: Path
    origin: str
    assistant: Path | None = None
    dtype: str | None = None
    prompts_file: Path | None = None
    paths: tuple[str, ...] = ()  # asked for (parse) / effective (after resolve)
    prompts: tuple[Prompt, ...] = ()  # loaded by resolve: the user's, else the zoo's DEFAULT_PROMPTS
    model_type: str = ""
    params: int = 0  # counted from its safetensors headers by resolve (harness/settings/preflight.py)
    plan: Plan = Plan("full")  # the full grid or the budget plan (harness/settings/budget.py), set by the run
    shipped: bool = False  # the harness's own real model (harness/settings/real.py), not a checkpoint of yours
    unavailable: str = ""  # why its files are not here (the real model without its extra): every case skips with it

    @property
    def assistant_name(self) -> str | None:
        """The assistant's name in the cases (`Case.assistant`): never a zoo name."""
        return f"{self.name}.assistant" if self.assistant else None

    def key(self, key: str) -> str:
        """How a message names one of this model's settings."""
        if self.origin == "--model":
            return {"path": "--model", "assistant": "--assistant"}.get(key, f"--model {key}")
        return f"{self.origin} {key}"


# ----------------------------------------------------------------------------------------------
# parsing (no file access)


def _fail(where: str, message: str) -> ModelError:
    return ModelError(f"{where}: {message}")


def parse_model(source: Path, rootdir: Path, name: str, table: Any) -> UserModel:
    """One `[tool.harness.models.NAME]` table: key names and types; paths resolved under rootdir."""
    where = f"{source}: [tool.harness.models.{name}]"
    if not NAME.match(name):
        raise _fail(where, "the name becomes the prefix of case ids and record files; use letters, digits, "
                           "'-' and '_' (no dots)")
    from harness.zoo.specs import BY_NAME

    if name in BY_NAME or name == SHIPPED_NAME:
        raise _fail(where, f"{name!r} is the name of one of the harness's own models; give your model another name")
    if not isinstance(table, dict):
        raise _fail(where, f"expected a table with a path, got {table!r}; write path = \"/models/your-model\"")
    unknown = sorted(set(table) - set(KEYS))
    if unknown:
        raise _fail(f"{where} {unknown[0]}", f"unknown key; known keys: {', '.join(KEYS)}")
    for key in ("path", "assistant", "dtype", "prompts"):
        if key in table and not isinstance(table[key], str):
            raise _fail(f"{where} {key}", f"expected a string, got {table[key]!r}")
    if "path" not in table:
        raise _fail(f"{where} path", "missing; the directory save_pretrained wrote, e.g. path = \"/models/my-llama\"")
    dtype = table.get("dtype")
    if dtype is not None and dtype not in DTYPES:
        raise _fail(f"{where} dtype", f"{dtype!r} is not one of {', '.join(DTYPES)}")
    paths = table.get("paths", [])
    if not isinstance(paths, list) or not all(isinstance(p, str) for p in paths):
        raise _fail(f"{where} paths", f"expected a list of path names, got {paths!r}")
    bad = [p for p in paths if p not in PATHS]
    if bad:
        raise _fail(f"{where} paths", f"unknown path {bad[0]!r}; known: {', '.join(PATHS)}")
    return UserModel(
        name=name, path=rootdir / table["path"], origin=f"{source}: [tool.harness.models.{name}]",
        assistant=rootdir / table["assistant"] if "assistant" in table else None, dtype=dtype,
        prompts_file=rootdir / table["prompts"] if "prompts" in table else None, paths=tuple(paths))


def parse_models_table(source: Path, rootdir: Path, table: dict[str, Any]) -> tuple[UserModel, ...]:
    """`[tool.harness.models]` as a table of user models."""
    return tuple(parse_model(source, rootdir, name, value) for name, value in table.items())


def from_flags(model: str, assistant: str | None = None) -> UserModel:
    """`--model PATH [--assistant PATH]`: a one-off run, named after the model's directory."""
    path = Path(model).resolve()
    name = re.sub(r"[^A-Za-z0-9_-]", "-", path.name).strip("-_") or "model"
    from harness.zoo.specs import BY_NAME

    if name in BY_NAME or name == SHIPPED_NAME:
        name = f"user-{name}"
    return UserModel(name=name, path=path, origin="--model", assistant=Path(assistant).resolve() if assistant else None)


# ----------------------------------------------------------------------------------------------
# checking (reads files; never loads weights)


def check_checkpoint(directory: Path, key: str) -> dict[str, Any]:
    """The checkpoint's config.json, after checking that `directory` is a save_pretrained
    directory with safetensors weights. A pickle-only checkpoint is refused without opening it."""
    if not directory.exists():
        raise ModelError(f"{key}: {directory} does not exist; fix the path, or save your model there with "
                         "model.save_pretrained(path)")
    if not directory.is_dir():
        raise ModelError(f"{key}: {directory} is a file, not a directory; point it at the directory "
                         "model.save_pretrained(path) wrote")
    config = directory / "config.json"
    if not config.is_file():
        raise ModelError(f"{key}: {directory} has no config.json; point it at the directory "
                         "model.save_pretrained(path) wrote")
    if not any(directory.glob("*.safetensors")):
        pickles = sorted(p.name for p in directory.iterdir() if p.suffix in PICKLE_SUFFIXES)
        if pickles:
            raise ModelError(f"{key}: {directory} has only pickle weights ({', '.join(pickles[:3])}), which the "
                             "harness never loads (unpickling runs code); convert them once, where you trust "
                             "the file: model.save_pretrained(path, safe_serialization=True)")
        raise ModelError(f"{key}: {directory} has no *.safetensors weights; save them with "
                         "model.save_pretrained(path)")
    problem = files_problem(directory)
    if problem:
        raise ModelError(f"{key}: {problem}; re-save the model with save_pretrained")
    try:
        data = read_json(config)
    except InputError as exc:
        raise ModelError(f"{key}: {exc}; re-save the model with save_pretrained") from None
    if not isinstance(data, dict) or not isinstance(data.get("model_type"), str):
        raise ModelError(f"{key}: {config} has no model_type; re-save the model with save_pretrained")
    why = remote_code(directory)
    if why:
        raise ModelError(f"{key}: {why}; {REMOTE_CODE_FIX}")
    problem = size_problem(data)
    if problem:
        raise ModelError(f"{key}: {config}: {problem}")
    return data


# what a checkpoint's files may be, checked before a byte of one is hashed or loaded (`files_problem`)
MAX_JSON_BYTES = 64 * 1024 * 1024  # a tokenizer.json of a 256k vocabulary is ~33 MB (Gemma 3)
MAX_HEADER_BYTES = 100 * 1024 * 1024  # the safetensors format's own bound on a header's length
JSON_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
              "special_tokens_map.json", "added_tokens.json", "model.safetensors.index.json")


def files_problem(directory: Path) -> str:
    """Why a checkpoint directory's files cannot be read safely ('' when they can), before anything
    hashes or loads them: every entry - symlinks resolved - is a regular file or a directory (a FIFO
    named model.safetensors blocked the first read forever; a symlink to /dev/zero never ends); each
    safetensors file has a header that fits it (`safetensors_problem`); each JSON file the loaders
    read (`JSON_FILES`) is strict JSON within the reading layer's limits (harness/store/reading.py)."""
    import stat

    for path in sorted(Path(directory).rglob("*")):
        if any(part.startswith(".") for part in path.relative_to(directory).parts):
            continue  # hidden: never read (harness/zoo/checkpoint.py)
        try:
            mode = path.stat().st_mode  # follows a symlink to what it names
        except OSError as exc:
            return f"{path} cannot be read ({exc.strerror or exc}: a broken symlink?)"
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
            kind = ("a FIFO" if stat.S_ISFIFO(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
                    else "a socket" if stat.S_ISSOCK(mode) else "not a plain file")
            return f"{path} is {kind}{' (a symlink to ' + str(path.resolve()) + ')' if path.is_symlink() else ''}; " \
                   "a checkpoint's files are regular files"
        if stat.S_ISDIR(mode):
            continue
        if path.suffix == ".safetensors":
            problem = safetensors_problem(path)
            if problem:
                return problem
        elif path.name in JSON_FILES and path.parent == Path(directory):
            try:
                read_json(path, max_bytes=MAX_JSON_BYTES)
            except InputError as exc:
                return str(exc)
    return ""


def safetensors_problem(path: Path) -> str:
    """Why `path` is not a safetensors file ('' when its header reads): 8 bytes of little-endian
    header length N, N <= the file's size - 8 and <= `MAX_HEADER_BYTES`, the header strict JSON (the
    reading layer's parse) and an object of tensors whose dtype is text, whose shape is sizes and
    whose data_offsets lie inside the file's data - so a truncated, empty or garbage file is one line,
    never a traceback from the loader."""
    import struct

    from harness.store.reading import parse_json

    try:
        size = path.stat().st_size
        with open(path, "rb") as handle:
            raw = handle.read(8)
            if len(raw) < 8:
                return f"{path}: not a safetensors file ({size} bytes, shorter than its 8-byte header length)"
            (length,) = struct.unpack("<Q", raw)
            if length > min(size - 8, MAX_HEADER_BYTES):
                return (f"{path}: not a safetensors file (its header length {length} is over the file's remaining "
                        f"{size - 8} bytes or the format's {MAX_HEADER_BYTES}: truncated, or not safetensors)")
            text = handle.read(length)
    except OSError as exc:
        return f"{path} cannot be read ({exc.strerror or exc})"
    try:
        header = parse_json(text.decode("utf-8"), path)
    except UnicodeDecodeError as exc:
        return f"{path}: its safetensors header is not UTF-8 (byte {exc.start})"
    except InputError as exc:
        return f"{path}: its safetensors header is {exc.problem}"
    if not isinstance(header, dict):
        return f"{path}: its safetensors header is not a JSON object"
    data = size - 8 - length
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        offsets = entry.get("data_offsets") if isinstance(entry, dict) else None
        shape = entry.get("shape") if isinstance(entry, dict) else None
        if not (isinstance(entry, dict) and isinstance(entry.get("dtype"), str) and isinstance(shape, list)
                and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape)
                and isinstance(offsets, list) and len(offsets) == 2
                and all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)
                and 0 <= offsets[0] <= offsets[1] <= data):
            return (f"{path}: tensor {str(name)[:80]!r} of its safetensors header is not dtype / shape / data_offsets "
                    f"inside the file's {data} bytes of data (truncated, or not safetensors)")
    return ""


# config sizes that shape the weights: each must be a positive integer
SIZE_KEYS = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
             "head_dim", "vocab_size", "moe_intermediate_size", "num_experts", "n_routed_experts", "num_local_experts")


# what other config families call those sizes (their config classes' attribute_map: GPT-2 /
# GPT-BigCode / GPT-J n_embd, n_layer, n_head, n_inner; BLOOM n_embed; T5 / MPT d_model, d_ff,
# num_layers, n_layers, num_heads, n_heads; OPT ffn_dim): checked as sizes, and counted as the
# canonical key when that is absent
SIZE_ALIASES = {"n_embd": "hidden_size", "n_embed": "hidden_size", "d_model": "hidden_size",
                "n_layer": "num_hidden_layers", "n_layers": "num_hidden_layers", "num_layers": "num_hidden_layers",
                "n_head": "num_attention_heads", "n_heads": "num_attention_heads", "num_heads": "num_attention_heads",
                "n_inner": "intermediate_size", "d_ff": "intermediate_size", "ffn_dim": "intermediate_size",
                "n_positions": "max_position_embeddings", "d_kv": "head_dim"}


def canonical_sizes(table: dict[str, Any]) -> dict[str, Any]:
    """`table` with each `SIZE_ALIASES` spelling also under its canonical key (when that is absent);
    GPT-2's family leaves n_inner null for 4 x n_embd, as its model code does."""
    out = dict(table)
    for alias, key in SIZE_ALIASES.items():
        if out.get(key) is None and out.get(alias) is not None:
            out[key] = out[alias]
    if "n_inner" in table and table["n_inner"] is None and isinstance(out.get("hidden_size"), int):
        out.setdefault("intermediate_size", 4 * out["hidden_size"])
        if out["intermediate_size"] is None:
            out["intermediate_size"] = 4 * out["hidden_size"]
    return out


def memory_bytes() -> int:
    """This machine's physical memory (0 when the platform does not say)."""
    try:
        return int(os.sysconf("SC_PHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, ValueError, OSError):
        return 0


def size_problem(config: dict[str, Any], memory: int | None = None) -> str:
    """Why the config's sizes cannot be a model this machine holds ('' when they can): a size that
    is not a positive integer, or weights that cannot fit in memory even in 16 bits - counted from
    below, V*h (the embedding) + L*2*h*i (each layer's MLP), so a model that fits is never refused:

        bytes >= 2 * (vocab_size * hidden_size + num_hidden_layers * 2 * hidden_size * intermediate_size)

    Every family's spelling of the sizes counts (`SIZE_ALIASES`: n_embd, n_layer, n_head, ...).
    Checked before any model loads (transformers would allocate the weights from these sizes)."""
    memory = memory_bytes() if memory is None else memory
    tables = [config] + [v for k, v in config.items() if k.endswith("_config") and isinstance(v, dict)]
    for table in map(canonical_sizes, tables):
        for key in (*SIZE_ALIASES, *SIZE_KEYS):  # the spelling the config uses is named
            value = table.get(key)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                return f"{key} = {value!r}: a size must be a positive integer"
        h, v = table.get("hidden_size") or 0, table.get("vocab_size") or 0
        layers, inner = table.get("num_hidden_layers") or 0, table.get("intermediate_size") or 0
        params = v * h + layers * 2 * h * inner
        if memory and 2 * params > memory:
            return (f"hidden_size {h}, vocab_size {v}, num_hidden_layers {layers}, intermediate_size {inner} make at "
                    f"least {params:.3g} parameters, {2 * params:.3g} bytes even in 16 bits: more than this "
                    f"machine's {memory:.3g} bytes of memory; fix the sizes in the config")
    return ""


def has_mtp(config: dict[str, Any]) -> bool:
    """The checkpoint carries multi-token-prediction layers (GLM-4.5 / DeepSeek-V3 style)."""
    return bool(config.get("num_mtp_layers") or config.get("num_nextn_predict_layers"))


def load_prompts(path: Path, key: str) -> tuple[Prompt, ...]:
    """A JSONL file: one object a line with "text" (and optionally a unique "id"; default p<line>)."""
    if not path.is_file():
        raise ModelError(f"{key}: {path} does not exist; write one JSON object a line, "
                         "e.g. {\"id\": \"greeting\", \"text\": \"Hello\"}")
    prompts: list[Prompt] = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{key}: {path}:{number}"
        try:
            item = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ModelError(f"{where}: not JSON ({exc.msg}); write one object a line, "
                             "e.g. {\"id\": \"greeting\", \"text\": \"Hello\"}") from None
        if not isinstance(item, dict) or not isinstance(item.get("text"), str) or not item["text"]:
            raise ModelError(f"{where}: expected an object with a non-empty \"text\" string")
        pid = item.get("id", f"p{number}")
        if not isinstance(pid, str) or not PROMPT_ID.match(pid):
            raise ModelError(f"{where}: \"id\" {pid!r} must be letters, digits, '-' or '_' (it names record files)")
        if any(p.id == pid for p in prompts):
            raise ModelError(f"{where}: duplicate id {pid!r}; give every prompt its own id")
        prompts.append(Prompt(pid, item["text"], "user"))
    if not prompts:
        raise ModelError(f"{key}: {path} has no prompts; write one JSON object a line")
    return tuple(prompts)


def tokenizer_mismatch(model_dir: Path, assistant_dir: Path) -> str:
    """Why the assistant cannot draft for the model ('' when their vocabularies are the same):
    assisted decoding passes token ids from one to the other."""
    from transformers import AutoTokenizer

    vocab_a = AutoTokenizer.from_pretrained(str(model_dir), trust_remote_code=False).get_vocab()
    vocab_b = AutoTokenizer.from_pretrained(str(assistant_dir), trust_remote_code=False).get_vocab()
    if vocab_a == vocab_b:
        return ""
    differing = sorted(set(vocab_a.items()) ^ set(vocab_b.items()))
    return (f"{len(vocab_a)} vs {len(vocab_b)} tokens, {len(differing)} (token, id) pairs differ "
            f"(e.g. {differing[0][0]!r})")


def resolve(model: UserModel) -> UserModel:
    """Check everything the suites will read, before anything runs; the effective paths (those
    asked for, else every path the model and its assistant support) and the prompts filled in."""
    config = check_checkpoint(model.path, model.key("path"))
    if model.assistant is not None:
        check_checkpoint(model.assistant, model.key("assistant"))
        why = tokenizer_mismatch(model.path, model.assistant)
        if why:
            raise ModelError(f"{model.key('assistant')}: {model.assistant} does not share {model.path}'s tokenizer "
                             f"({why}); an assistant must use the model's tokenizer - pick one of the same family "
                             "or drop the assistant")
    # early exit only where asked: a model not trained to exit early (LayerSkip) drafts noise, lossless but slow
    supported = [p for p in PATHS if (p not in ASSISTANT_PATHS or model.assistant) and (p != "mtp" or has_mtp(config))
                 and p != "early_exit"]
    for path in model.paths:
        if path in ASSISTANT_PATHS and model.assistant is None:
            raise ModelError(f"{model.key('paths')}: {path!r} needs an assistant; add "
                             f"{model.key('assistant')} or remove {path!r} from the paths")
        if path == "mtp" and not has_mtp(config):
            raise ModelError(f"{model.key('paths')}: 'mtp' needs multi-token-prediction layers, and "
                             f"{model.path / 'config.json'} has none (num_mtp_layers / num_nextn_predict_layers); "
                             "remove 'mtp' from the paths")
    prompts = load_prompts(model.prompts_file, model.key("prompts")) if model.prompts_file else tuple(
        p for p in PROMPTS if p.id in DEFAULT_PROMPTS)
    from harness.settings.preflight import checkpoint_params

    return replace(model, paths=tuple(model.paths or supported), prompts=prompts, model_type=config["model_type"],
                   dtype=model.dtype or own_dtype(config), params=checkpoint_params(model.path))


# a checkpoint's saved dtype (config.json `dtype`, `torch_dtype` before transformers 5) -> the harness's
# name; float32 is the run's default anyway, so only a half-precision checkpoint changes anything
SAVED_DTYPES = {"bfloat16": "bf16", "float16": "fp16"}


def own_dtype(config: dict[str, Any]) -> str | None:
    """The dtype the checkpoint was saved in, when it is a half precision one (None: the run's)."""
    saved = config.get("dtype") or config.get("torch_dtype")
    return SAVED_DTYPES.get(saved) if isinstance(saved, str) else None
