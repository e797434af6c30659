"""The realmodel experiment's jobs: capture a pretrained model's Q, K, V; measure every head; embed.

* :func:`run_capture`: the model's files and the passages' source texts checked against their expected
  sha256 (:func:`pcast.models.realmodel.check_model_files`, :func:`pcast.models.realmodel.source_text`),
  then the passages (:func:`pcast.models.realmodel.passages`), their token ids, Q, K, V of
  every layer (``layer{L}/q|k|v``, float32 [P, H, N, d]) and the exact embeddings, as safetensors
  with the model, its revision and the passages' sources and hashes in the metadata.
* :func:`run_layer`: one layer's heads under every run: the four combinations, the named policies,
  and the four combinations again on key-shuffled inputs (the positional-structure control). One
  row per (passage, head, run) with the kernel's counts, the mass-weighted underflow (from the
  running-max rule, :func:`pcast.models.heads.underflow_mask`, whose count must equal the kernel's:
  a mismatch stops the job), the head's detected sinks, Δ, σ and [CLS] mass (the theory's prediction is
  made per head from these by :func:`pcast.analysis.realmodel.head_summary`).
* :func:`run_outputs`: the whole model with every layer's attention run by pcast.attention, per
  run; the embedding cosine to the exact one per passage, and per passage pair the exact and FP8
  similarity and whether the pair's rank among all pairs moved.

The passages play the role of seeds: every run sees the same captured tensors, so comparisons are
paired by passage. Same config, same bytes.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Mapping

from safetensors import safe_open
from scipy.stats import rankdata
import torch

from pcast.api_multi import attention_calls
from pcast.models import heads as H, realmodel as rm
from pcast.contract import COMBOS, combo_label, float32
from pcast.host.files import atomic_write_safetensors, atomic_write_text
from pcast.pipeline.logs import progress
from pcast.pipeline.tables import csv_text
from pcast.reference import reference_attention

__all__ = ["HEAD_COLUMNS", "OUTPUT_COLUMNS", "PAIR_COLUMNS", "run_capture", "run_layer", "run_outputs",
           "combo_kwargs", "run_names", "load_captured", "layer_names", "SHUFFLED", "OUTPUT_INPUTS"]

log = logging.getLogger("pcast.pipeline")

HEAD_COLUMNS = ("layer", "head", "passage", "run", "kind", "order", "scale", "fmt", "block_n", "backend", "mse",
                "rel_mse", "underflow", "terms", "underflow_frac", "mass_underflow", "underflow_sink", "saturated",
                "sinks", "n_sinks", "sink_type", "delta", "sigma", "cls_mass", "n")
OUTPUT_INPUTS = ("input_ids", "embeddings")  # what run_outputs reads of the captured file (absent: a user's tensors)
OUTPUT_COLUMNS = ("run", "kind", "passage", "source", "cosine", "one_minus_cos")
PAIR_COLUMNS = ("run", "kind", "a", "b", "sim_exact", "sim_run", "sim_change", "rank_exact", "rank_run",
                "rank_moved")
SHUFFLED = "shuffled "  # prefix of the key-shuffled control runs


def combo_kwargs(order: str, scale: float, cfg: Mapping) -> dict:
    """pcast.attention keywords of one of the four combinations in this experiment."""
    return {"order": order, "scale": float(scale), "fmt": "e4m3fn", "block_m": int(cfg["block_m"]),
            "block_n": int(cfg["block_n"])}


def run_names(cfg: Mapping, policies: Mapping) -> list[tuple[str, str, dict]]:
    """(run, kind, pcast.attention keywords): the combinations, then the named policies in config order."""
    runs = [(combo_label(o, s), "combo", combo_kwargs(o, s, cfg)) for o, s in COMBOS]
    runs += [(name, "policy", dict(policies[name])) for name in cfg["policies"]]
    return runs


def run_capture(cfg: Mapping, *, tensors_out: str, meta_out: str) -> dict:
    """Passages -> token ids -> Q, K, V per layer and exact embeddings, written atomically."""
    if cfg.get("tensors"):
        return _user_tensors(cfg, tensors_out=tensors_out, meta_out=meta_out)
    t0 = time.perf_counter()
    rm.check_model_files()  # the weights, config and tokenizer, before anything is loaded or written
    tok = rm.load_tokenizer()
    ps = rm.passages(tok, count=int(cfg["passages"]), tokens=int(cfg["tokens"]))  # each source's text checked
    model = rm.load_model()
    ids = rm.encode(tok, ps, int(cfg["tokens"]))
    cap = rm.capture(model, ids)
    emb = rm.embed(model, ids)
    mc = model.config
    d = mc.hidden_size // mc.num_attention_heads
    meta = {**rm.model_info(), "layers": mc.num_hidden_layers, "heads": mc.num_attention_heads, "d": d,
            "tokens": int(cfg["tokens"]), "sm_scale": 1.0 / math.sqrt(d),
            "passages": [{"source": p.source, "sha256": p.sha256, "tokens": p.tokens} for p in ps]}
    if mc.num_hidden_layers != int(cfg["layers"]):
        raise ValueError(f"config key 'experiments.realmodel.layers': {cfg['layers']} does not match the model's "
                         f"{mc.num_hidden_layers} layers")
    tensors = {**cap, "input_ids": ids.contiguous(), "embeddings": emb.contiguous()}
    atomic_write_safetensors(tensors_out, tensors, {k: json.dumps(v, sort_keys=True) for k, v in meta.items()})
    atomic_write_text(meta_out, json.dumps(meta, indent=2, sort_keys=True) + "\n")
    progress(f"realmodel capture: {len(ps)} passages x {cfg['tokens']} tokens, {mc.num_hidden_layers} layers x "
             f"{mc.num_attention_heads} heads, d = {d}, in {time.perf_counter() - t0:.1f} s")
    return meta


def _user_tensors(cfg: Mapping, *, tensors_out: str, meta_out: str) -> dict:
    """A user's own captured tensors (``layer{L}/q|k|v``, [B, H, N, d] or [H, N, d]) checked and copied."""
    path, key = cfg["tensors"], "config key 'experiments.realmodel.tensors'"
    try:
        with safe_open(path, "pt") as fh:
            user_meta, keys = fh.metadata() or {}, set(fh.keys())
            names = [n for layer in range(int(cfg["layers"])) for n in layer_names(layer)]
            missing = [n for n in names if n not in keys]
            if missing:
                raise ValueError(f"{key}: {path!r} lacks {missing[0]!r} (layers 0..{int(cfg['layers']) - 1} from "
                                 f"experiments.realmodel.layers); it has: {', '.join(sorted(keys)[:12])}")
            raw = {n: fh.get_tensor(n) for n in names}
    except ValueError:
        raise
    except Exception as e:  # noqa: BLE001 - safetensors raises several types for a bad file
        raise ValueError(f"{key}: {path!r} is not a readable safetensors file: {e}") from None
    out = {}
    for name, x in raw.items():
        x = x.unsqueeze(0) if x.dim() == 3 else x
        if x.dim() != 4 or not x.is_floating_point():
            raise ValueError(f"tensor {name!r} of {path!r} must be floating point [B, H, N, d] or [H, N, d], "
                             f"got {x.dtype} {tuple(x.shape)}")
        out[name] = x.float().contiguous()
    d = out["layer0/q"].shape[-1]
    meta = {"model": user_meta.get("model", "user tensors"), "revision": user_meta.get("revision", "unknown"),
            "model_sha256": "", "layers": int(cfg["layers"]), "heads": out["layer0/q"].shape[1], "d": d,
            "tokens": out["layer0/q"].shape[-2], "sm_scale": float(user_meta.get("sm_scale", 1.0 / math.sqrt(d))),
            "passages": [{"source": f"{path} batch {b}", "sha256": "", "tokens": out["layer0/q"].shape[-2]}
                         for b in range(out["layer0/q"].shape[0])]}
    atomic_write_safetensors(tensors_out, out, {k: json.dumps(v, sort_keys=True) for k, v in meta.items()})
    atomic_write_text(meta_out, json.dumps(meta, indent=2, sort_keys=True) + "\n")
    progress(f"realmodel: the user's tensors {path!r}, {meta['layers']} layers x {meta['heads']} heads, d = {d}")
    return meta


def load_captured(path: str, names=None) -> tuple[dict, dict]:
    """The captured tensors (all, or those of ``names`` the file has) and their metadata (JSON values decoded)."""
    with safe_open(path, "pt") as fh:
        meta = {k: json.loads(v) for k, v in (fh.metadata() or {}).items()}
        keys = set(fh.keys())
        tensors = {n: fh.get_tensor(n) for n in (keys if names is None else [n for n in names if n in keys])}
    return tensors, meta


def layer_names(layer: int) -> list[str]:
    """The tensor names of one layer in the captured file."""
    return [f"layer{layer}/{t}" for t in "qkv"]


def _shuffle(k: torch.Tensor, v: torch.Tensor, seed: int):
    """Keys 1..N-1 permuted (the same permutation for k and v, every passage and head); key 0 stays.
    Returns the permuted k, v and the permutation (key j of the shuffled inputs is key perm[j])."""
    n = k.shape[-2]
    g = torch.Generator().manual_seed(seed)
    perm = torch.cat([torch.zeros(1, dtype=torch.long), 1 + torch.randperm(n - 1, generator=g)])
    return k[..., perm, :].contiguous(), v[..., perm, :].contiguous(), perm


def _head_info(q, k, perm, sm: float) -> dict:
    """Per (passage, head): exact step-1 scores (as given and key-shuffled), detected sinks, measured stats,
    exact probabilities (the shuffled scores and probabilities are the same ones, permuted by ``perm``)."""
    info = {}
    for p in range(q.shape[0]):
        for h in range(q.shape[1]):
            qk = q[p, h].double() @ k[p, h].double().T
            s64 = qk * sm
            exact = qk * float32(sm)  # (pcast.models.heads.exact_scores: the decisions' scores)
            sinks = H.detect_sinks(s64)
            probs = H.exact_probs(s64)
            info[p, h] = {"sinks": sinks, "stats": H.head_scores_stats(s64, sinks), "probs": probs,
                          "probs_shuf": probs[:, perm], "exact": exact, "exact_shuf": exact[:, perm]}
    return info


def run_layer(tensors: Mapping, meta: Mapping, layer: int, cfg: Mapping, policies: Mapping, *,
              backend: str) -> list[dict]:
    """Every head of one layer under every run; rows of :data:`HEAD_COLUMNS`."""
    q, k, v = (tensors[f"layer{layer}/{t}"] for t in "qkv")
    sm, ksink = float(meta["sm_scale"]), int(cfg["ksink"])
    P, nh, n, _ = q.shape
    ks, vs, perm = _shuffle(k, v, int(cfg["shuffle_seed"]) + layer)
    # one float64 reference for both: keys and values permuted together leave every output row as it is
    ref = reference_attention(q, k, v, causal=False, sm_scale=sm)
    ref_power = (ref ** 2).mean(dim=(-2, -1))  # [P, H]
    info = _head_info(q, k, perm, sm)
    runs = run_names(cfg, policies)
    runs += [(SHUFFLED + name, "shuffled", kw) for name, kind, kw in runs if kind == "combo"]
    # one attention_calls for the runs on the captured keys and one for the shuffled keys (scores shared)
    results = {}
    for shuffled, (kk, vv) in ((False, (k, v)), (True, (ks, vs))):
        mine = [(name, kw) for name, kind, kw in runs if (kind == "shuffled") == shuffled]
        got = attention_calls(q, kk, [vv], [kw for _, kw in mine], ksink=ksink, sm_scale=sm, backend=backend)
        results.update((name, r) for (name, _), (r,) in zip(mine, got))
    rows = []
    for name, kind, kw in runs:
        shuffled = kind == "shuffled"
        r = results.pop(name)
        err = ((r.out.double() - ref) ** 2).mean(dim=(-2, -1))
        for p in range(P):
            for h in range(nh):
                hi, st = info[p, h], info[p, h]["stats"]
                uf, terms = int(r.underflow[p, h].sum()), int(r.terms[p, h].sum())
                mass = None
                if H.rule_applies(kw):  # compiled Triton's scores may differ by an ulp: the count check is the emulator's
                    want = (uf, int(r.underflow_sink[p, h].sum())) if r.backend == "emulator" else None
                    sfx = "_shuf" if shuffled else ""
                    mass = H.rule_mass(hi["exact" + sfx], hi["probs" + sfx], kw, ksink=ksink, want=want,
                                       where=f"layer {layer} passage {p} head {h} run {name!r}")
                rows.append({
                    "layer": layer, "head": h, "passage": p, "run": name, "kind": kind, "order": kw["order"],
                    "scale": float(kw["scale"]), "fmt": kw.get("fmt") or "none", "block_n": int(kw["block_n"]),
                    "backend": r.backend, "mse": float(err[p, h]), "rel_mse": float(err[p, h] / ref_power[p, h]),
                    "underflow": uf, "terms": terms, "underflow_frac": uf / terms if terms else 0.0,
                    "mass_underflow": mass, "underflow_sink": int(r.underflow_sink[p, h].sum()),
                    "saturated": int(r.saturated[p, h].sum()), "sinks": ";".join(map(str, hi["sinks"])),
                    "n_sinks": len(hi["sinks"]), "sink_type": H.sink_type(hi["sinks"]), "delta": st["delta"],
                    "sigma": st["sigma"], "cls_mass": st["cls_mass"], "n": n})
    return rows


def write_layer(rows, out_csv: str) -> None:
    """The layer's rows as CSV (atomically); a value that does not apply (None) is written ``nan``."""
    rows = [{c: (float("nan") if r[c] is None else r[c]) for c in HEAD_COLUMNS} for r in rows]
    atomic_write_text(out_csv, csv_text(HEAD_COLUMNS, rows))


def run_outputs(tensors: Mapping, meta: Mapping, cfg: Mapping, policies: Mapping, *, backend: str):
    """The whole model per run; (output rows, pair rows)."""
    if "input_ids" not in tensors:  # a user's tensors: no model to run
        progress("realmodel outputs: the tensors are a user's own (experiments.realmodel.tensors); no model to run")
        return [], []
    model = rm.load_model()
    ids = tensors["input_ids"]
    exact = tensors["embeddings"].double()
    sources = [p["source"] for p in meta["passages"]]
    P = ids.shape[0]
    iu = torch.triu_indices(P, P, offset=1)
    sim_exact = (exact @ exact.T)[iu[0], iu[1]]
    rank_exact = rankdata(-sim_exact.numpy(), method="ordinal")
    out_rows, pair_rows = [], []
    for name, kind, kw in run_names(cfg, policies):
        t0 = time.perf_counter()
        e = rm.embed(model, ids, attention={**kw, "ksink": int(cfg["ksink"]), "backend": backend}).double()
        cos = (e * exact).sum(-1)
        for p in range(P):
            out_rows.append({"run": name, "kind": kind, "passage": p, "source": sources[p], "cosine": float(cos[p]),
                             "one_minus_cos": float(1 - cos[p])})
        sim = (e @ e.T)[iu[0], iu[1]]
        rank = rankdata(-sim.numpy(), method="ordinal")
        for i in range(len(sim)):
            pair_rows.append({"run": name, "kind": kind, "a": int(iu[0, i]), "b": int(iu[1, i]),
                              "sim_exact": float(sim_exact[i]), "sim_run": float(sim[i]),
                              "sim_change": float(sim[i] - sim_exact[i]), "rank_exact": int(rank_exact[i]),
                              "rank_run": int(rank[i]), "rank_moved": bool(rank[i] != rank_exact[i])})
        progress(f"realmodel outputs: {name}: min cosine {float(cos.min()):.6f} ({time.perf_counter() - t0:.1f} s)")
    return out_rows, pair_rows
