"""The installed transformers' text side as a subject: a tokenizer's encode / decode of a text set,
the types its batch calls return, and `apply_chat_template` rendered, tokenized and fed to generate().

- `tokenize_texts(tok, texts)` -> `Tokenized`: per text the ids without and with special tokens,
  the decodes (default, skip_special_tokens, clean_up_tokenization_spaces=True, of the ids without
  special tokens: the round trip), the decode with the special ids dropped by hand, the batch calls
  (`__call__` on the list, batch_decode, decode of a list of lists) and the type name each call
  returns - every exception transformers raises, as data;
- `pipeline(tok)`: the backend tokenizer's normalizer / pre-tokenizer / decoder / model types
  (from its own JSON), and `configured_clean_up(directory)`: the checkpoint's
  tokenizer_config.json value of clean_up_tokenization_spaces (None: not set);
- `chat_tokenizer(directory, template)`: a tokenizer loaded by `AutoTokenizer.from_pretrained`
  from a temporary directory holding a checkpoint's tokenizer files and `chat_template.jinja`
  (the file a v5 checkpoint ships its template in);
- `render_chat(tok, messages, tools)` -> `Chat`: apply_chat_template with and without the
  generation prompt, with tools where the signature takes them, tokenized by default and with
  return_dict False / True, and the type name of each return; `chat_ids(tok, messages, **kwargs)`:
  one tokenized call's ids (`sanitize_control_tokens` where `supports_sanitize()`);
- every chat template renders on `TEMPLATE_DATE` (`pinned_date`): a template calling
  `strftime_now` (Llama 3.x's "Today Date") renders the same text on every day, so `rendered` and
  `ids` never regress because the calendar moved;
- every chat template renders within bounds (`bounded_templates`): at most `MAX_TEMPLATE_CHARS` of
  template, `MAX_RENDERED_CHARS` of output, `MAX_RENDER_SECONDS` of rendering (an 80-byte template of
  nested loops rendered 17 MB in ~280 s); past one, the call's value is the refusal as an error
  (`{"error": {"type": "TemplateLimit", "message": ...}}`), which the chat cases stop on with the
  reason - never a hang.
"""

from __future__ import annotations

import contextlib
import datetime as _datetime
import inspect
import json
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.subjects import observe, type_name

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model",
                   "vocab.json", "merges.txt", "added_tokens.json")


def _call(fn: Callable[[], Any]) -> Any:
    """The call's result, or its error as data ({"error": {type, message}}) when transformers raised
    - or when a chat template went over the rendering limits (`TemplateLimit`, `bounded_templates`)."""
    try:
        result, error = observe(fn)
    except TemplateLimit as exc:
        return {"error": {"type": "TemplateLimit", "message": str(exc)}}
    return {"error": error} if error is not None else result


def is_error(value: Any) -> bool:
    """A value `_call` recorded as transformers' exception ({"error": {...}})."""
    return isinstance(value, dict) and set(value) == {"error"}


def _ids(encoding: Any) -> Any:
    """input_ids of what a tokenizer call returned (a BatchEncoding, a dict, or the ids themselves)."""
    if is_error(encoding):
        return encoding
    try:
        ids = encoding["input_ids"]
    except (TypeError, KeyError, IndexError):
        ids = encoding
    return ids.tolist() if hasattr(ids, "tolist") else ids


@dataclass
class Tokenized:
    ids: dict[str, Any] = field(default_factory=dict)  # text id -> ids, add_special_tokens=False
    ids_special: dict[str, Any] = field(default_factory=dict)  # add_special_tokens=True (the default)
    decoded: dict[str, Any] = field(default_factory=dict)  # decode(ids_special)
    skip_special: dict[str, Any] = field(default_factory=dict)  # decode(ids_special, skip_special_tokens=True)
    special_dropped: dict[str, Any] = field(default_factory=dict)  # decode(ids_special minus all_special_ids)
    clean_up: dict[str, Any] = field(default_factory=dict)  # decode(ids_special, clean_up_tokenization_spaces=True)
    clean_up_as_set: dict[str, Any] = field(default_factory=dict)  # ... =`clean_up` passed explicitly
    round_trip: dict[str, Any] = field(default_factory=dict)  # decode(ids)
    batch_ids: Any = None  # tok(list of texts).input_ids
    batch_decoded: Any = None  # batch_decode(ids_special list, skip_special_tokens=True)
    list_decoded: Any = None  # decode(ids_special list, skip_special_tokens=True)
    types: dict[str, str] = field(default_factory=dict)  # call -> type name of its return (or "error: <type>")
    setup: dict[str, Any] = field(default_factory=dict)  # special tokens, all_special_ids, attributes


def _type(value: Any) -> str:
    if is_error(value):
        return f"error: {value['error']['type']}"
    return type_name(value)


def _decode(tok: Any, ids: Any, **kwargs: Any) -> Any:
    return _call(lambda: tok.decode(ids, **kwargs))


def decode_ids(tok: Any, ids: Any, **kwargs: Any) -> Any:
    """tok.decode(ids, **kwargs), or its error as data."""
    return _decode(tok, ids, **kwargs)


def tokenize_texts(tok: Any, texts: dict[str, str], clean_up: bool | None = None) -> Tokenized:
    """Every call of `Tokenized`'s fields on `texts` (id -> text), in the text set's order; `clean_up`:
    the clean_up_tokenization_spaces value `clean_up_as_set` passes (None: the tokenizer's attribute)."""
    out = Tokenized()
    special = set(tok.all_special_ids)
    clean_attr = getattr(tok, "clean_up_tokenization_spaces", None)
    clean_set = clean_attr if clean_up is None else clean_up
    out.setup = {"special_tokens": {k: str(v) for k, v in sorted(tok.special_tokens_map.items())},
                 "all_special_ids": sorted(special), "vocab_size": len(tok),
                 "clean_up_tokenization_spaces": clean_attr, "split_special_tokens": getattr(tok, "split_special_tokens", None),
                 "add_prefix_space": getattr(tok, "add_prefix_space", None)}
    for key, text in texts.items():
        ids = _ids(_call(lambda text=text: tok(text, add_special_tokens=False)))
        ids_special = _ids(_call(lambda text=text: tok(text)))
        out.ids[key], out.ids_special[key] = ids, ids_special
        if not isinstance(ids_special, list):
            continue
        out.decoded[key] = _decode(tok, ids_special)
        out.skip_special[key] = _decode(tok, ids_special, skip_special_tokens=True)
        out.special_dropped[key] = _decode(tok, [i for i in ids_special if i not in special])
        out.clean_up[key] = _decode(tok, ids_special, clean_up_tokenization_spaces=True)
        out.clean_up_as_set[key] = _decode(tok, ids_special, clean_up_tokenization_spaces=clean_set)
        if isinstance(ids, list):
            out.round_trip[key] = _decode(tok, ids)
    texts_list = list(texts.values())
    batch = _call(lambda: tok(texts_list))
    out.batch_ids = _ids(batch)
    rows = [out.ids_special[k] for k in texts if isinstance(out.ids_special.get(k), list)]
    batch_decoded = _call(lambda: tok.batch_decode(rows, skip_special_tokens=True))
    list_decoded = _call(lambda: tok.decode(rows, skip_special_tokens=True))
    out.batch_decoded, out.list_decoded = batch_decoded, list_decoded
    first = texts_list[0]
    tensors = _call(lambda: tok(texts_list[:2], padding=True, return_tensors="pt"))
    out.types = {
        "tok(str)": _type(_call(lambda: tok(first))),
        "tok(str).input_ids": _type(_call(lambda: tok(first)["input_ids"])),
        "tok(list)": _type(batch),
        "tok(list).input_ids": _type(out.batch_ids),
        "tok(list, padding=True, return_tensors='pt')": _type(tensors),
        "tok(list, padding=True, return_tensors='pt').input_ids": _type(_call(lambda: tensors["input_ids"])
                                                         if not (isinstance(tensors, dict) and "error" in tensors)
                                                         else tensors),
        "encode(str)": _type(_call(lambda: tok.encode(first))),
        "decode(list[int])": _type(_call(lambda: tok.decode(rows[0]))),
        "decode(list[list[int]])": _type(list_decoded),
        "batch_decode(list[list[int]])": _type(batch_decoded),
    }
    return out


def pipeline(tok: Any) -> dict[str, Any]:
    """The backend tokenizer's stages as its JSON names them: {normalizer, pre_tokenizer, decoder,
    model} (a Sequence lists its members' types); {} for a tokenizer without a `tokenizers` backend."""
    backend = getattr(tok, "backend_tokenizer", None)
    if backend is None:
        return {}
    data = json.loads(backend.to_str())

    def kind(stage: Any) -> Any:
        if not isinstance(stage, dict):
            return None
        members = stage.get("pretokenizers") or stage.get("decoders") or stage.get("normalizers")
        return [kind(m) for m in members] if stage.get("type") == "Sequence" and members else stage.get("type")

    return {"normalizer": kind(data.get("normalizer")), "pre_tokenizer": kind(data.get("pre_tokenizer")),
            "decoder": kind(data.get("decoder")), "model": kind(data.get("model"))}


def configured_clean_up(directory: Path) -> Any:
    """clean_up_tokenization_spaces as the checkpoint's tokenizer_config.json sets it (None: unset)."""
    path = Path(directory) / "tokenizer_config.json"
    if not path.is_file():
        return None
    return json.loads(path.read_text()).get("clean_up_tokenization_spaces")


# ----------------------------------------------------------------------------------------------
# chat templates


def chat_tokenizer(directory: Path, template: str) -> tuple[Any, dict[str, str] | None]:
    """(tokenizer, None), or (None, error): `AutoTokenizer.from_pretrained` of a temporary copy of
    `directory`'s tokenizer files beside a `chat_template.jinja` holding `template`."""
    from transformers import AutoTokenizer

    with tempfile.TemporaryDirectory(prefix="harness-chat-") as tmp:
        for name in TOKENIZER_FILES:
            if (Path(directory) / name).is_file():
                shutil.copyfile(Path(directory) / name, Path(tmp) / name)
        (Path(tmp) / "chat_template.jinja").write_text(template)
        return observe(lambda: AutoTokenizer.from_pretrained(tmp, trust_remote_code=False))


def supports_tools() -> bool:
    """apply_chat_template takes `tools` (by introspection)."""
    from transformers import PreTrainedTokenizerBase

    return "tools" in inspect.signature(PreTrainedTokenizerBase.apply_chat_template).parameters


def supports_sanitize() -> bool:
    """apply_chat_template takes `sanitize_control_tokens` (5.24: special-token text in a message's
    content is encoded as text, not as the control token), by introspection."""
    from transformers import PreTrainedTokenizerBase

    return "sanitize_control_tokens" in inspect.signature(PreTrainedTokenizerBase.apply_chat_template).parameters


TEMPLATE_DATE = _datetime.datetime(2026, 1, 1, 12, 0, 0)  # the day every chat template renders on


class _PinnedDatetime(_datetime.datetime):
    """datetime whose now() / today() is `TEMPLATE_DATE` (what a template's strftime_now reads)."""

    @classmethod
    def now(cls, tz=None):  # noqa: ANN001, ANN206 - datetime's signature
        return TEMPLATE_DATE if tz is None else TEMPLATE_DATE.replace(tzinfo=tz)

    @classmethod
    def today(cls):  # noqa: ANN206
        return TEMPLATE_DATE


@contextlib.contextmanager
def pinned_date() -> Iterator[bool]:
    """Within the block, transformers' `strftime_now` (chat_template_utils: `datetime.now()
    .strftime(format)`, read at render time in 4.57 - 5.24) sees `TEMPLATE_DATE`. Yields whether
    the pin applies (False: the installed version renders dates some other way)."""
    try:
        from transformers.utils import chat_template_utils as utils
    except ImportError:  # pragma: no cover - every supported version has the module
        yield False
        return
    clock = getattr(utils, "datetime", None)
    if not (isinstance(clock, type) and issubclass(clock, _datetime.datetime)):
        yield False
        return
    utils.datetime = _PinnedDatetime
    try:
        yield True
    finally:
        utils.datetime = clock


MAX_TEMPLATE_CHARS = 1_000_000  # a chat template (the families' are 1-20 kB)
MAX_RENDERED_CHARS = 1_000_000  # what one rendering may produce (the harness's chats render < 5 kB)
MAX_RENDER_SECONDS = 10.0  # one rendering (the harness's take milliseconds)


class TemplateLimit(Exception):
    """A chat template over `MAX_TEMPLATE_CHARS`, or a rendering over `MAX_RENDERED_CHARS` or
    `MAX_RENDER_SECONDS`: not rendered further (the message says which)."""


# templates that went over a limit in this process -> the refusal: refused again at once (a chat
# case renders one template five to ten times; each would wait out MAX_RENDER_SECONDS again)
_OVER_LIMIT: dict[str, str] = {}


class _Bounded:
    """A compiled jinja template whose `render` / `generate` stop at the limits: the output counted
    chunk by chunk, the time by a deadline per chunk and, on the main thread, an alarm (a loop that
    prints nothing yields no chunk)."""

    def __init__(self, template: Any, source: str) -> None:
        self._template = template
        self._source = source

    def __getattr__(self, name: str) -> Any:
        return getattr(self._template, name)

    def generate(self, *args: Any, **kwargs: Any) -> Iterator[str]:
        size, deadline = 0, time.monotonic() + MAX_RENDER_SECONDS
        try:
            with _alarm(MAX_RENDER_SECONDS):
                for chunk in self._template.generate(*args, **kwargs):
                    size += len(chunk)
                    if size > MAX_RENDERED_CHARS:
                        raise TemplateLimit(f"the chat template rendered over {MAX_RENDERED_CHARS} characters; not "
                                            "rendered further (a chat renders a few kB)")
                    if time.monotonic() > deadline:
                        raise TemplateLimit(_too_long())
                    yield chunk
        except TemplateLimit as exc:
            _OVER_LIMIT[self._source] = str(exc)
            raise

    def render(self, *args: Any, **kwargs: Any) -> str:
        return "".join(self.generate(*args, **kwargs))


def _too_long() -> str:
    return f"the chat template rendered for over {MAX_RENDER_SECONDS:g} s; stopped (a chat renders in milliseconds)"


@contextlib.contextmanager
def _alarm(seconds: float) -> Iterator[None]:
    """SIGALRM raising `TemplateLimit` after `seconds` (main thread only; an alarm already set to go
    off sooner is left as it is, and one set for later is put back, less the time spent)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield
        return
    pending, interval = signal.getitimer(signal.ITIMER_REAL)
    if 0 < pending <= seconds:
        yield
        return

    def expired(signum: int, frame: Any) -> None:
        raise TemplateLimit(_too_long())

    previous = signal.signal(signal.SIGALRM, expired)
    start = time.monotonic()
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if pending:
            signal.setitimer(signal.ITIMER_REAL, max(pending - (time.monotonic() - start), 1e-3), interval)


@contextlib.contextmanager
def bounded_templates() -> Iterator[bool]:
    """Within the block, every chat template transformers compiles (chat_template_utils
    `_compile_jinja_template`, looked up at render time in 4.57 - 5.24) renders within the limits
    (`_Bounded`). Yields whether the bound applies (False: the installed version compiles some
    other way)."""
    try:
        from transformers.utils import chat_template_utils as utils
    except ImportError:  # pragma: no cover - every supported version has the module
        yield False
        return
    compile_ = getattr(utils, "_compile_jinja_template", None)
    if not callable(compile_):
        yield False
        return

    def bounded(chat_template: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(chat_template, str) and len(chat_template) > MAX_TEMPLATE_CHARS:
            raise TemplateLimit(f"the chat template is {len(chat_template)} characters, over {MAX_TEMPLATE_CHARS}; "
                                "not rendered")
        if chat_template in _OVER_LIMIT:
            raise TemplateLimit(_OVER_LIMIT[chat_template])
        return _Bounded(compile_(chat_template, *args, **kwargs), chat_template)

    utils._compile_jinja_template = bounded
    try:
        yield True
    finally:
        utils._compile_jinja_template = compile_


@contextlib.contextmanager
def rendering() -> Iterator[None]:
    """What every chat rendering runs in: the pinned date and the bounds."""
    with pinned_date(), bounded_templates():
        yield


def chat_ids(tok: Any, messages: Sequence[dict[str, str]], **kwargs: Any) -> Any:
    """input_ids of apply_chat_template(messages, add_generation_prompt=True, **kwargs) (or its error)."""
    with rendering():
        return _ids(_call(lambda: tok.apply_chat_template([dict(m) for m in messages], add_generation_prompt=True,
                                                          **kwargs)))


@dataclass
class Chat:
    rendered: dict[str, Any] = field(default_factory=dict)  # variant -> text (or error)
    ids: Any = None  # the default tokenized call's input_ids
    ids_by_return_dict: dict[str, Any] = field(default_factory=dict)  # "False"/"True" -> input_ids
    types: dict[str, str] = field(default_factory=dict)  # call -> type name of its return


def render_chat(tok: Any, messages: Sequence[dict[str, str]], tools: Sequence[dict] | None) -> Chat:
    """apply_chat_template of `messages`: rendered (tokenize=False) with and without the generation
    prompt, and with `tools` (None: the version does not take them); tokenized with the generation
    prompt by default and with return_dict False and True; each return's type name. Rendered on
    `TEMPLATE_DATE` (`pinned_date`), within the limits (`bounded_templates`)."""
    with rendering():
        return _render_chat(tok, messages, tools)


def _render_chat(tok: Any, messages: Sequence[dict[str, str]], tools: Sequence[dict] | None) -> Chat:
    out = Chat()
    msgs = [dict(m) for m in messages]
    variants = {"generation_prompt": dict(add_generation_prompt=True),
                "no_generation_prompt": dict(add_generation_prompt=False)}
    if tools is not None:
        variants["tools"] = dict(add_generation_prompt=True, tools=[dict(t) for t in tools])
    for name, kwargs in variants.items():
        out.rendered[name] = _call(lambda kwargs=kwargs: tok.apply_chat_template(msgs, tokenize=False, **kwargs))
    default = _call(lambda: tok.apply_chat_template(msgs, add_generation_prompt=True))
    out.ids = _ids(default)
    as_list = _call(lambda: tok.apply_chat_template(msgs, add_generation_prompt=True, return_dict=False))
    as_dict = _call(lambda: tok.apply_chat_template(msgs, add_generation_prompt=True, return_dict=True))
    out.ids_by_return_dict = {"False": _ids(as_list), "True": _ids(as_dict)}
    out.types = {"tokenize=False": _type(out.rendered["generation_prompt"]),
                 "tokenize=True": _type(default),
                 "tokenize=True, return_dict=False": _type(as_list),
                 "tokenize=True, return_dict=True": _type(as_dict)}
    return out


# ----------------------------------------------------------------------------------------------
# the tokenizer zoo (harness/designs/tokenizer_zoo.py): a tokenizer directory of its own


def load_tokenizer(directory: Path, template: str | None = None) -> tuple[Any, dict[str, str] | None]:
    """(tokenizer, None) or (None, error): `AutoTokenizer.from_pretrained(directory)`, beside a
    `chat_template.jinja` holding `template` when one is given (`chat_tokenizer`)."""
    if template is not None:
        return chat_tokenizer(directory, template)
    from transformers import AutoTokenizer

    return observe(lambda: AutoTokenizer.from_pretrained(str(directory), trust_remote_code=False))


def encode_detail(tok: Any, text: str, add_special_tokens: bool) -> Any:
    """{ids, tokens, offsets} of one call `tok(text, return_offsets_mapping=True)` (or its error)."""
    def call() -> dict[str, Any]:
        enc = tok(text, add_special_tokens=add_special_tokens, return_offsets_mapping=True)
        ids = list(enc["input_ids"])
        return {"ids": ids, "tokens": list(tok.convert_ids_to_tokens(ids)),
                "offsets": [list(o) for o in enc["offset_mapping"]]}
    return _call(call)


def streamed(tok: Any, ids: Sequence[int], **decode_kwargs: Any) -> Any:
    """The pieces `TextStreamer(tok, **decode_kwargs)` hands to on_finalized_text when the ids are
    put one at a time (as generate() does after the prompt), then end() (or its error)."""
    import torch
    from transformers import TextStreamer

    class Collect(TextStreamer):
        pieces: list[str]

        def on_finalized_text(self, text: str, stream_end: bool = False) -> None:
            self.pieces.append(text)

    def run() -> list[str]:
        streamer = Collect(tok, skip_prompt=False, **decode_kwargs)
        streamer.pieces = []
        for i in ids:
            streamer.put(torch.tensor([int(i)]))
        streamer.end()
        return streamer.pieces
    return _call(run)


def padded_batches(tok: Any, prompts: Sequence[str]) -> dict[str, Any]:
    """A batch as users build it: `tok(prompts, padding=True)` with the tokenizer's own side
    ("default") and with padding_side="left" / "right" at call time - {input_ids, attention_mask} or
    the error. A tokenizer with no pad token is first called as it is (`no_pad_token`: what it raised,
    or the batch), then on a copy given `pad_token = eos_token`, as users do (`pad_token_set`)."""
    import copy

    def batch(t: Any, side: str | None) -> Any:
        def call() -> dict[str, Any]:
            enc = t(list(prompts), padding=True, **({"padding_side": side} if side else {}))
            return {"input_ids": [list(r) for r in enc["input_ids"]],
                    "attention_mask": [list(r) for r in enc["attention_mask"]]}
        return _call(call)

    out: dict[str, Any] = {"pad_token": _plain(tok.pad_token)}
    if tok.pad_token is None:
        out["no_pad_token"] = batch(tok, None)
        tok = copy.deepcopy(tok)
        tok.pad_token = tok.eos_token
        out["pad_token_set"] = _plain(tok.pad_token)
    out.update({side or "default": batch(tok, side) for side in (None, "left", "right")})
    return out


def tokenizer_setup(tok: Any) -> dict[str, Any]:
    """The class transformers chose and the attributes that steer a family's pipeline."""
    return {"class": type(tok).__name__, "vocab_size": len(tok),
            "special_tokens": {k: str(v) for k, v in sorted(tok.special_tokens_map.items())},
            "all_special_ids": sorted(tok.all_special_ids),
            **{name: _plain(getattr(tok, name, None)) for name in (
                "add_prefix_space", "legacy", "add_bos_token", "add_eos_token", "padding_side",
                "clean_up_tokenization_spaces", "split_special_tokens", "model_max_length")}}


def _plain(value: Any) -> Any:
    return value if value is None or isinstance(value, (bool, int, float, str)) else repr(value)


def render_family(tok: Any, messages: Sequence[dict[str, str]], tools: Sequence[dict] | None,
                  continued: Sequence[dict[str, str]]) -> dict[str, Any]:
    """apply_chat_template of a family's template, on `TEMPLATE_DATE`: rendered with / without the
    generation prompt, with `tools` (None: not passed), `continued` (a conversation ending in an
    assistant message) with continue_final_message=True; the default tokenized ids of the first and
    of the continued one."""
    msgs, cont = [dict(m) for m in messages], [dict(m) for m in continued]
    with rendering():
        rendered = {"generation_prompt": _call(lambda: tok.apply_chat_template(msgs, tokenize=False,
                                                                                add_generation_prompt=True)),
                    "no_generation_prompt": _call(lambda: tok.apply_chat_template(msgs, tokenize=False)),
                    "continue_final_message": _call(lambda: tok.apply_chat_template(
                        cont, tokenize=False, continue_final_message=True))}
        if tools is not None:
            rendered["tools"] = _call(lambda: tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True,
                                                                      tools=[dict(t) for t in tools]))
        ids = _ids(_call(lambda: tok.apply_chat_template(msgs, add_generation_prompt=True)))
        ids_continued = _ids(_call(lambda: tok.apply_chat_template(cont, continue_final_message=True)))
    return {"rendered": rendered, "ids": ids, "ids_continued": ids_continued}
