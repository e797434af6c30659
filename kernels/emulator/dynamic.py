"""The emulator's dynamic P scales (docs/interfaces.md, "Dynamic P scales"): S = float32(target / max p) per
query row and KV block (``per_row``) or per (block_m x block_n) tile (``tile_max``, ``tile_max_padded``).

Called from :func:`pcast.emulator.core._rows` at its ``# step 3: cast`` marker; ``c`` is that module's
``_Call``. Tile modes need every row of a tile in one chunk (:func:`chunk_rows`).
"""

from __future__ import annotations

import torch

from pcast.formats.microscaling import PER_ROW_TARGET, MXFormat

__all__ = ["chunk_rows", "dynamic_layout", "dynamic_scale", "dynamic_target", "pad_blocks"]


def dynamic_target(fmt) -> float:
    """The value a region's max of p is scaled to: 2688 for nvfp4, else the FP8 format's largest finite value."""
    return PER_ROW_TARGET if isinstance(fmt, MXFormat) else float(fmt.max_finite)


def dynamic_layout(scale_mode: str, fmt, nq: int, nk: int, block_n: int, block_m: int, causal: bool, offset: int,
                   device) -> dict:
    """The ``_Call`` fields of a dynamic scale: ``tile`` (block_m under the tile modes, else 0), ``pad_hit``
    (:func:`pad_blocks` under ``tile_max_padded``), ``nq`` and ``target`` (0 for a static scale)."""
    if scale_mode not in ("per_row", "tile_max", "tile_max_padded"):
        return {"tile": 0, "pad_hit": None, "nq": nq, "target": 0.0}
    tile = block_m if scale_mode != "per_row" else 0
    nblk = -(-nk // block_n)
    pad_hit = pad_blocks(nq, nk, nblk, block_n, tile, causal, offset, device) if scale_mode == "tile_max_padded" \
        else None
    return {"tile": tile, "pad_hit": pad_hit, "nq": nq, "target": dynamic_target(fmt)}


def chunk_rows(rows: int, tile: int) -> int:
    """Rows per chunk: ``rows`` rounded down to whole tiles of ``tile`` rows (at least one tile; ``tile`` 0: no
    tiles, at least one row)."""
    return max(1, rows) if not tile else max(tile, rows // tile * tile)


def pad_blocks(nq: int, nk: int, nblk: int, block_n: int, tile: int, causal: bool, offset: int, device):
    """``tile_max_padded``: [nblk] bool, the KV blocks in which the last tile's rows past ``nq`` (q = 0, so
    p = 1 at every key they see) see a key; None when ``tile`` divides ``nq``."""
    if not tile or nq % tile == 0:
        return None
    last = -(-nq // tile) * tile - 1  # the last padded row; a padded row sees every key a later one sees less
    limit = nk - 1 if not causal else min(nk - 1, last + offset)
    return torch.arange(nblk, device=device) * block_n <= limit


def dynamic_scale(u: torch.Tensor, nr: int, r0: int, c) -> torch.Tensor:
    """S per row and block, [rows, nblk] float32: ``float32(target / r)`` with r the block's row max of p
    (per_row) or the max over the row's tile (tile modes; rows r0:r0+nr start a tile), 1 where r = 0."""
    r = u.view(nr, c.nblk, c.block_n).amax(-1)
    if c.tile:
        nt = -(-nr // c.tile)
        t = torch.zeros(nt * c.tile, c.nblk, dtype=r.dtype, device=r.device)
        t[:nr] = r
        t = t.view(nt, c.tile, c.nblk).amax(1)  # [tiles, nblk]
        if c.pad_hit is not None and r0 + nr == c.nq:  # this chunk holds the partial last tile
            t[-1] = torch.where(c.pad_hit, t[-1].clamp_min(1.0), t[-1])
        r = t.repeat_interleave(c.tile, 0)[:nr]
    return torch.where(r > 0, torch.full_like(r, c.target) / r, torch.ones_like(r))
