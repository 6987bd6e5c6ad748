"""The SentencePiece prefix-space contract, read by the harness from the pipeline a Llama 2 /
Mistral tokenizer.json states (Metaspace("▁", prepend_scheme="first", split=False), byte fallback,
decoder Replace("▁", " ") + ByteFallback + Fuse + Strip(left=1)) - computed from the text alone, no
tokenizer run:

- encode: the text is cut at its special tokens' contents; each other segment has its spaces
  written "▁", and only the segment that starts the text gets one "▁" prepended (unless it starts
  with one already). So the prefix space comes once, and never after a special token: `"<s> Hello"`
  is `<s>` + `▁Hello`, not `<s>` + `▁` + `▁Hello` (legacy=True's extra space, transformers #25073 /
  #31890 class).
- decode: the pieces joined, "▁" read as " ", the one leading space the encoder added removed - so
  skipping a special token never leaves its space behind (`"<s> Hello"` decodes to `"Hello"` with
  skip_special_tokens, not `" Hello"`: #25073 / #29453).

`pieces_text(tokens)` reads a piece sequence back as text (byte-fallback pieces `<0xNN>` joined as
UTF-8): the observed side.
"""

from __future__ import annotations

import re

SPACE = "▁"
BYTE_PIECE = re.compile(r"<0x([0-9A-Fa-f]{2})>")


def segments(text: str, specials: list[str]) -> list[tuple[str, bool]]:
    """`text` cut at the special tokens' contents (longest first): [(piece, is_special)]."""
    if not specials:
        return [(text, False)] if text else []
    pattern = re.compile("|".join(re.escape(s) for s in sorted(set(specials), key=len, reverse=True)))
    out, pos = [], 0
    for match in pattern.finditer(text):
        if match.start() > pos:
            out.append((text[pos:match.start()], False))
        out.append((match.group(), True))
        pos = match.end()
    if pos < len(text):
        out.append((text[pos:], False))
    return out


def expected_pieces(text: str, specials: list[str]) -> str:
    """The pieces of `text` (encoded without special tokens added) joined: the contract's encode."""
    out = []
    for i, (part, special) in enumerate(segments(text, specials)):
        if special:
            out.append(part)
            continue
        piece = part.replace(" ", SPACE)
        if i == 0 and not piece.startswith(SPACE):
            piece = SPACE + piece
        out.append(piece)
    return "".join(out)


def expected_decode(text: str, specials: list[str], skip_special_tokens: bool, bos: str | None = None) -> str:
    """decode(encode(text)) by the contract: `bos` (the template's, when added) first, the special
    contents dropped when `skip_special_tokens`, the pieces' "▁" as " ", then the one leading space
    the decoder strips (Strip(left=1): only when the text so far starts with a space)."""
    parts = [] if (skip_special_tokens or not bos) else [bos]
    pieces = expected_pieces(text, specials)
    for part, special in segments(pieces, specials):
        if special and skip_special_tokens:
            continue
        parts.append(part if special else part.replace(SPACE, " "))
    joined = "".join(parts)
    return joined[1:] if joined.startswith(" ") else joined


def pieces_text(tokens: list[str]) -> str:
    """Pieces joined as text: runs of byte-fallback pieces read as UTF-8 (invalid bytes as U+FFFD)."""
    out, run = [], bytearray()
    for token in tokens:
        match = BYTE_PIECE.fullmatch(token)
        if match:
            run.append(int(match.group(1), 16))
            continue
        if run:
            out.append(run.decode("utf-8", errors="replace"))
            run = bytearray()
        out.append(token)
    if run:
        out.append(run.decode("utf-8", errors="replace"))
    return "".join(out)
