"""`harness init`: a commented starter `[tool.harness]` block (with your model) in ./pyproject.toml
and its golden_dir; a pyproject.toml that has one already is left alone."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.cli.common import EXIT_OK
from harness.cli.project import UsageError
from harness.fixtures.zoo import MODELS_DIR
from harness.settings.models import NAME

try:
    import tomllib
except ImportError:  # pragma: no cover - python 3.10
    import tomli as tomllib


def starter_block(name: str, model: str | None, assistant: str | None, models_dir: Path) -> str:
    """The commented `[tool.harness]` block `harness init` writes (TOML; strings JSON-quoted)."""
    def q(value: str) -> str:
        return json.dumps(value)

    path = q(str(Path(model).resolve())) if model else q("/path/to/your/model")
    helper = f"assistant = {q(str(Path(assistant).resolve()))}" if assistant else \
        '# assistant = "/path/to/a/smaller/model"'
    return f"""
[tool.harness]
# written by `harness init`: every key is described in genharness's README, "Configuration"
golden_dir = "golden/records"  # your golden records, <env-key>/<suite>/<case>.json: commit them
models_dir = {q(str(models_dir))}  # the harness's fixture zoo (hash-checked)
reports_dir = "reports"        # HTML reports (git-ignore it)
# baseline = ""                # env key to compare against ("" = this environment's own records)

[tool.harness.models.{name}]
path = {path}  # a save_pretrained directory (safetensors only; never unpickled)
{helper}  # same tokenizer; enables the assisted / ensemble cases
# dtype = "bf16"               # the dtype you serve in (default: the run's, --dtype, fp32)
# prompts = "prompts.jsonl"    # your prompts, one {{"id": "...", "text": "..."}} a line (default: two built-in)
# paths = ["plain", "assisted", "prompt_lookup", "mtp", "ensemble"]  # default: every path it supports
"""


def init_project(directory: Path, name: str, model: str | None, assistant: str | None) -> tuple[Path, Path]:
    """Append the starter block to directory/pyproject.toml (created if absent) and create its
    golden_dir; a pyproject.toml that has [tool.harness] already is left alone (UsageError)."""
    if not NAME.match(name):
        raise UsageError(f"--name {name!r}: use letters, digits, '-' and '_' (it prefixes case ids and record files)")
    if assistant and not model:
        raise UsageError("--assistant needs --model PATH (the model it drafts for)")
    pyproject = directory / "pyproject.toml"
    text = pyproject.read_text(encoding="utf-8") if pyproject.is_file() else ""
    try:
        has = "harness" in tomllib.loads(text).get("tool", {})
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{pyproject}: not valid TOML ({exc}); fix it before `harness init`") from exc
    if has:
        raise UsageError(f"{pyproject} already has [tool.harness]; edit it (README, 'Configuration') "
                         "instead of running init again")
    block = starter_block(name, model, assistant, MODELS_DIR)
    pyproject.write_text(text + ("\n" if text and not text.endswith("\n") else "") + block.lstrip("\n" if not text else ""),
                         encoding="utf-8")
    golden = directory / "golden" / "records"
    golden.mkdir(parents=True, exist_ok=True)
    return pyproject, golden


def cmd_init(args: argparse.Namespace, extra: Sequence[str]) -> int:
    pyproject, golden = init_project(Path.cwd(), args.name, args.model, args.assistant)
    print(f"harness: wrote [tool.harness] to {pyproject} and created {golden}")
    print("next: set path = ... to your checkpoint (if you did not pass --model), then run `harness check`")
    return EXIT_OK


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("init", help="write a commented starter [tool.harness] block for the current directory",
                       description="Write a starter [tool.harness] block into ./pyproject.toml (created if absent) "
                                   "and create its golden_dir; refuses a pyproject.toml that has one already.")
    p.add_argument("--model", metavar="PATH", help="your checkpoint (default: a placeholder path to edit)")
    p.add_argument("--assistant", metavar="PATH", help="its assistant (optional)")
    p.add_argument("--name", default="my-model", help="the model's name in case ids (default my-model)")
    p.set_defaults(func=cmd_init)
