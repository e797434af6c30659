"""The smoke preset's cached real-model input: one layer of all-MiniLM-L6-v2's Q, K, V.

    python tools/make_smoke_tensors.py        # rewrites workflow/resources/realmodel-smoke.safetensors

Captures 2 passages x 128 tokens (the model's files and the passages' sources checked against their
expected sha256 first, as in the realmodel experiment), keeps layer 1 (6 of its 12 heads have a
clean [CLS] sink, the most of any layer at this size) as ``layer0/q|k|v`` in float16 (half the bytes;
the smoke run reads them as they are stored), with the model, revision, layer and passages in the
metadata. The smoke preset reads the file as a user's own tensors (experiments.realmodel.tensors), so
a kick-the-tires run loads no model: it runs the heads of this layer through the same steps.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "workflow" / "resources" / "realmodel-smoke.safetensors"
PASSAGES, TOKENS, LAYER = 2, 128, 1


def main(argv=None) -> int:
    import torch
    from safetensors.torch import save

    from pcast.models import realmodel as rm
    from pcast.host.files import canonical_safetensors

    torch.set_num_threads(1)
    rm.check_model_files()
    tok = rm.load_tokenizer()
    ps = rm.passages(tok, count=PASSAGES, tokens=TOKENS)
    ids = rm.encode(tok, ps, TOKENS)
    cap = rm.capture(rm.load_model(), ids)
    tensors = {f"layer0/{t}": cap[f"layer{LAYER}/{t}"].half().contiguous() for t in "qkv"}
    d = tensors["layer0/q"].shape[-1]
    info = rm.model_info()
    meta = {"model": f"{info['model']} layer {LAYER} (the smoke preset's cached input)",
            "revision": info["revision"], "model_sha256": info["model_sha256"], "sm_scale": repr(1.0 / math.sqrt(d)),
            "passages": json.dumps([{"source": p.source, "sha256": p.sha256, "tokens": p.tokens} for p in ps])}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_bytes(canonical_safetensors(save(tensors, metadata=meta)))
    print(OUT)
    return 0


if __name__ == "__main__":
    sys.exit(main())
