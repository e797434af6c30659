"""pcast-audit's inputs: q, k, v (or ``layer{L}/q, k, v``) from a safetensors file, layer selection,
the user's policies from YAML, and the checks the loaded tensors must pass before any work.

Used by :mod:`pcast.audit.session` (:mod:`pcast.audit` re-exports the public names).
"""

from __future__ import annotations

import math
import re

from safetensors import safe_open

from safetensors.torch import load_file

import torch

import yaml

from pcast.host.calibration import load_calibration
from pcast.policies import get_policy, policies_from_config

from pcast.reference import expand_kv

LAYOUTS = ("bhnd", "bnhd")  # [B, H, N, d] (the contract's) or [B, N, H, d] (flash-attn's)
_LAYER_KEY = re.compile(r"^layer(\d+)/(q|k|v)$")
_LAYOUTS = "q, k, v, or layer{L}/q, layer{L}/k, layer{L}/v for each layer L"


def _lift(name, t, layout=None, block_n=64):
    """One loaded tensor checked and brought to float32 [B, H, N, d]. ``layout`` bnhd reads a 4-dim tensor as
    [B, N, H, d] and a 3-dim one as [N, H, d]; without a layout (bhnd by default) a shape that looks transposed
    (N < H, or N under a block while H is large) is refused, naming the likely layout."""
    if not t.is_floating_point():
        raise ValueError(f"tensor {name!r} must be floating point, got {t.dtype}")
    if t.dim() not in (2, 3, 4):
        raise ValueError(f"tensor {name!r} must have 2, 3 or 4 dims ([N, d], [H, N, d], [B, H, N, d]), "
                         f"got shape {tuple(t.shape)}")
    if layout == "bnhd" and t.dim() > 2:
        t = t.transpose(-3, -2)
    if layout is None and t.dim() > 2:
        H, N = t.shape[-3], t.shape[-2]
        if N < H or (N < block_n and H >= 32):
            raise ValueError(f"tensor {name!r} of shape {list(t.shape)} read as [B, H, N, d] gives H = {H} heads of "
                             f"N = {N} tokens, which looks transposed: it is likely [B, N, H, d] (flash-attn's "
                             "layout); allowed: --layout bnhd to read it so, or --layout bhnd to read it as given")
    while t.dim() < 4:
        t = t.unsqueeze(0)
    return t.float().contiguous()


def load_tensors(path: str, names=("q", "k", "v")):
    """Read q, k, v from a safetensors file and bring them to float32 [B, H, N, d]."""
    try:
        tensors = load_file(path)
    except FileNotFoundError:
        raise ValueError(f"inputs file {path!r} does not exist") from None
    except Exception as e:  # noqa: BLE001 - safetensors raises several types for a bad file
        raise ValueError(f"inputs file {path!r} is not a readable safetensors file: {e}") from None
    missing = [n for n in names if n not in tensors]
    if missing:
        raise ValueError(f"inputs file {path!r} lacks tensor(s) {', '.join(missing)}; it has: "
                         f"{', '.join(sorted(tensors)) or 'none'}")
    return tuple(_lift(n, tensors[n]) for n in names)


def file_dtype(path: str):
    """The torch dtype of the file's first q tensor (``q`` or ``layer{L}/q``): what a kernel audited with
    ``--kernel`` is given (the audit itself reads every tensor as float32, exactly for bf16 and fp16)."""
    with safe_open(path, framework="pt") as fh:
        name = next((n for n in sorted(fh.keys()) if n == "q" or n.endswith("/q")), None)
        return None if name is None else fh.get_tensor(name).dtype


def _layer_arg(value) -> int | None:
    try:
        return int(str(value), 10)
    except ValueError:
        return None


def load_layers(path: str, layers=(), *, layout=None, block_n=64) -> list:
    """``[(layer, q, k, v), ...]`` from a safetensors file, each float32 [B, H, N, d].

    A file with ``layer{L}/q``, ``layer{L}/k``, ``layer{L}/v``: the ``layers`` asked for (ints or
    their strings; default every layer in numeric order). A file with plain ``q``, ``k``, ``v`` and
    no ``layer{L}/`` tensor: ``[(None, q, k, v)]`` (``layers`` must then be empty). Only the
    selected tensors are read; an unknown layer is an error before any of them is. ``layout`` and
    ``block_n``: as :func:`_lift`.
    """
    try:
        with safe_open(path, framework="pt") as fh:
            keys = list(fh.keys())
            found: dict[int, set] = {}
            for key in keys:
                m = _LAYER_KEY.match(key)
                if m:
                    found.setdefault(int(m.group(1)), set()).add(m.group(2))
            if not found:
                if layers:
                    raise ValueError(f"--layer={layers[0]} is not allowed: inputs file {path!r} has no "
                                     "layer{L}/q, k, v tensors; allowed: no --layer for a file of plain q, k, v")
                missing = [n for n in ("q", "k", "v") if n not in keys]
                if missing:
                    raise ValueError(f"inputs file {path!r} lacks tensor(s) {', '.join(missing)}; it has: "
                                     f"{', '.join(sorted(keys)) or 'none'}; allowed: {_LAYOUTS}")
                return [(None, *(_lift(n, fh.get_tensor(n), layout, block_n) for n in ("q", "k", "v")))]
            have = sorted(found)
            selected = []
            for value in layers or have:
                L = _layer_arg(value)
                if L not in found:
                    raise ValueError(f"--layer={value} is not allowed; allowed: a layer the file has: "
                                     f"{', '.join(map(str, have))}")
                if L not in selected:
                    selected.append(L)
            out = []
            for L in selected:
                missing = [f"layer{L}/{n}" for n in ("q", "k", "v") if n not in found[L]]
                if missing:
                    raise ValueError(f"inputs file {path!r} lacks tensor(s) {', '.join(missing)}; allowed: "
                                     f"{_LAYOUTS}")
                out.append((L, *(_lift(f"layer{L}/{n}", fh.get_tensor(f"layer{L}/{n}"), layout, block_n)
                                 for n in ("q", "k", "v"))))
            return out
    except FileNotFoundError:
        raise ValueError(f"inputs file {path!r} does not exist") from None
    except ValueError:
        raise
    except Exception as e:  # noqa: BLE001 - safetensors raises several types for a bad file
        raise ValueError(f"inputs file {path!r} is not a readable safetensors file: {e}") from None


def load_policies(path: str) -> dict:
    """A user's policies from a YAML file: name -> Policy keys, or a config.yaml with ``policies:``."""
    try:
        with open(path) as fh:
            data = yaml.safe_load(fh)
    except FileNotFoundError:
        raise ValueError(f"policies file {path!r} does not exist") from None
    except yaml.YAMLError as e:
        raise ValueError(f"policies file {path!r} is not valid YAML: {e}") from None
    if isinstance(data, dict) and "policies" in data:
        data = data["policies"]  # config.yaml itself, or a file with a policies: section
    elif isinstance(data, dict) and ("experiments" in data or "preset" in data):
        data = {}  # a config.yaml without a policies: section
    return policies_from_config(data)


def check_tensors(q, k, *, ksink: int | None, sm_scale: float | None) -> None:
    """What the loaded tensors allow, before any work: ``0 <= ksink < Nk`` (``None``: ``--ksink auto``,
    nothing to check) and scores finite in float32 (max ``|q·k|·sm_scale`` from a float64 product, one head
    at a time)."""
    nk = k.shape[-2]
    if ksink is not None and not 0 <= ksink < nk:
        raise ValueError(f"--ksink={ksink} is not allowed; allowed: 0 <= ksink < N = {nk} (the number of keys), "
                         "or auto")
    sm = 1.0 / math.sqrt(q.shape[-1]) if sm_scale is None else float(sm_scale)

    if k.shape[0] != q.shape[0] or k.shape[1] < 1 or q.shape[1] % k.shape[1] or k.shape[-1] != q.shape[-1]:
        raise ValueError(f"k shape {list(k.shape)} does not match q shape {list(q.shape)}; allowed: [B, H_kv, N, d] "
                         f"with H_kv dividing H = {q.shape[1]} (grouped-query attention)")
    fmax = float(torch.finfo(torch.float32).max)
    # |q.k| <= |q|·|k| (Cauchy-Schwarz): when the largest norms' product is far below float32's max, so are
    # the scores, and the exact float64 products are not needed
    if float(q.double().norm(dim=-1).max()) * float(k.double().norm(dim=-1).max()) * sm < fmax / 4:
        return
    kx = expand_kv(k, q.shape[1])  # grouped-query attention: each query head against its key/value head
    smax = max(float((qh.double() @ kh.double().transpose(-1, -2)).abs().max())
               for qh, kh in zip(q.flatten(0, 1), kx.flatten(0, 1)))
    if not math.isfinite(smax * sm) or smax * sm > float(torch.finfo(torch.float32).max):
        raise ValueError(f"scores overflow float32: max |q.k| * sm_scale = {smax * sm:.4g} > "
                         f"{float(torch.finfo(torch.float32).max):.4g}; rescale q or k, or pass a smaller --sm-scale")


def resolve_policies(names, policies_file=None) -> list:
    """The Policy objects for ``names`` (presets or the file's) and every policy of ``policies_file``, each
    once, in that order; checked before any work."""
    extra = load_policies(policies_file) if policies_file else {}
    out = {}
    for n in names:
        p = get_policy(n, extra)
        out.setdefault(p.name, p)
    for name, p in extra.items():
        out.setdefault(name, p)
    return list(out.values())


def estimate(layers, runs, *, measure: bool, min_seconds: float = 20.0) -> str | None:
    """For a long run, the time it should take from the plan's calibration
    (:func:`pcast.host.calibration.load_calibration`, one thread): steps 1-2 once per run that does not
    differ from another in S alone, the cast, row sum and P·V once per run, the float64 reference, and the
    per-head measures; None when the work is small (no calibration is made for it) or under ``min_seconds``."""
    scores = sum(q.shape[0] * q.shape[1] * q.shape[2] * k.shape[2] for _, q, k, _ in layers)
    if scores * len(runs) < 2e8:
        return None
    cal = load_calibration()
    d = layers[0][1].shape[-1] / cal["d"]
    units = len({tuple(sorted((n, repr(x)) for n, x in kw.items() if n != "scale")) for _, kw in runs})
    per = (cal["c_q"] * d + units * cal["c_p"] + len(runs) * (cal["c_s"] + cal["c_v"] * d) + cal["c_refa"] * d
           + (cal["c_refa"] * d + len(runs) * cal["c_s"] if measure else 0.0))
    secs = scores * per
    if secs < min_seconds:
        return None
    return (f"estimate: about {secs:.0f} s on one thread for {len(layers)} layer(s) x {len(runs)} runs "
            f"({scores:.3g} scores per run), from this machine's calibration")
