"""The text suite's tables (suites/test_text.py): the zoo's distinct tokenizers, the tokenizer zoo
(harness/zoo/tokzoo.py), the families' chat templates, and each user model's own."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from harness.cases.common import TARGET, _p
from harness.cases.registry import Suite, Table
from harness.schema import Case
from harness.settings.run import RunSettings
from harness.zoo import load as zoo_load
from harness.zoo import tokzoo
from harness.zoo.specs import SPECS

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model",
                   "vocab.json", "merges.txt", "added_tokens.json")
CHAT_MODELS = (TARGET,)


def tokenizer_groups(manifest: dict[str, Any] | None, names: Sequence[str]) -> list[tuple[str, ...]]:
    """The zoo models grouped by their tokenizer files' digests in the manifest (one group per
    distinct tokenizer, each in `names`' order, groups in the order of their first model); a model the
    manifest does not list is a group of its own."""
    groups: dict[Any, list[str]] = {}
    for name in names:
        files = ((manifest or {}).get("models", {}).get(name) or {}).get("files")
        key = tuple(sorted((f, d) for f, d in files.items() if f in TOKENIZER_FILES)) if files else name
        groups.setdefault(key, []).append(name)
    return [tuple(g) for g in groups.values()]


def _zoo_manifest(run: RunSettings | None) -> dict[str, Any] | None:
    try:
        return zoo_load.manifest(run.config.models_dir) if run is not None else zoo_load.manifest()
    except zoo_load.FixtureError:
        return None  # every model its own group; loading it reports the missing manifest


def _zoo_model_tokenizers(run: RunSettings | None = None) -> list[Case]:
    """`<model>.tokenizer`: the first model of each distinct zoo tokenizer (`shared_by` names the
    group); a user model's: its own tokenizer."""
    groups = tokenizer_groups(_zoo_manifest(run), [s.name for s in SPECS])
    return [Case(g[0], name=f"{g[0]}.tokenizer", params=_p(shared_by=g)) for g in groups]


tokenizers = Table("tokenizers", _zoo_model_tokenizers,
                   user=lambda m: [Case(m.name, name=f"{m.name}.tokenizer", params=_p(own=True))])


def _tokenizer_zoo(run: RunSettings | None = None) -> list[Case]:
    """`<tok>.tokenizer`: each tokenizer of the tokenizer zoo (harness/zoo/tokzoo.py)."""
    return [Case(t.name, name=f"{t.name}.tokenizer") for t in tokzoo.TOKENIZERS]


# (tokenizer, template): the families' chat templates (harness/zoo/chat_<template>.jinja)
ZOO_CHATS = (("tok-spm", "mistral"), ("tok-spm", "gemma"), ("tok-bytelevel", "llama3"), ("tok-added", "chatml"))


def _family_chats(run: RunSettings | None = None) -> list[Case]:
    """`<tok>.chat.<template>`: a family's chat template with its zoo tokenizer, generated from with
    llama-target's weights."""
    return [Case(tok, name=f"{tok}.chat.{template}", params=_p(template=template)) for tok, template in ZOO_CHATS]


def _zoo_chats(run: RunSettings | None = None) -> list[Case]:
    """`<model>.chat`: the chat-template fixture (harness/zoo/chat_template.jinja) with the
    zoo's `CHAT_MODELS`; a user model's: its own template."""
    return [Case(m, name=f"{m}.chat") for m in CHAT_MODELS]


chats = Table("chats", _zoo_chats, user=lambda m: [Case(m.name, name=f"{m.name}.chat", params=_p(own=True))])
zoo_tokenizers = Table("zoo_tokenizers", _tokenizer_zoo)
zoo_chats = Table("zoo_chats", _family_chats)

SUITE = Suite("text", (tokenizers, chats, zoo_tokenizers, zoo_chats), api='the tokenizer and chat template', units=(20, 20, 0, 0))
