"""Where each checkpoint of a run lives and what it is - no loading, no engine.

`Checkpoints` answers for every model name a case holds: the fixture zoo's, from `[tool.harness]
models_dir` (its files checked against manifest.json on use), and the user's own models and their
assistants (harness/settings/models.py `UserModel`, checked up front by `resolve`) - the directory, the
config, the dtype it is loaded in (a user model's own, else the run's), whether it is large enough to
hold once per process, the prompts it is asked, and a digest of its weights (what the engine's cached
answers depend on). harness/subjects/hf.py `Zoo` loads through it; harness/subjects/oracle.py
`EngineOracle` builds the reference engine's model from it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.schema import MissingExtra
from harness.settings.models import UserModel
from harness.zoo import load as zoo_load
from harness.zoo.prompts import BY_ID


class Checkpoints:
    """The checkpoints of a run: the fixture zoo's in `models_dir` and the `user` models."""

    def __init__(self, models_dir: Path | str = zoo_load.MODELS_DIR, dtype: str = "fp32",
                 user: Sequence[UserModel] = ()):
        self.models_dir = Path(models_dir)
        self.dtype = dtype  # the run's: a model without a dtype of its own is loaded in it
        self.user = {m.name: m for m in user}
        self.assistants = {m.assistant_name: m for m in user if m.assistant_name}
        self._weights: dict[str, str] = {}

    def owner(self, name: str) -> UserModel | None:
        """The user model `name` is, or whose assistant it is (None: a zoo model)."""
        return self.user.get(name) or self.assistants.get(name)

    def path(self, name: str) -> Path:
        if name in self.user:
            if self.user[name].unavailable:  # the real model without its extra: every case of it skips
                raise MissingExtra(self.user[name].unavailable)
            return self.user[name].path
        if name in self.assistants:
            return self.assistants[name].assistant  # type: ignore[return-value]
        return self.models_dir / name

    def directory(self, name: str) -> Path:
        """The checkpoint's directory; a zoo model's files are checked against the manifest
        (`FixtureError`), a user model's were checked up front (harness/settings/models.py `resolve`)."""
        if self.is_user(name):
            return self.path(name)
        return zoo_load.check_files(name, models_dir=self.models_dir)

    def tokenizer_directory(self, name: str) -> Path:
        """A directory of the tokenizer zoo, its files checked against the manifest's `tokenizers`."""
        return zoo_load.check_tokenizer(name, models_dir=self.models_dir)

    def is_user(self, name: str) -> bool:
        return name in self.user or name in self.assistants

    def is_model(self, name: str) -> bool:
        """A checkpoint of a model (a user's, or the zoo's with its config.json), not a tokenizer of the
        tokenizer zoo or a case's other subject ("torch")."""
        return self.is_user(name) or (self.models_dir / name / "config.json").is_file()

    def dtype_of(self, name: str) -> str:
        """The dtype a model is loaded in: a user model's configured one, else the run's."""
        owner = self.owner(name)
        return (owner.dtype if owner else None) or self.dtype

    def config_json(self, name: str) -> dict[str, Any]:
        return json.loads((self.path(name) / "config.json").read_text())

    def model_type(self, name: str) -> str:
        return self.config_json(name).get("model_type", "?")

    def stateful(self, name: str) -> bool:
        """The model has recurrent-state (linear-attention) layers: transformers refuses
        speculative decoding on it."""
        from harness.engine.cache import has_linear_attention

        return has_linear_attention(self.config_json(name))

    def large(self, name: str) -> bool:
        """A user model of real size (over the budget plan's threshold, or under a budget plan):
        held once per process (`Zoo.release`); a small one keeps each backend's load for the process."""
        from harness.settings.budget import THRESHOLD

        owner = self.owner(name)
        return owner is not None and (owner.params > THRESHOLD or owner.plan.budgeted)

    def weights_id(self, name: str) -> str:
        """sha256 over the model's config.json and safetensors files (what the engine's answers depend on)."""
        if name not in self._weights:
            digest = hashlib.sha256()
            directory = self.directory(name)
            for path in sorted([directory / "config.json", *directory.glob("*.safetensors")]):
                digest.update(path.name.encode())
                with path.open("rb") as handle:
                    for block in iter(lambda: handle.read(1 << 20), b""):
                        digest.update(block)
            self._weights[name] = digest.hexdigest()
        return self._weights[name]

    def prompt_text(self, name: str, prompt: str) -> str:
        """A prompt id's text: the user model's own prompts, else the zoo's held-out ones."""
        owner = self.user.get(name)
        if owner is not None and owner.prompts:
            found = {p.id: p.text for p in owner.prompts}
            if prompt in found:
                return found[prompt]
        return BY_ID[prompt].text
