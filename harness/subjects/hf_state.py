"""The generation state a loaded transformers model keeps between `generate()` calls, and its reset.

A model is loaded once per process (harness/subjects/hf.py `Zoo`) and shared by every case of
that worker; `generate()` leaves state on it that changes what a later call does:

- `_previous_max_cache_length` (5.x): a static cache is made at least as long as the longest one
  an earlier call used, so an earlier long call hides a later call's write past its own cache
  (prompt lookup on a static cache: `IndexError: index_copy_(): index 43 is out of bounds`);
- `_cache` (4.x - 5.14): the static cache itself, reused when long enough;
- `_compiled_call` / `_last_compile_config`: a compiled forward;
- `generation_config`: assisted decoding's heuristic schedule writes its draft length back into
  the assistant's config;
- `config`: nothing should write it, but a call that raises half way can leave it changed (5.0.0's
  early exit: `num_hidden_layers` cut to the exit layer and never put back) - the call's own error
  records that (`config_drift`, hf.py `Zoo.generate`), and the next case gets the model as loaded;
- on submodules: scalar attributes (a dynamic rotary embedding's `max_seq_len_cached`) and
  buffers it re-registers (its `inv_freq`).

`ModelState.of(model)` takes a snapshot right after loading; `restore()` puts the model back to it
(private attributes added since are deleted, changed scalars and replaced buffers put back, the
generation config restored), so a call's outcome is a function of the call, never of the test
order. Oracle of its test: the same cases run in two orders give the same records.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

SCALARS = (int, float, bool, str, type(None))


@dataclass
class ModelState:
    model: Any
    attributes: frozenset[str]  # the model's own instance attributes at load
    scalars: dict[tuple[str, str], Any]  # (submodule, attribute) -> its scalar value at load
    buffers: dict[tuple[str, str], Any]  # (submodule, buffer) -> the tensor object at load
    generation_config: Any
    config: dict[str, Any]  # the model config's scalar attributes at load (a call must never change them)

    @classmethod
    def of(cls, model: Any) -> ModelState:
        """The model's state now (call right after loading)."""
        scalars, buffers = {}, {}
        for path, module in model.named_modules():
            for name, value in vars(module).items():
                if isinstance(value, SCALARS):
                    scalars[(path, name)] = value
            for name, tensor in module._buffers.items():
                buffers[(path, name)] = tensor
        config = getattr(model, "generation_config", None)
        return cls(model, frozenset(vars(model)), scalars, buffers, copy.deepcopy(config), _config_scalars(model))

    def config_drift(self) -> list[str]:
        """The model config's scalar attributes a call left changed, as 'config.<name>: old -> new' - a call
        that fails half way can leave them so (5.0.0's early exit sets `num_hidden_layers` to the exit
        layer, raises, and never puts it back: every later call runs half the model)."""
        now = _config_scalars(self.model)
        return [f"config.{name}: {old!r} -> {now.get(name, '<removed>')!r}" for name, old in self.config.items()
                if now.get(name, old) != old]

    def drift(self) -> list[str]:
        """What differs from the snapshot, as 'name' strings (empty: the model is as loaded)."""
        found = [f"attribute {name}" for name in vars(self.model) if name not in self.attributes and name.startswith("_")]
        modules = dict(self.model.named_modules())
        for (path, name), value in self.scalars.items():
            module = modules.get(path)
            if module is not None and vars(module).get(name, value) != value:
                found.append(f"{path or 'model'}.{name}")
        for (path, name), tensor in self.buffers.items():
            module = modules.get(path)
            if module is not None and module._buffers.get(name) is not tensor:
                found.append(f"buffer {path or 'model'}.{name}")
        config = getattr(self.model, "generation_config", None)
        if self.generation_config is not None and config != self.generation_config:
            found.append("generation_config")
        return found + self.config_drift()

    def restore(self) -> list[str]:
        """Put the model back to its snapshot; returns what had drifted (`drift()`)."""
        drifted = self.drift()
        if not drifted:
            return drifted
        for name in [n for n in vars(self.model) if n not in self.attributes and n.startswith("_")]:
            delattr(self.model, name)
        modules = dict(self.model.named_modules())
        for (path, name), value in self.scalars.items():
            module = modules.get(path)
            if module is not None and name in vars(module):
                setattr(module, name, value)
        for (path, name), tensor in self.buffers.items():
            module = modules.get(path)
            if module is not None and name in module._buffers:
                module._buffers[name] = tensor
        if self.generation_config is not None:
            self.model.generation_config = copy.deepcopy(self.generation_config)
        config = getattr(self.model, "config", None)
        for name, value in self.config.items():
            if config is not None and vars(config).get(name, value) != value:
                setattr(config, name, value)
        return drifted


def _config_scalars(model: Any) -> dict[str, Any]:
    config = getattr(model, "config", None)
    return {k: v for k, v in vars(config).items() if isinstance(v, SCALARS)} if config is not None else {}
