"""Named, deterministic probe inputs: each one a logit pattern per query row that exposes one part of a P policy.

A probe is given by its logits, not by q and k: query row r of a probe with logits ``L`` [Nq, Nk] gets
``q_r = sqrt(d)·e_r`` and key j gets ``k_j[r] = L[r, j]``, so ``s = q·kᵀ/sqrt(d)`` is ``L`` exactly in
float32 (one non-zero product, a power-of-two scale) for any implementation that computes the scores
in float32 with the default ``sm_scale = 1/sqrt(d)``. By default d is 16, 64 or 256 (the powers of four, whose
square root is a power of two), the smallest that holds Nq rows. A :class:`Shape` builds a probe as a real
kernel takes it: at its head dimension (any multiple of 16 from the probe's rows up to 256, not padded), in
its input dtype (float32, bf16, fp16), with B and H > 1 and grouped-query heads, and with a causal mask. At a d
that is no power of four, or in bf16 or fp16, the scores are the logits as q and k round them (what every
expected output is computed from, so nothing is lost). V's columns are the observables:
column 0 is 1 (``out[..., 0] − 1`` is the mass the row lost), column 1 marks key 0 (the first key's
weight), column 2 marks the keys after it, columns 3.. hold fixed values in {−1, 0, 1} from a seeded
generator (a per-key signature that moves when any single weight moves; one generator per key/value head,
so a kernel that reads the wrong head under grouped-query attention shows).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from pcast.api_inputs import parse_dtype

from pcast.contract import ATTENTION_HEAD_DIMS

__all__ = ["Probe", "Shape", "PROBES", "make_probe", "probe_names", "default_probes", "small_probes", "UNIFORM_SIZES",
           "BOUNDARY_LENGTHS", "DECODE_TILE", "tile_fill", "fitting"]

UNIFORM_SIZES = (128, 1024, 8192, 131072)  # N of the uniform probes
BOUNDARY_LENGTHS = (31, 32, 33, 63, 64, 65, 127, 128, 129, 255, 256, 257)  # Nk at and across tile edges
DECODE_TILE = 64  # the tile of the interleave probe (TensorRT-LLM XQA deals 64-key tiles to its splits)
FAR = -60.0  # a logit whose exp is ~1e-26 of the max: every FP8 P cast sends it to 0
_SEED = 20260  # V's signature columns


@dataclass(frozen=True)
class Shape:
    """How a probe is laid out for a kernel: head dimension ``d`` (None: 16, 64 or 256, the smallest power of four
    that holds the rows), input ``dtype``, ``batch``, ``heads`` and ``kv_heads`` (None: ``heads``; a divisor of
    it, grouped-query attention), and ``causal``: the kernel applies a causal mask aligned bottom right
    (FlashAttention's convention for Nq < Nk: row i sees keys j <= i + Nk - Nq). A causal probe appends Nq - 1
    keys at logit -60 with V = 0, so that every row still sees all the probe's keys (row i also sees i of the
    appended ones, whose weight is below exp(-60)). Every (batch, head) holds the probe's rows."""

    d: int | None = None
    dtype: torch.dtype = torch.float32
    batch: int = 1
    heads: int = 1
    kv_heads: int | None = None
    causal: bool = False

    def __post_init__(self):
        object.__setattr__(self, "dtype", parse_dtype(self.dtype))
        if self.d is not None and (isinstance(self.d, bool) or self.d not in ATTENTION_HEAD_DIMS):
            raise ValueError(f"d={self.d!r} is not allowed; allowed: None or a multiple of 16 from 16 to 256")
        for name in ("batch", "heads"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}={value!r} is not allowed; allowed: an int >= 1")
        kv = self.kv_heads
        if kv is not None and (isinstance(kv, bool) or not isinstance(kv, int) or kv < 1 or self.heads % kv):
            raise ValueError(f"kv_heads={kv!r} is not allowed; allowed: None or a divisor of heads={self.heads}")
        if not isinstance(self.causal, bool):
            raise ValueError(f"causal={self.causal!r} is not allowed; allowed: True or False")

    @property
    def h_kv(self) -> int:
        return self.heads if self.kv_heads is None else self.kv_heads

    def head_dim(self, nq: int) -> int:
        """The head dimension of a probe with ``nq`` rows (ValueError when ``d`` cannot hold them)."""
        if self.d is None:
            return next(x for x in (16, 64, 256) if x >= max(nq, 3 + 1))
        if self.d < max(nq, 4):
            raise ValueError(f"d={self.d} is not allowed for a probe of {nq} rows; allowed: d >= {max(nq, 4)}")
        return self.d

    def describe(self) -> str:
        kv = "" if self.kv_heads in (None, self.heads) else f", H_kv = {self.kv_heads}"
        return (f"d = {self.d if self.d is not None else 'auto'}, {str(self.dtype).removeprefix('torch.')}, "
                f"B = {self.batch}, H = {self.heads}{kv}{', causal' if self.causal else ''}")


DEFAULT_SHAPE = Shape()


@dataclass(frozen=True)
class Probe:
    """One probe: its name, what it is for, what to read, the logits [Nq, Nk] and an optional learned sink."""

    name: str
    purpose: str
    observable: str
    logits: torch.Tensor = field(repr=False)  # float32 [Nq, Nk]
    sink_logit: float | None = None

    @property
    def shape(self) -> tuple[int, int]:
        return tuple(self.logits.shape)

    def tensors(self, shape: Shape | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor,
                                                             torch.Tensor | None]:
        """q [B, H, Nq, d], k and v [B, H_kv, Nk, d] in the shape's dtype on the CPU (default: B = H = 1,
        float32) and the sink logit ([H] float32, or None)."""
        shape = DEFAULT_SHAPE if shape is None else shape
        nq, nk = self.shape
        d = shape.head_dim(nq)
        b, h, hkv = shape.batch, shape.heads, shape.h_kv
        pad = nq - 1 if shape.causal else 0
        q = torch.zeros(b, h, nq, d, dtype=torch.float32)
        q[:, :, torch.arange(nq), torch.arange(nq)] = math.sqrt(d)
        k = torch.zeros(b, hkv, nk + pad, d, dtype=torch.float32)
        k[:, :, :nk, :nq] = self.logits.T
        k[:, :, nk:, :nq] = FAR
        v = torch.stack([torch.stack([_values(nk, d, pad, i * hkv + j) for j in range(hkv)]) for i in range(b)])
        sink = None if self.sink_logit is None else torch.full((h,), self.sink_logit, dtype=torch.float32)
        return q.to(shape.dtype), k.to(shape.dtype), v.to(shape.dtype), sink


def _values(nk: int, d: int, pad: int = 0, head: int = 0) -> torch.Tensor:
    """V [nk + pad, d] of one key/value head: the observables, and 0 for the ``pad`` appended keys."""
    v = torch.zeros(nk + pad, d, dtype=torch.float32)
    v[:nk, 0] = 1.0
    v[0, 1] = 1.0
    v[1:nk, 2] = 1.0
    g = torch.Generator().manual_seed(_SEED + head)
    v[:nk, 3:] = torch.randint(-1, 2, (nk, d - 3), generator=g).to(torch.float32)
    return v


def _rows(rows: list[torch.Tensor]) -> torch.Tensor:
    return torch.stack(rows).to(torch.float32)


# ----------------------------------------------------------------------------- the probes

def mass(n: int = 2048, depths=(0.0, 2.0, 4.0, 5.0, 6.0, 6.5, 7.0, 7.5, 8.0, 9.0, 10.0, 12.0)) -> Probe:
    """One key at 0 and n − 1 keys at −x, one row per depth x."""
    rows = [torch.cat([torch.zeros(1), torch.full((n - 1,), -float(x))]) for x in depths]
    return Probe(f"mass-{n}", "lost mass: a key at 0 and a tail of n-1 keys at -x; the tail's P crosses the "
                 "format's underflow as x grows (where depends on S, the format and the mode)",
                 "out[...,0] - 1 (V = 1) is the mass lost; out[...,2] the tail's share", _rows(rows))


def one_hot(n: int = 512, positions=(0, 1, 31, 32, 63, 64, 127, 128, 255, 256, 511)) -> Probe:
    """One key at 0, every other key at FAR; one row per position of the hot key."""
    rows = []
    for j in positions:
        r = torch.full((n,), FAR)
        r[j] = 0.0
        rows.append(r)
    return Probe(f"one-hot-{n}", "a single key holds all the weight: every policy must return its V (P = S is "
                 "exact in every format) wherever the key lies", "out equals v[hot key] to within n·exp(-60)",
                 _rows(rows))


def two_hot(n: int = 256, gaps=tuple(0.25 * i for i in range(1, 17))) -> Probe:
    """Key 0 at 0 and key n−1 at −g (the rest at FAR); one row per gap g."""
    rows = []
    for g in gaps:
        r = torch.full((n,), FAR)
        r[0], r[-1] = 0.0, -float(g)
        rows.append(r)
    return Probe(f"two-hot-{n}", "two keys at the two ends: the second's P = exp(-g)·S is rounded to the format; "
                 "its rounding error depends on S, the mode and the format, and the order decides which key "
                 "sets the max first", "out[...,1] (first key's weight) vs out[...,2] (the second's)", _rows(rows))


def uniform(n: int) -> Probe:
    """Every logit 0: P = S for every key."""
    return Probe(f"uniform-{n}", f"uniform attention over {n} keys: P = S exactly, so every policy must return "
                 "the mean of V (a kernel that normalises P inside a partition puts 1/partition on its format's "
                 "grid instead)", "out equals mean(v) to float32 summation", torch.zeros(1, n))


def sink_tail(n: int = 1024, depths=(3.0, 5.0, 7.0, 9.0, 11.0, 13.0)) -> Probe:
    """Key 0 at +4 (an attention sink), keys after it at −x: one row per depth x."""
    rows = [torch.cat([torch.full((1,), 4.0), torch.full((n - 1,), -float(x))]) for x in depths]
    return Probe(f"sink-tail-{n}", "a sink key 4 above zero and a tail at -x: the tail's P is exp(-x-4)·S, "
                 "underflowing earlier than with no sink (the paper's collapse)", "out[...,2] is the tail's "
                 "share; out[...,0] - 1 the mass lost", _rows(rows))


def lagging_max(n: int = 512, step: int = 16, slopes=(0.15, 0.3, 0.45, 0.6, 0.9, 1.2, 2.0, 3.0)) -> Probe:
    """A staircase of logits (a new level every ``step`` keys), rising (+slope) or falling (−slope) by key
    index: one row per signed slope. The spread widens along the row while the max lags behind it."""
    level = torch.arange(n) // step
    top = float(level[-1])
    rows = []
    for c in slopes:
        rows.append(c * (level - top))  # rising: the max arrives last
        rows.append(-c * level)  # falling: the max is the first key
    return Probe(f"lagging-max-{n}", "a widening spread whose max arrives late in the visiting order: forward "
                 "order on a rising row (reverse on a falling one) casts early blocks against a stale max; "
                 "where the max moves exposes the block size, and with lazy rescaling P overshoots S "
                 "(saturation when S·2^tau > max)", "every column; out[...,0] - 1", _rows(rows))


def boundary(n: int, lifts=(0.5, 2.0, 5.0)) -> Probe:
    """n keys at 0, the last one lifted by a few log2 units: one row per lift (log2 units)."""
    rows = []
    for lift in lifts:
        r = torch.zeros(n)
        r[-1] = lift / math.log2(math.e)
        rows.append(r)
    return Probe(f"boundary-{n}", "sequence length at or across a tile edge with the max on the last key: "
                 "alone in its block when n = tile + 1, so a forward or lazily rescaled kernel casts every "
                 "other key against a max that is wrong by the lift", "every column", _rows(rows))


def learned_sink(n: int = 256, sigma: float = 6.0, depths=(0.0, 1.0, 2.0, 3.0)) -> Probe:
    """A learned sink logit sigma above every key; keys at −x: one row per depth x."""
    rows = [torch.full((n,), -float(x)) for x in depths]
    return Probe(f"learned-sink-{n}", "a learned sink logit above every key: seeding the running max with it "
                 "(sink_mode='init') casts every key at exp(-sigma-x)·S, adding it after the last block "
                 "('final') casts them at exp(-x)·S", "out[...,0] (the keys' share; the sink has no V)",
                 _rows(rows), sink_logit=sigma)


def tile_fill(n: int = 256, rows: int = 64, shallow: float = 3.0, deep: float = 8.5) -> Probe:
    """``rows`` query rows (a whole tile of up to ``rows`` rows, so no padding sets a tile's max): key 0 at 0,
    the other keys at −x_r, x_r from ``shallow`` to ``deep`` along the rows, then interleaved so that every tile
    of 16 rows or more holds a shallow row. After the first KV block a dynamic scale lifts the tail to the
    format's top (per row, or per tile to its shallowest row) where a static S leaves it many grid steps lower
    (S = 1: in E4M3's subnormals and below). The depths stop at 8.5, where S = 128 still casts the tail to
    normal values, so static scales from 128 up (a power of two apart) cast it alike and the probe does not
    outweigh the others in telling static scales apart."""
    depth = torch.linspace(shallow, deep, rows)
    depth = depth.view(-1, rows // 4).T.reshape(-1) if rows % 4 == 0 else depth  # a shallow row in every 16
    logits = torch.cat([torch.zeros(rows, 1), (-depth)[:, None].expand(rows, n - 1)], 1)
    return Probe(f"tile-fill-{rows}x{n}", "a full tile of rows whose max is the first key and whose tail lies "
                 "3 to 8.5 below it: a static S leaves the deep tails near or below the format's underflow, a "
                 "dynamic scale lifts each later block (per row, or per tile of block_m rows to the tile's "
                 "shallowest row)", "out[...,2] (the tail's share); out[...,0] - 1", logits.contiguous())


# ----------------------------------------------------------------------------- decode probes
# Rows of one query each attending to all n keys (no mask): a decode row. n spans several splits of every
# decode preset, so where a split starts, how its keys are dealt and how its P is normalised all show.

def decode_sink(n: int = 4096, delta: float = 8.0, depths=(0.0, 6.0), positions=None) -> Probe:
    """Decode rows: one key ``delta`` above the others, which sit at −x; one row per (position, depth x).
    Positions: the first key, key 1 of the sixth 64-key tile, just after the middle, and inside the last
    quarter (a sink in a later split)."""
    positions = (0, 5 * DECODE_TILE + 1, n // 2 + 1, 3 * n // 4 + 129) if positions is None else positions
    rows = []
    for p in positions:
        for x in depths:
            r = torch.full((n,), -float(x))
            r[p] = float(delta)
            rows.append(r)
    return Probe(f"decode-sink-{n}", "a sink key in the first or a later split of a decode row: the keys a "
                 "split visits after the sink are cast against its max and underflow at small S, the rest "
                 "of the row is cast against its own split's max; which keys collapse names the split "
                 "boundaries, the layout and the order inside a split", "every column (the signature "
                 "columns say which keys were lost); out[...,0] - 1", _rows(rows))


def decode_random(n: int = 4352, sigmas=(0.5, 1.0, 2.0), lift: float = 3.0) -> Probe:
    """Decode rows of seeded N(0, sigma²) logits, one per sigma, and one (sigma = 1) whose second half is
    lifted by ``lift``: P spread over the format's grid, normalised per split or online."""
    g = torch.Generator().manual_seed(_SEED + 1)
    rows = [float(s) * torch.randn(n, generator=g) for s in sigmas]
    late = torch.randn(n, generator=g)
    late[n // 2:] += lift
    rows.append(late)
    return Probe(f"decode-random-{n}", "generic decode rows: every P takes its own rounding, which depends on "
                 "the max and (partition-normalised P) the sum of its split, so the split count, the "
                 "partition size (256 or 512 keys at n = 4,352), the normalisation and the P format (FP8 or "
                 "bf16) all move the output", "every column", _rows(rows))


def decode_tiles(n: int = 2048, levels=(3.0, 9.0), patterns=((2, 1), (4, 1), (8, 3))) -> Probe:
    """Decode rows of 64-key tiles: tile j at +a when j mod period = phase, else 0; one row per (pattern, a).
    An interleaved layout with ``period`` splits gathers the lifted tiles into one split."""
    tile = torch.arange(n) // DECODE_TILE
    rows = [torch.where(tile % period == phase, float(a), 0.0) for period, phase in patterns for a in levels]
    return Probe(f"decode-tiles-{n}", "64-key tiles lifted with a period: dealt in turn to k splits "
                 "(interleaved) with k = period, the lifted tiles share one split and the others are cast "
                 "against their own max; contiguous splits mix them", "every column; out[...,0] - 1",
                 _rows(rows))


def decode_mix(n: int = 512) -> Probe:
    """The three decode probes' kinds of row in one call of n keys: a sink at the start, the middle and the
    last tile (depths 0 and 6), N(0, 1) and N(0, 4) rows and a lifted second half, tiles lifted with
    periods 2, 4 and 8 (levels 3 and 9)."""
    parts = (decode_sink(n, depths=(0.0, 6.0), positions=(0, n // 2 + 1, n - DECODE_TILE + 1)),
             decode_random(n, sigmas=(1.0, 2.0)), decode_tiles(n))
    return Probe(f"decode-mix-{n}", "the decode probes' rows at a smaller n, in one call: " + parts[0].purpose,
                 "every column", torch.cat([p.logits for p in parts]))


PROBES = {
    "mass": mass, "one-hot": one_hot, "two-hot": two_hot, "uniform": uniform, "sink-tail": sink_tail,
    "lagging-max": lagging_max, "boundary": boundary, "tile-fill": tile_fill, "learned-sink": learned_sink, "decode-sink": decode_sink,
    "decode-random": decode_random, "decode-tiles": decode_tiles, "decode-mix": decode_mix,
}


def fitting(probes, shape: Shape) -> tuple:
    """The probes a layout holds: at a given head dimension d, those of at most d rows (one query row per
    dimension), so a kernel at d < 64 runs without the 64-row tile probe (and a tile-max kernel with 64-row
    tiles is then not told from a static scale)."""
    return tuple(p for p in probes if shape.d is None or p.shape[0] <= max(shape.d, 4))


def probe_names() -> tuple[str, ...]:
    return tuple(PROBES)


def make_probe(name: str, *args, **kwargs) -> Probe:
    """The probe ``name`` (a key of :data:`PROBES`) built with its arguments.

    Raises:
        ValueError: naming ``name`` and the allowed names.
    """
    if name not in PROBES:
        raise ValueError(f"probe={name!r} is not allowed; allowed: {', '.join(PROBES)}")
    if name == "uniform" and not args and "n" not in kwargs:
        kwargs["n"] = UNIFORM_SIZES[0]
    if name == "boundary" and not args and "n" not in kwargs:
        kwargs["n"] = 129
    return PROBES[name](*args, **kwargs)


def default_probes() -> tuple[Probe, ...]:
    """The probe set :func:`pcast.probes.fingerprint` runs (small sizes; every row distinct)."""
    return (mass(), two_hot(), lagging_max(), sink_tail(), one_hot(), boundary(65), boundary(129),
            learned_sink(), uniform(1024), decode_sink(), decode_random(), decode_tiles(), tile_fill())


def small_probes() -> tuple[Probe, ...]:
    """A smaller probe set with the same kinds of rows (at most 512 keys, eight calls, 114 rows) for slow black
    boxes such as Triton's interpreter; it still tells every preset apart, and its tile probe fills a 64-row
    tile, so that a kernel whose padded rows pin a tile's max cannot pass for a static scale."""
    return (mass(512, depths=(0.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 12.0)),  # 12: S = 128 and 256 part
            two_hot(128, gaps=(0.5, 1.25, 2.0, 2.5, 3.0, 4.0, 5.0)), lagging_max(256, slopes=(0.3, 0.9, 2.0, 3.0)),
            sink_tail(256, depths=(3.0, 5.0, 7.0, 11.0)), boundary(129), learned_sink(128), decode_mix(),
            tile_fill(128))
