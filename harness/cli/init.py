"""`harness init`: a commented starter `[tool.harness]` block (with your model) in ./pyproject.toml,
its golden_dir, and a `.gitignore` for what a run leaves behind; a pyproject.toml that has the block
already is left alone.

Every path it writes is relative to the project (a path you give as absolute stays absolute), so
the project works from any checkout - a CI runner's included. The fixture zoo and the suites come
from the installed harness (no `models_dir` line: harness/settings/config.py defaults it to the
zoo that ships with the package). A `--model` that is not a save_pretrained directory with
safetensors weights is refused before anything is written.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.cli import ci
from harness.cli.common import EXIT_OK
from harness.cli.project import UsageError
from harness.settings.models import NAME, ModelError, check_checkpoint
from harness.store.reading import InputError, read_toml

# what a run leaves in the project that is not for version control (records are: commit them)
GITIGNORE = ("reports/", ".pytest_cache/", "__pycache__/", ".hypothesis/", ".benchmarks/")


def project_path(directory: Path, given: str) -> str:
    """A path as the project's config should hold it: relative to `directory` when given relative
    (normalised: `./m` -> `m`, `models/../m` -> `m`), as given when absolute."""
    if Path(given).is_absolute():
        return given
    return Path(os.path.relpath(Path(os.path.abspath(directory / given)), directory)).as_posix()


def starter_block(name: str, model: str | None, assistant: str | None) -> str:
    """The commented `[tool.harness]` block `harness init` writes (TOML; strings JSON-quoted)."""
    def q(value: str) -> str:
        return json.dumps(value)

    path = q(model) if model else q("path/to/your/model")
    helper = f"assistant = {q(assistant)}" if assistant else '# assistant = "path/to/a/smaller/model"'
    return f"""
[tool.harness]
# written by `harness init`: every key is described in genharness's docs/your-models.md, "Configuration"
golden_dir = "golden/records"  # your golden records, <env-key>/<suite>/<case>.json: commit them
reports_dir = "reports"        # HTML reports (git-ignored)
# models_dir = "..."           # the fixture zoo (default: the one installed with genharness, hash-checked)
# baseline = ""                # env key to compare against ("" = this environment's own records)
# zoo = true                   # also run the fixture zoo's cases (default: only your models below)

[tool.harness.models.{name}]
path = {path}  # relative to this file; a save_pretrained directory (safetensors only; never unpickled)
{helper}  # same tokenizer; enables the assisted / ensemble cases
# dtype = "bf16"               # the dtype you serve in (default: the checkpoint's own bf16 / fp16, else --dtype, fp32)
# prompts = "prompts.jsonl"    # your prompts, one {{"id": "...", "text": "..."}} a line (default: two built-in)
# paths = ["plain", "assisted", "prompt_lookup", "mtp", "ensemble"]  # default: every path it supports
"""


def gitignore_text(directory: Path) -> tuple[str | None, list[str]]:
    """./.gitignore's text with the GITIGNORE lines it lacks added (None: nothing to add), and those lines."""
    path = directory / ".gitignore"
    text = path.read_text(encoding="utf-8") if path.is_file() else ""
    have = {line.strip() for line in text.splitlines()}
    added = [line for line in GITIGNORE if line not in have and line.rstrip("/") not in have]
    if not added:
        return None, []
    lead = "" if not text or text.endswith("\n") else "\n"
    header = "" if text else "# written by `harness init`: what a harness run leaves that is not for git\n"
    return text + lead + header + "\n".join(added) + "\n", added


def write_all_or_nothing(files: dict[Path, str], dirs: Sequence[Path]) -> None:
    """Write `files` and create `dirs`; on any OSError put back what was there (a file's old text,
    no new file or directory) and raise UsageError naming what could not be written."""
    before = {path: path.read_bytes() if path.is_file() else None for path in files}
    made: list[Path] = []
    try:
        for directory in dirs:
            for part in reversed([directory, *directory.parents]):
                if not part.exists():
                    part.mkdir()
                    made.append(part)
        for path, text in files.items():
            path.write_text(text, encoding="utf-8")
    except OSError as exc:
        for path, old in before.items():
            with contextlib.suppress(OSError):
                if old is None:
                    if path.is_file():
                        path.unlink()
                elif path.read_bytes() != old:
                    path.write_bytes(old)
        for part in reversed(made):
            with contextlib.suppress(OSError):
                part.rmdir()
        where = exc.filename or "the project"
        raise UsageError(f"cannot write {where}: {exc.strerror or exc}; nothing was written "
                         "(pyproject.toml, golden/records and .gitignore are left as they were)") from None


def init_project(directory: Path, name: str, model: str | None, assistant: str | None) -> tuple[Path, Path, list[str]]:
    """Append the starter block to directory/pyproject.toml (created if absent), create its
    golden_dir and complete .gitignore; a pyproject.toml that has [tool.harness] already, or a
    model / assistant that is not a checkpoint, is refused (UsageError) before anything is written."""
    if not NAME.match(name):
        raise UsageError(f"--name {name!r}: use letters, digits, '-' and '_' (it prefixes case ids and record files)")
    from harness.zoo.specs import BY_NAME

    if name in BY_NAME:  # every command after would refuse the [tool.harness.models.NAME] table
        raise UsageError(f"--name {name!r} is a fixture zoo model's name (its case ids and records would collide); "
                         "give your model another name")
    if assistant and not model:
        raise UsageError("--assistant needs --model PATH (the model it drafts for)")
    for flag, given in (("--model", model), ("--assistant", assistant)):
        if given:
            try:
                check_checkpoint(directory / given, f"{flag} {given}")
            except ModelError as exc:
                raise UsageError(str(exc)) from None
    pyproject = directory / "pyproject.toml"
    try:  # a FIFO, not UTF-8, not TOML: refused in one line (store/reading.py read_toml)
        has = pyproject.exists() and "harness" in read_toml(pyproject).get("tool", {})
    except InputError as exc:
        raise UsageError(f"{exc}; fix it before `harness init`") from None
    text = pyproject.read_text(encoding="utf-8") if pyproject.exists() else ""  # a regular UTF-8 file: read above
    if has:
        raise UsageError(f"{pyproject} already has [tool.harness]; edit it (genharness's docs/your-models.md, 'Configuration') "
                         "instead of running init again")
    block = starter_block(name, project_path(directory, model) if model else None,
                          project_path(directory, assistant) if assistant else None)
    golden = directory / "golden" / "records"
    try:
        ignore, added = gitignore_text(directory)
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read {directory / '.gitignore'}: {getattr(exc, 'strerror', None) or exc}; "
                         "nothing was written") from None
    files = {pyproject: text + ("\n" if text and not text.endswith("\n") else "") + block.lstrip("\n" if not text else "")}
    if ignore is not None:
        files[directory / ".gitignore"] = ignore
    write_all_or_nothing(files, [golden])  # a half-written project is refused by every command after
    return pyproject, golden, added


def cmd_init(args: argparse.Namespace, extra: Sequence[str]) -> int:
    if args.ci:  # the CI workflow only (harness/cli/ci.py)
        return ci.cmd_ci(args)
    here = Path.cwd()
    pyproject, golden, ignored = init_project(here, args.name, args.model, args.assistant)
    print(f"harness: wrote [tool.harness] to {pyproject.name}, created {golden.relative_to(here)}/"
          + (f", and git-ignored {', '.join(ignored)} in .gitignore" if ignored else ""))
    if args.model:
        print("next: `harness check` records your model's behaviour in this environment (commit golden/records/); "
              "after an upgrade (`pip install transformers==NEW`) rerun `harness check`: it compares with these records, "
              "exits 1 on a regression and records the new environment only when nothing changed - `harness regen` "
              "accepts a change you have reviewed")
    else:
        print("next: set path = ... to your checkpoint, then run `harness check`")
    return EXIT_OK


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("init", help="write a commented starter [tool.harness] block for the current directory",
                       description="Write a starter [tool.harness] block into ./pyproject.toml (created if absent), "
                                   "create its golden_dir and a .gitignore for reports and caches; paths are written "
                                   "relative to the project. Refuses a pyproject.toml that has one already, and a "
                                   "--model that is not a save_pretrained directory.")
    p.add_argument("--model", metavar="PATH", help="your checkpoint (default: a placeholder path to edit)")
    p.add_argument("--assistant", metavar="PATH", help="its assistant (optional)")
    p.add_argument("--name", default="my-model", help="the model's name in case ids (default my-model)")
    ci.add_arguments(p)
    p.set_defaults(func=cmd_init)
