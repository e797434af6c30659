"""Library code behind the Snakemake pipeline (``Snakefile``, ``workflow/``).

The rule scripts in ``workflow/scripts/`` are thin: they read the ``snakemake`` object and call
the functions here, so everything that matters can be tested without Snakemake.

What lives here:

* **Config**: presets merged over the experiment sections (:func:`resolve_preset`), the checks
  a JSON schema cannot express (:func:`check_config`), the expansion of a Δ range
  (:func:`delta_values`), and the cutting of an experiment into shards of seeds
  (:func:`shard_seeds`, :func:`shard_spec`, :func:`inputs_spec`).
* **Inputs**: the Δ-free base tensors (:func:`kernels.sinks.make_base`) of every seed, shape and
  sigma of one shard, written to one safetensors file (:func:`write_inputs`). Δ, ksink and
  ``sink_v_scale`` are applied at run time with :func:`kernels.sinks.apply_sink`.
* **Sweeps**: :func:`run_sweep_shard` stacks the (sink_v_scale, Δ) variants of one base along
  the batch dimension, computes the float64 reference once per input and runs every
  (order, scale) combination on the same tensors; one tidy row per (seed x configuration).
* **Conformance**: :func:`run_conformance_shard` calls :func:`kernels.conformance.compare`.
* **Tables**: fixed column lists, fixed float format (``%.10g``), sorted rows, atomic writes
  (:func:`merge_tidy`), timing kept in its own files.
* **Logging**: :func:`setup_logging` sends ``logging`` and warnings to a rule's ``log:`` file.

Everything that is written goes through a temporary file in the destination directory and
:func:`os.replace`, so an interrupted job never leaves a partial file under its final name.
"""

from __future__ import annotations

import contextlib
import copy
import csv
import glob
import io
import json
import logging
import math
import os
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from ..contract import BLOCK_SIZES, HEAD_DIMS, is_allowed
from .logs import logged_errors, progress, setup_logging

__all__ = [
    "SWEEP_EXPERIMENTS", "EXPERIMENTS", "TIDY_COLUMNS", "CONFIG_COLUMNS", "CONFORMANCE_COLUMNS",
    "TIMING_COLUMNS", "ConfigError", "deep_merge", "resolve_preset", "check_config", "delta_values",
    "shard_seeds", "n_shards", "shard_spec", "inputs_spec", "expected_rows", "spec_json",
    "format_value", "write_inputs", "load_inputs", "run_sweep_shard", "run_conformance_shard",
    "merge_tidy", "merge_timing", "setup_logging", "atomic_write_text", "atomic_path", "combo_label",
    "gpu_jobs", "logged_errors", "progress", "summarize_benchmarks",
]

log = logging.getLogger("pcast.pipeline")

# ----------------------------------------------------------------------------------------------
# names shared with docs/interfaces.md

SWEEP_EXPERIMENTS = ("collapse", "scales", "threshold")
EXPERIMENTS = SWEEP_EXPERIMENTS + ("conformance",)

TIDY_COLUMNS = (
    "experiment", "seed", "n", "d", "block_m", "block_n", "causal", "ksink", "delta", "sigma",
    "sink_v_scale", "order", "scale", "fmt", "rowsum", "combo", "backend", "mse", "rel_mse",
    "max_abs_err", "underflow", "terms", "underflow_frac", "underflow_sink", "terms_sink",
    "underflow_sink_frac", "saturated",
)
# Rows are sorted by these, then by seed.
CONFIG_COLUMNS = (
    "n", "d", "block_m", "block_n", "causal", "ksink", "delta", "sigma", "sink_v_scale", "order",
    "scale", "fmt", "rowsum",
)
CONFORMANCE_COLUMNS = (
    "order", "scale", "causal", "n", "d", "seed", "kernel_backend", "max_abs_diff", "max_rel_diff",
    "diag_equal", "mismatched_rows", "explained", "fragile_elements",
)
CONFORMANCE_KEY = ("order", "scale", "causal", "n", "d", "seed")
TIMING_COLUMNS = ("experiment", "shard", "seeds", "runs", "backend", "wall_s", "reference_s", "kernel_s")

_INT_COLUMNS = {"seed", "n", "d", "block_m", "block_n", "ksink", "underflow", "terms", "underflow_sink",
                "terms_sink", "saturated", "mismatched_rows", "fragile_elements", "shard", "runs"}
_FLOAT_COLUMNS = {"delta", "sigma", "sink_v_scale", "scale", "mse", "rel_mse", "max_abs_err",
                  "underflow_frac", "underflow_sink_frac", "max_abs_diff", "max_rel_diff", "wall_s",
                  "reference_s", "kernel_s"}
_BOOL_COLUMNS = {"causal", "diag_equal", "explained"}



class ConfigError(ValueError):
    """A configuration value is not allowed; the message names the key and what is allowed."""


# ----------------------------------------------------------------------------------------------
# config


def deep_merge(base: Mapping, override: Mapping) -> dict:
    """A new dict: ``override`` merged into ``base``; nested mappings merge, anything else replaces."""
    out = copy.deepcopy(dict(base))
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def resolve_preset(config: Mapping, overrides: Mapping | None = None) -> dict:
    """Merge ``presets[preset]`` over the rest of the config, then ``overrides`` over that.

    Precedence, lowest first: config.yaml, the preset, the command line (``overrides``: what
    ``--config``/``--configfile`` set, so a command-line value beats the preset's). ``preset`` and
    ``presets`` are kept (the latter unchanged) so the result validates with the same schema. A
    preset may override any section (``experiments``, ``statistics``, ``claims``).
    """
    name = config.get("preset", "default")
    presets = config.get("presets") or {}
    if name not in presets:
        allowed = ", ".join(sorted(presets)) or "(none defined)"
        raise ConfigError(f"config key 'preset': {name!r} is not a defined preset; allowed: {allowed} "
                          "(the keys of the 'presets' section)")
    override = {k: v for k, v in (presets[name] or {}).items() if k != "description"}
    merged = deep_merge({k: v for k, v in config.items() if k != "presets"}, override)
    if overrides:
        merged = deep_merge(merged, {k: v for k, v in overrides.items() if k not in ("preset", "presets")})
    merged["presets"] = copy.deepcopy(dict(presets))
    return merged


def delta_values(spec: Any) -> list[float]:
    """Δ grid: a list of numbers as given, or ``{start, stop, step}`` expanded inclusively.

    Range values are ``start + i*step`` rounded to 10 decimals (so 0.1 steps print as 0.1, 0.2, ...);
    ``stop`` is included when it lies on the grid (to within 1e-9 steps).
    """
    if isinstance(spec, Mapping):
        start, stop, step = float(spec["start"]), float(spec["stop"]), float(spec["step"])
        count = int(math.floor((stop - start) / step + 1e-9)) + 1
        return [round(start + i * step, 10) + 0.0 for i in range(max(count, 0))]
    return [float(x) for x in spec]


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def check_config(config: Mapping) -> None:
    """Checks that the JSON schema cannot express (run after the schema, on the merged config).

    Raises:
        ConfigError: naming the key (``experiments.collapse.shapes[0].d``) and what is allowed.
    """
    exps = config["experiments"]
    for name in EXPERIMENTS:
        if name not in exps:
            raise ConfigError(f"config key 'experiments.{name}' is missing; allowed: a section for each of "
                              f"{', '.join(EXPERIMENTS)}")
    for name, exp in exps.items():
        key = f"experiments.{name}"
        shapes = exp["shapes"]
        for i, shape in enumerate(shapes):
            skey = f"{key}.shapes[{i}]"
            if not is_allowed(shape["d"], HEAD_DIMS):
                raise ConfigError(f"config key '{skey}.d': {shape['d']!r} is not allowed; allowed: a power of two "
                                  f"from 16 to 256 ({', '.join(map(str, HEAD_DIMS))})")
            for b in ("block_m", "block_n"):
                if not is_allowed(shape[b], BLOCK_SIZES):
                    raise ConfigError(f"config key '{skey}.{b}': {shape[b]!r} is not allowed; allowed: a power of "
                                      f"two from 16 to 256")
        ksinks = exp["ksink"] if isinstance(exp["ksink"], list) else [exp["ksink"]]
        for i, shape in enumerate(shapes):
            for k in ksinks:
                if k >= shape["n"]:
                    raise ConfigError(f"config key '{key}.ksink': {k} is not allowed with {key}.shapes[{i}].n = "
                                      f"{shape['n']}; allowed: 0 <= ksink < n")
                if k > shape["block_n"]:
                    raise ConfigError(f"config key '{key}.ksink': {k} is not allowed with {key}.shapes[{i}].block_n"
                                      f" = {shape['block_n']}; allowed: ksink <= block_n (every sink in KV block 0,"
                                      " as the theory assumes)")
        for field in ("delta", "sigma", "sink_v_scale", "scale"):
            raw = exp[field]
            values = delta_values(raw) if isinstance(raw, (list, Mapping)) else [raw]
            if isinstance(raw, Mapping):
                if raw["stop"] < raw["start"]:
                    raise ConfigError(f"config key '{key}.delta': stop={raw['stop']!r} < start={raw['start']!r}; "
                                      "allowed: start <= stop with step > 0")
            for v in values:
                if not _is_number(v) or not math.isfinite(v):
                    raise ConfigError(f"config key '{key}.{field}': {v!r} is not allowed; allowed: finite numbers")
            if len(set(values)) != len(values):
                raise ConfigError(f"config key '{key}.{field}': values {values!r} repeat; allowed: distinct values "
                                  "(a repeated value would duplicate tidy rows)")
            if field == "delta" and not values:
                raise ConfigError(f"config key '{key}.delta': the grid is empty; allowed: at least one value")
        if name == "conformance":
            nd = [(s["n"], s["d"]) for s in shapes]
            if len(set(nd)) != len(nd):
                raise ConfigError(f"config key '{key}.shapes': (n, d) pairs {nd} repeat; allowed: distinct (n, d) "
                                  "(conformance rows are keyed by order, scale, causal, n, d, seed)")


def shard_seeds(exp: Mapping) -> list[list[int]]:
    """Seeds ``0 .. seeds-1`` cut into consecutive groups of ``seeds_per_shard``."""
    seeds = list(range(int(exp["seeds"])))
    k = int(exp.get("seeds_per_shard", 1))
    return [seeds[i:i + k] for i in range(0, len(seeds), k)]


def n_shards(exp: Mapping) -> int:
    return len(shard_seeds(exp))


def _shapes(exp: Mapping) -> list[dict]:
    return [{k: int(s[k]) for k in ("n", "d", "block_m", "block_n")} for s in exp["shapes"]]


def _floats(values) -> list[float]:
    return [float(v) for v in (values if isinstance(values, list) else [values])]


def shard_spec(name: str, exp: Mapping, shard: int) -> dict:
    """Everything one shard job computes, explicit (Δ expanded): the job's ``params``.

    Snakemake's ``params`` rerun trigger compares this across runs, so a change to one experiment's
    grid reruns only that experiment's shards; adding seeds touches only the shards whose seed list
    changed (so the number of shards is deliberately not part of it).
    """
    groups = shard_seeds(exp)
    if not 0 <= shard < len(groups):
        raise ConfigError(f"experiment {name!r} has {len(groups)} shards; shard {shard} does not exist")
    spec = {
        "experiment": name,
        "shard": shard,
        "seeds": groups[shard],
        "batch": int(exp.get("batch", 1)),
        "heads": int(exp.get("heads", 1)),
        "shapes": _shapes(exp),
        "causal": [bool(c) for c in exp["causal"]],
        "order": list(exp["order"]),
        "scale": _floats(exp["scale"]),
        "fmt": exp.get("fmt", "e4m3fn"),
        "rowsum": exp.get("rowsum", "unrounded"),
    }
    if name == "conformance":
        spec.update(ksink=int(exp["ksink"]), delta=float(exp["delta"]), sigma=float(exp["sigma"]),
                    sink_v_scale=float(exp["sink_v_scale"]), tol=float(exp.get("tol", 1e-5)))
    else:
        spec.update(ksink=[int(k) for k in exp["ksink"]], delta=delta_values(exp["delta"]),
                    sigma=_floats(exp["sigma"]), sink_v_scale=_floats(exp["sink_v_scale"]),
                    backend=exp.get("backend", "auto"), max_batch_items=int(exp.get("max_batch_items", 64)))
    return spec


def inputs_spec(name: str, exp: Mapping, shard: int) -> dict:
    """The part of a shard's spec that decides its stored inputs (not Δ, ksink, sink_v_scale)."""
    spec = shard_spec(name, exp, shard)
    nd = sorted({(s["n"], s["d"]) for s in spec["shapes"]})
    sig = spec["sigma"] if isinstance(spec["sigma"], list) else [spec["sigma"]]
    return {"experiment": name, "shard": shard, "seeds": spec["seeds"], "batch": spec["batch"],
            "heads": spec["heads"], "nd": [list(x) for x in nd], "sigma": sig}


def expected_rows(name: str, exp: Mapping) -> int:
    """Rows of the experiment's tidy table."""
    seeds = int(exp["seeds"])
    shapes, causal, combos = len(exp["shapes"]), len(exp["causal"]), len(exp["order"]) * len(exp["scale"])
    if name == "conformance":
        return seeds * shapes * causal * combos
    grid = len(exp["ksink"]) * len(delta_values(exp["delta"])) * len(exp["sigma"]) * len(exp["sink_v_scale"])
    return seeds * shapes * causal * combos * grid


def spec_json(spec: Mapping) -> str:
    """Canonical JSON (sorted keys, no spaces): a stable ``params`` value."""
    return json.dumps(spec, sort_keys=True, separators=(",", ":"))


def gpu_jobs(exp: Mapping, *, kernel: bool = False) -> int:
    """1 when a job of this experiment would use the GPU here (for ``resources: gpu``), else 0.

    Decided without importing torch: a CUDA device node must exist and CUDA_VISIBLE_DEVICES must
    not hide every device. ``kernel=True`` (conformance) always runs the Triton kernel.
    """
    backend = "triton" if kernel else exp.get("backend", "auto")
    if backend not in ("auto", "triton"):
        return 0
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1"):
        return 0
    return int(os.path.exists("/dev/nvidiactl") or os.path.exists("/dev/nvidia0"))


# ----------------------------------------------------------------------------------------------
# writing


_UMASK = os.umask(0)
os.umask(_UMASK)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[str]:
    """Yield a temporary path next to ``path``; on success rename it over ``path``, else delete it.

    A writer killed outright (SIGKILL) cannot delete its temporary file, so temporaries left by
    an earlier writer of the same ``path`` are removed first: one job owns each output, and the
    rerun of a killed job is what finds them.
    """
    path = os.fspath(path)
    d = os.path.dirname(path) or "."
    os.makedirs(d, exist_ok=True)
    for stale in glob.glob(os.path.join(glob.escape(d), f".{glob.escape(os.path.basename(path))}.*.tmp")):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(stale)
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=d)
    os.close(fd)
    os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp makes 0600; give the file the usual permissions
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_path(path) as tmp:
        with open(tmp, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())


def format_value(v: Any) -> str:
    """Fixed text form: bools ``True``/``False``, ints as digits, floats ``%.10g`` (``nan``, ``inf``)."""
    if isinstance(v, bool):
        return "True" if v else "False"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return "%.10g" % v
    return str(v)


def _csv_text(columns: Sequence[str], rows: Iterable[Mapping[str, Any] | Sequence[str]]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(columns)
    for row in rows:
        if isinstance(row, Mapping):
            w.writerow([format_value(row[c]) for c in columns])
        else:
            w.writerow(row)
    return buf.getvalue()


def _parse(column: str, text: str):
    if column in _INT_COLUMNS:
        return int(text)
    if column in _FLOAT_COLUMNS:
        return float(text)
    if column in _BOOL_COLUMNS:
        if text not in ("True", "False"):
            raise ValueError(f"column {column}: {text!r} is not True/False")
        return text == "True"
    return text


def combo_label(order: str, scale: float) -> str:
    """``"forward S=1"``, ``"reverse S=256"`` (``{scale:g}``)."""
    return f"{order} S={scale:g}"


# ----------------------------------------------------------------------------------------------
# inputs


def _base_key(seed: int, n: int, d: int, sigma: float) -> str:
    return f"seed={seed}/n={n}/d={d}/sigma={sigma!r}"


def write_inputs(spec: Mapping, path: str | os.PathLike) -> dict:
    """Draw the Δ-free base (q, k, v) of every (seed, n, d, sigma) of a shard and store them.

    One safetensors file per (experiment, shard); tensor names ``seed=S/n=N/d=D/sigma=X/{q,k,v}``,
    float32 ``[batch, heads, n, d]``; the spec is stored as metadata. Returns a small summary.
    """
    import torch  # noqa: F401  (make_base needs it; imported here to keep config code torch-free)
    from safetensors.torch import save_file

    from .sinks import make_base

    tensors = {}
    for seed in spec["seeds"]:
        for n, d in spec["nd"]:
            for sigma in spec["sigma"]:
                q, k, v = make_base(seed, batch=spec["batch"], heads=spec["heads"], n=n, d=d, sigma=sigma)
                key = _base_key(seed, n, d, sigma)
                tensors[f"{key}/q"], tensors[f"{key}/k"], tensors[f"{key}/v"] = q, k, v
    with atomic_path(path) as tmp:
        save_file(tensors, tmp, metadata={"spec": spec_json(spec), "format": "pcast-fp8 base v1"})
    nbytes = sum(t.numel() * t.element_size() for t in tensors.values())
    log.info("wrote %d tensors (%.1f MB) to %s", len(tensors), nbytes / 1e6, path)
    return {"tensors": len(tensors), "bytes": nbytes}


def load_inputs(path: str | os.PathLike, spec: Mapping) -> dict:
    """Load a shard's base tensors and check that they were made for this shard's seeds and shapes."""
    from safetensors import safe_open
    from safetensors.torch import load_file

    with safe_open(os.fspath(path), framework="pt") as fh:
        meta = json.loads((fh.metadata() or {}).get("spec", "{}"))
    want = {"seeds": list(spec["seeds"]), "batch": spec["batch"], "heads": spec["heads"]}
    got = {k: meta.get(k) for k in want}
    if got != want:
        raise RuntimeError(f"{path} was made for {got}, this shard needs {want}; delete it and rerun")
    return load_file(os.fspath(path))


def _base(tensors: Mapping, seed: int, n: int, d: int, sigma: float):
    key = _base_key(seed, n, d, sigma)
    try:
        return tensors[f"{key}/q"], tensors[f"{key}/k"], tensors[f"{key}/v"]
    except KeyError:
        raise RuntimeError(f"stored inputs lack base {key}; delete the inputs file and rerun") from None


# ----------------------------------------------------------------------------------------------
# sweeps


def _device(backend: str):
    import torch

    if backend in ("auto", "triton") and torch.cuda.is_available():
        return torch.device("cuda")
    return torch.device("cpu")


def _reference_chunked(q, k, v, *, causal: bool, budget: int = 1 << 20):
    """float64 reference for a stacked batch, about ``budget`` scores at a time (cache-sized: fastest)."""
    import torch

    from .reference import reference_attention

    per_item = q.shape[1] * q.shape[2] * k.shape[2]
    step = max(1, budget // max(per_item, 1))
    parts = [reference_attention(q[i:i + step], k[i:i + step], v[i:i + step], causal=causal)
             for i in range(0, q.shape[0], step)]
    return torch.cat(parts, 0)


def _item_rows(r, ref, ref_sq, items, meta: Mapping) -> list[dict]:
    """Tidy rows of one attention call on a stack of ``len(items)`` (sink_v_scale, Δ) variants."""
    L = len(items)
    err = (r.out.double() - ref).reshape(L, -1)
    mse, mae = err.square().mean(1).cpu(), err.abs().amax(1).cpu()
    rsq = ref_sq.cpu()
    cnt = {c: getattr(r, c).reshape(L, -1).sum(1).cpu().tolist()
           for c in ("underflow", "terms", "underflow_sink", "terms_sink", "saturated")}
    rows = []
    for i, (svs, dl) in enumerate(items):
        uf, tm, ufs, tms = cnt["underflow"][i], cnt["terms"][i], cnt["underflow_sink"][i], cnt["terms_sink"][i]
        m, r2 = float(mse[i]), float(rsq[i])
        rows.append({**meta, "delta": dl, "sink_v_scale": svs, "backend": r.backend, "mse": m,
                     "rel_mse": m / r2 if r2 > 0 else math.nan, "max_abs_err": float(mae[i]),
                     "underflow": uf, "terms": tm, "underflow_frac": uf / tm if tm else math.nan,
                     "underflow_sink": ufs, "terms_sink": tms,
                     "underflow_sink_frac": ufs / tms if tms else math.nan, "saturated": cnt["saturated"][i]})
    return rows


def run_sweep_shard(spec: Mapping, inputs_path: str | os.PathLike, out_csv: str | os.PathLike,
                    timing_csv: str | os.PathLike, *, threads: int = 1, n_shards: int | None = None) -> dict:
    """Run one shard of a sweep experiment and write its tidy rows and timing.

    For every seed, shape, sigma, causal flag and ksink, the (sink_v_scale, Δ) variants of the
    stored base are stacked along the batch dimension (``max_batch_items`` at a time); the float64
    reference is computed once per stack and every (order, scale) combination runs on the same
    tensors, so the combinations are paired by seed.
    """
    import itertools

    import torch

    from . import attention
    from .sinks import apply_sink

    torch.set_num_threads(max(1, int(threads)))
    t_start = time.perf_counter()
    name = spec["experiment"]
    tensors = load_inputs(inputs_path, spec)
    device = _device(spec["backend"])
    combos = [(o, float(s)) for o in spec["order"] for s in spec["scale"]]
    variants = [(svs, dl) for svs in spec["sink_v_scale"] for dl in spec["delta"]]
    chunk = max(1, spec["max_batch_items"])
    rows: list[dict] = []
    backends: set[str] = set()
    t_ref = t_kernel = 0.0
    runs = 0
    for si, seed in enumerate(spec["seeds"]):
        t_seed = time.perf_counter()
        groups = itertools.product(spec["shapes"], spec["sigma"], spec["causal"], spec["ksink"],
                                   range(0, len(variants), chunk))
        for shape, sigma, causal, ksink, c0 in groups:
            n, d, bm, bn = shape["n"], shape["d"], shape["block_m"], shape["block_n"]
            items = variants[c0:c0 + chunk]
            base = _base(tensors, seed, n, d, sigma)
            parts = [apply_sink(*base, ksink=ksink, delta=dl, sink_v_scale=svs) for svs, dl in items]
            q, k, v = (torch.cat([p[j] for p in parts]).to(device) for j in range(3))
            del parts
            t0 = time.perf_counter()
            ref = _reference_chunked(q, k, v, causal=causal)
            ref_sq = ref.square().reshape(len(items), -1).mean(1)
            t_ref += time.perf_counter() - t0
            for order, scale in combos:
                t0 = time.perf_counter()
                r = attention(q, k, v, order=order, scale=scale, fmt=spec["fmt"], causal=causal, ksink=ksink,
                              block_m=bm, block_n=bn, rowsum=spec["rowsum"], backend=spec["backend"])
                if device.type == "cuda":
                    torch.cuda.synchronize()
                t_kernel += time.perf_counter() - t0
                runs += len(items)
                backends.add(r.backend)
                meta = {"experiment": name, "seed": seed, "n": n, "d": d, "block_m": bm, "block_n": bn,
                        "causal": bool(causal), "ksink": ksink, "sigma": sigma, "order": order, "scale": scale,
                        "fmt": spec["fmt"], "rowsum": spec["rowsum"], "combo": combo_label(order, scale)}
                rows += _item_rows(r, ref, ref_sq, items, meta)
            del q, k, v, ref
        log.info("%s shard %d: seed %d (%d/%d) done in %.2f s", name, spec["shard"], seed, si + 1,
                 len(spec["seeds"]), time.perf_counter() - t_seed)
    rows.sort(key=_tidy_sort_key)
    atomic_write_text(out_csv, _csv_text(TIDY_COLUMNS, rows))
    wall = time.perf_counter() - t_start
    backend = ",".join(sorted(backends))
    timing = {"experiment": name, "shard": spec["shard"], "seeds": " ".join(map(str, spec["seeds"])),
              "runs": runs, "backend": backend, "wall_s": round(wall, 3), "reference_s": round(t_ref, 3),
              "kernel_s": round(t_kernel, 3)}
    atomic_write_text(timing_csv, _csv_text(TIMING_COLUMNS, [timing]))
    note = ""
    if "emulator" in backends and spec["backend"] == "auto":
        note = " -- ran on the EMULATOR (backend=auto found no CUDA GPU with FP8 support)"
    elif "triton-interpreted" in backends:
        note = " -- the Triton kernel ran INTERPRETED on the CPU"
    progress(f"[pcast] {name} shard {_of(spec['shard'], n_shards)}: seeds "
             f"{spec['seeds'][0]}-{spec['seeds'][-1]}, {runs} runs in {wall:.1f} s "
             f"(reference {t_ref:.1f} s, kernel {t_kernel:.1f} s), backend {backend}{note}")
    return timing


def _of(shard: int, n_shards: int | None) -> str:
    return f"{shard + 1}/{n_shards}" if n_shards else f"{shard + 1}"


def _tidy_sort_key(row: Mapping[str, Any]):
    return tuple(row[c] for c in CONFIG_COLUMNS) + (row["seed"],)


# ----------------------------------------------------------------------------------------------
# conformance


def run_conformance_shard(spec: Mapping, inputs_path: str | os.PathLike, out_csv: str | os.PathLike,
                          timing_csv: str | os.PathLike, *, threads: int = 1, n_shards: int | None = None) -> dict:
    """Triton kernel vs emulator (:func:`kernels.conformance.compare`) on every shape, causal flag and
    (order, scale) of one shard's seeds; one row per (order, scale, causal, n, d, seed)."""
    import torch

    from .conformance import compare
    from .sinks import apply_sink

    torch.set_num_threads(max(1, int(threads)))
    t_start = time.perf_counter()
    tensors = load_inputs(inputs_path, spec)
    rows = []
    backends: set[str] = set()
    for seed in spec["seeds"]:
        for shape in spec["shapes"]:
            n, d = shape["n"], shape["d"]
            q, k, v = apply_sink(*_base(tensors, seed, n, d, spec["sigma"]), ksink=spec["ksink"],
                                 delta=spec["delta"], sink_v_scale=spec["sink_v_scale"])
            for causal in spec["causal"]:
                for order in spec["order"]:
                    for scale in spec["scale"]:
                        rep = compare(q, k, v, order=order, scale=scale, fmt=spec["fmt"], causal=causal,
                                      ksink=spec["ksink"], block_m=shape["block_m"], block_n=shape["block_n"],
                                      rowsum=spec["rowsum"], tol=spec["tol"])
                        backends.add(rep["kernel_backend"])
                        row = {"order": order, "scale": scale, "causal": bool(causal), "n": n, "d": d,
                               "seed": seed, "kernel_backend": rep["kernel_backend"],
                               "max_abs_diff": float(rep["max_abs_diff"]),
                               "max_rel_diff": float(rep["max_rel_diff"]), "diag_equal": bool(rep["diag_equal"]),
                               "mismatched_rows": int(rep["mismatched_rows"]), "explained": bool(rep["explained"]),
                               "fragile_elements": int(rep["fragile_elements"])}
                        rows.append(row)
                        level = logging.INFO if rep["explained"] else logging.WARNING
                        log.log(level, "seed %d n=%d d=%d causal=%s %s: diag_equal=%s explained=%s (%s)", seed, n, d,
                                causal, combo_label(order, scale), rep["diag_equal"], rep["explained"],
                                rep.get("why", ""))
    rows.sort(key=lambda r: tuple(r[c] for c in CONFORMANCE_KEY))
    atomic_write_text(out_csv, _csv_text(CONFORMANCE_COLUMNS, rows))
    wall = time.perf_counter() - t_start
    backend = ",".join(sorted(backends))
    timing = {"experiment": "conformance", "shard": spec["shard"], "seeds": " ".join(map(str, spec["seeds"])),
              "runs": len(rows), "backend": backend, "wall_s": round(wall, 3), "reference_s": 0.0,
              "kernel_s": round(wall, 3)}
    atomic_write_text(timing_csv, _csv_text(TIMING_COLUMNS, [timing]))
    note = " -- the Triton kernel ran INTERPRETED on the CPU" if "triton-interpreted" in backends else ""
    bad = sum(not r["explained"] for r in rows)
    progress(f"[pcast] conformance shard {_of(spec['shard'], n_shards)}: {len(rows)} comparisons in "
             f"{wall:.1f} s, {bad} unexplained, kernel backend {backend}{note}")
    return timing


# ----------------------------------------------------------------------------------------------
# tables


def _read_csv(path: str | os.PathLike, columns: Sequence[str]) -> list[list[str]]:
    with open(path, newline="", encoding="utf-8") as fh:
        rows = list(csv.reader(fh))
    if not rows or tuple(rows[0]) != tuple(columns):
        raise RuntimeError(f"{path}: header {rows[0] if rows else None} is not {list(columns)}")
    return rows[1:]


def merge_tidy(paths: Sequence[str | os.PathLike], out_csv: str | os.PathLike, *, conformance: bool = False,
               expected: int | None = None) -> int:
    """Concatenate shard tables, sort them by configuration then seed, and write ``out_csv`` atomically.

    Values are copied as text (they were formatted once, by the shard), so the table is
    byte-deterministic. Raises on a wrong header, a duplicate (configuration, seed) or a row count
    other than ``expected``.
    """
    columns = CONFORMANCE_COLUMNS if conformance else TIDY_COLUMNS
    key_cols = CONFORMANCE_KEY if conformance else CONFIG_COLUMNS + ("seed",)
    idx = [columns.index(c) for c in key_cols]
    rows = [r for p in paths for r in _read_csv(p, columns)]
    keyed = [(tuple(_parse(columns[i], r[i]) for i in idx), r) for r in rows]
    keyed.sort(key=lambda kr: kr[0])
    for (a, _), (b, _) in zip(keyed, keyed[1:]):
        if a == b:
            raise RuntimeError(f"duplicate row for {dict(zip(key_cols, a))}")
    if expected is not None and len(keyed) != expected:
        raise RuntimeError(f"{out_csv}: {len(keyed)} rows, expected {expected}")
    atomic_write_text(out_csv, _csv_text(columns, [r for _, r in keyed]))
    return len(keyed)


def merge_timing(paths: Sequence[str | os.PathLike], out_csv: str | os.PathLike) -> int:
    rows = [r for p in paths for r in _read_csv(p, TIMING_COLUMNS)]
    rows.sort(key=lambda r: int(r[1]))
    atomic_write_text(out_csv, _csv_text(TIMING_COLUMNS, rows))
    return len(rows)


# ----------------------------------------------------------------------------------------------
# benchmarks


def summarize_benchmarks(bench_dir: str | os.PathLike = "results/benchmarks") -> str:
    """A Markdown table of the wall time per step from Snakemake's ``benchmark:`` files.

    Steps are the benchmark paths without the shard: ``sweeps/collapse`` sums its shards'
    files, ``claims/fig_collapse`` is one job. Columns: jobs, total seconds, slowest job.
    """
    groups: dict[str, list[float]] = {}
    root = os.fspath(bench_dir)
    for dirpath, _, files in os.walk(root):
        for f in files:
            if not f.endswith(".tsv"):
                continue
            rel = os.path.relpath(os.path.join(dirpath, f), root)
            parts = rel[:-4].split(os.sep)
            if parts[-1].startswith("shard"):
                parts = parts[:-1]
            with open(os.path.join(dirpath, f), encoding="utf-8") as fh:
                rows = list(csv.reader(fh, delimiter="\t"))
            if len(rows) >= 2:
                groups.setdefault("/".join(parts), []).append(float(rows[-1][0]))
    lines = ["| step | jobs | total s | slowest job s |", "| --- | ---: | ---: | ---: |"]
    for key in sorted(groups):
        ts = groups[key]
        lines.append(f"| {key} | {len(ts)} | {sum(ts):.1f} | {max(ts):.1f} |")
    total = sum(sum(ts) for ts in groups.values())
    lines.append(f"| **all jobs (sum of job wall times; the run overlaps them)** | {sum(map(len, groups.values()))} | {total:.1f} | |")
    return "\n".join(lines) + "\n"
