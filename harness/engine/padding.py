"""A batch padded by the rule, from each row's own ids: the harness's padding (the batching and long
context suites build their batches with it) and the oracle of a tokenizer's own padding (the
tokenizer zoo's `padding_as_specified`).

    width   = max_r len(row_r)
    left:   ids_r = [pad] * (width - len_r) + row_r       mask_r = [0] * (width - len_r) + [1] * len_r
    right:  ids_r = row_r + [pad] * (width - len_r)       mask_r = [1] * len_r + [0] * (width - len_r)
"""

from __future__ import annotations

from collections.abc import Sequence

LEFT, RIGHT = "left", "right"


def pad_rows(rows: Sequence[Sequence[int]], pad_id: int, side: str) -> tuple[list[list[int]], list[list[int]]]:
    """(ids, attention mask) of the rows padded with `pad_id` to the longest, in front (`left`)
    or behind (`right`)."""
    if side not in (LEFT, RIGHT):
        raise ValueError(f"padding side must be {LEFT!r} or {RIGHT!r}, got {side!r}")
    width = max(len(r) for r in rows)
    ids, mask = [], []
    for row in rows:
        pad = width - len(row)
        if side == LEFT:
            ids.append([pad_id] * pad + list(row))
            mask.append([0] * pad + [1] * len(row))
        else:
            ids.append(list(row) + [pad_id] * pad)
            mask.append([1] * len(row) + [0] * pad)
    return ids, mask
