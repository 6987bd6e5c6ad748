"""The reference engine's side of a run: whether it can be the expected side for a model, its model
of that checkpoint, and its answers through the on-disk cache - never transformers.

`EngineOracle.gap(name)` says why the engine cannot judge a model ('' when it can: a model type it
implements, RoPE it implements, its stop token); `model(name)` is harness/engine/model.py's `Model` of
the checkpoint (the fixture zoo's from its reference weights, a user's from its files, mapped when
large); `answer(...)` is one of its computed answers, from harness/store/cache.py when that cache holds
exactly this question. The designs reach it as `zoo.oracle`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from harness.store.cache import AnswerCache, source_digest
from harness.subjects.checkpoints import Checkpoints
from harness.zoo import load as zoo_load

EOS = 2  # the one end token the reference engine stops at (harness/subjects/engine.py decodes to it)


class EngineOracle:
    """The reference engine over a run's `checkpoints`, its answers cached in `answers`."""

    def __init__(self, checkpoints: Checkpoints, answers: AnswerCache | None = None):
        self.checkpoints = checkpoints
        self.answers = answers or AnswerCache(None, enabled=False)  # the engine's answers on disk (store/cache.py)
        self._models: dict[str, Any] = {}

    def gap(self, name: str) -> str:
        """Why the reference engine cannot be the expected side for this model ('' when it can)."""
        from harness.engine.model import SCALED_ROPE, SUPPORTED, RopeScaling, rope_type_of

        config = self.checkpoints.config_json(name)
        model_type = config.get("model_type", "?")
        if model_type not in SUPPORTED:
            return f"the reference engine does not implement model_type {model_type!r} (it has {', '.join(SUPPORTED)})"
        if not self.checkpoints.is_user(name):
            return ""
        rope = config.get("rope_parameters") or config.get("rope_scaling") or {}
        per_kind = [rope_type_of(v) for v in rope.values() if isinstance(v, dict)]
        kind = rope_type_of(rope)
        if any(k != "default" for k in per_kind) or (not per_kind and kind not in ("default", *SCALED_ROPE)):
            return (f"the reference engine implements default RoPE and, one for every layer, "
                    f"{'/'.join(SCALED_ROPE)} scaling; {name} uses {per_kind or kind!r}")
        try:
            RopeScaling.from_params(rope if not per_kind else {}, config.get("max_position_embeddings"))
        except ValueError as exc:
            return f"the reference engine cannot run {name}'s {kind!r} RoPE: {exc}"
        if config.get("eos_token_id") != EOS:
            return f"the reference engine stops at token {EOS} only, {name}'s eos_token_id is {config.get('eos_token_id')!r}"
        return ""

    def model(self, name: str) -> Any:
        """The reference engine's model, or None when it cannot be the expected side (`gap`)."""
        if name not in self._models:
            if self.gap(name):
                self._models[name] = None
            elif self.checkpoints.is_user(name):
                from harness.engine.model import Model

                # large: the file's pages, mapped
                self._models[name] = Model.load(self.checkpoints.directory(name), mapped=self.checkpoints.large(name))
            else:
                self._models[name] = zoo_load.load_reference(name, self.checkpoints.models_dir)
        return self._models[name]

    def answer(self, kind: str, models: Sequence[str | None], args: Any, compute: Callable[[], Any]) -> Any:
        """The reference engine's answer `kind` about `models` for `args`, from the on-disk cache
        when it holds exactly this question (weights, torch, the code of the engine and of the module
        that defines `compute` - a design's reference code - by import graph), else computed."""
        import torch

        code = source_digest("harness.subjects.engine", getattr(compute, "__module__", None) or "harness.subjects.engine")
        key = {"kind": kind, "models": {m: self.checkpoints.weights_id(m) for m in models if m}, "args": args,
               "code": code, "torch": torch.__version__}
        return self.answers.get(key, compute)
