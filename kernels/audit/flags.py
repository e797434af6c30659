"""pcast-audit's flags read: your policy from one flag per field of :class:`pcast.policies.Policy` (so they
cannot drift), ``--exp2-offset K``, the ``--fail-on`` conditions, and the warning for a scale that looks like a
log2 offset.

Used by :mod:`pcast.audit.settings`; the flags themselves are added to the parser by :mod:`pcast.cli.audit`.
"""

from __future__ import annotations

import dataclasses
import math
import re

from pcast.policies import Policy
from pcast.contract import DYNAMIC_SCALE_MODES, SCALE_MODE_ALIASES

# Your policy's defaults where they differ from Policy's: the P path the paper recommends.
YOURS_DEFAULTS = {"order": "reverse", "scale": 256.0}
_META = ("name", "source", "read")  # Policy fields that are not keywords of pcast.attention
FAIL_ON_WORDS = ("collapse", "saturation", "mismatch")  # conditions without a number (mismatch: with --kernel)
FAIL_ON_BOUNDS = ("rel-mse", "floor", "mass-underflow", "ratio")  # with a number: rel-mse>X (or rel-mse:X), ...
_POW2 = re.compile(r"^\s*2\s*\^\s*(-?\d+(?:\.\d+)?)\s*$")


def policy_fields() -> list:
    """The fields of Policy that are keywords of pcast.attention, in declaration order."""
    return [f for f in dataclasses.fields(Policy) if f.name not in _META]


def flag(field: str) -> str:
    """``scale_mode`` -> ``--scale-mode``."""
    return "--" + field.replace("_", "-")


def _scale_text(text: str) -> float:
    """A scale as given on the command line: a number, or ``2^K``."""
    m = _POW2.match(text)
    return 2.0 ** float(m.group(1)) if m else float(text)


def parse_field(field, text: str):
    """One flag's text as the Policy field's type: numbers for float and int fields, ``none`` for
    None where the field allows it, a number or a word where both are allowed (qk_scale, v_scale)."""
    kind = str(field.type).replace(" ", "")
    if "None" in kind and text.strip().lower() == "none":
        return None
    try:
        if kind == "float":
            return _scale_text(text) if field.name == "scale" else float(text)
        if kind == "int":
            return int(text, 10)
        if "float" in kind:
            try:
                return float(text)
            except ValueError:
                return text
    except ValueError:
        raise ValueError(f"{flag(field.name)}={text!r} is not allowed; allowed: a number"
                         + (" or 2^K" if field.name == "scale" else "")) from None
    return text


def declared(texts: dict, exp2_offset=None) -> bool:
    """Whether any flag of your policy was given (``texts``: ``{field: text or None}``; or ``--exp2-offset``)."""
    return exp2_offset is not None or any(texts.get(f.name) is not None for f in policy_fields())


def yours(texts: dict, exp2_offset=None):
    """Your policy (:class:`pcast.policies.Policy` named ``yours``) from its flags' texts (``{field: text or
    None}``, a missing field as not given) and ``--exp2-offset``; ValueError naming a flag."""
    values = {}
    for f in policy_fields():
        text = texts.get(f.name)
        values[f.name] = YOURS_DEFAULTS.get(f.name, f.default) if text is None else parse_field(f, text)
    if exp2_offset is not None:
        k = exp2_offset
        if not (math.isfinite(k) and abs(k) <= 64):
            raise ValueError(f"--exp2-offset={k!r} is not allowed; allowed: a finite number of log2 units, |K| <= 64")
        if texts.get("scale") is not None or texts.get("scale_mode") not in (None, "exp2_offset"):
            raise ValueError("--exp2-offset is not allowed with --scale or --scale-mode multiply/per_row; allowed: "
                             "--exp2-offset K alone (it sets --scale-mode exp2_offset --scale 2^K)")
        values.update(scale_mode="exp2_offset", scale=2.0 ** k)
    if texts.get("scale") is None and values["scale_mode"] in DYNAMIC_SCALE_MODES + tuple(SCALE_MODE_ALIASES):
        values["scale"] = 1.0  # a dynamic scale takes S = 1 (docs/interfaces.md, "Dynamic P scales")
    for f in policy_fields():  # one field at a time, so the error names its flag
        try:
            Policy("yours", **{f.name: values[f.name]})
        except ValueError as e:
            raise ValueError(f"{flag(f.name)}={values[f.name]!r} is not allowed; allowed: "
                             f"{str(e).split('allowed: ', 1)[1]}") from None
    return Policy("yours", **values, source="pcast-audit command line")


def parse_fail_on(items) -> list:
    """``--fail-on`` conditions as ``[(word, bound or None), ...]``: ``collapse``, ``saturation``, ``mismatch``
    (with ``--kernel``), and with a bound written ``word>X`` (or ``word:X``): ``rel-mse>X`` (X > 0),
    ``floor>F`` (F >= 1), ``mass-underflow>X`` (0 <= X < 1, the lost attention mass) and ``ratio>X`` (X >= 1,
    the MSE over the best of the four combinations)."""
    out = []
    allowed = ("collapse, saturation, mismatch (with --kernel), rel-mse>X (X > 0), floor>F (F >= 1), "
               "mass-underflow>X (0 <= X < 1), ratio>X (X >= 1); a bound may also follow ':'")
    ok = {"rel-mse": lambda x: x > 0, "floor": lambda x: x >= 1, "mass-underflow": lambda x: 0 <= x < 1,
          "ratio": lambda x: x >= 1}
    for item in items:
        m = re.match(r"^\s*([a-z-]+)\s*(?:[>:]\s*(.*?))?\s*$", str(item))
        word, bound = (m.group(1), m.group(2) or "") if m else ("", "")
        if word in FAIL_ON_WORDS and not bound:
            out.append((word, None))
            continue
        if word in FAIL_ON_BOUNDS and bound:
            try:
                x = float(bound)
            except ValueError:
                x = float("nan")
            if math.isfinite(x) and ok[word](x):
                out.append((word, x))
                continue
        raise ValueError(f"--fail-on={item!r} is not allowed; allowed: {allowed}")
    return out


def _small_integer(s: float) -> bool:
    return float(s).is_integer() and 2 <= s <= 16


def offset_warnings(mine, policies, scale_given: bool) -> list[str]:
    """Warnings for a scale that looks like a log2 offset (FA3 writes its S = 2^8 as an offset of 8):
    exp2_offset with a small integer S, or a small integer ``--scale`` next to an exp2_offset policy."""
    def both(who, s, fix):
        return (f"{who} reads S = {s:g} (log2 S = {math.log2(s):.3g}); if {s:g} is the kernel's log2 offset (FA3's "
                f"Max_offset = 8), S = 2^{s:g} = {2.0 ** s:g}: {fix}")

    lines = []
    cli_fix = f"pass --exp2-offset {mine.scale:g} or --scale {2.0 ** mine.scale:g}"
    if scale_given and _small_integer(mine.scale):
        near = [p.name for p in policies if p.scale_mode == "exp2_offset"]
        if mine.scale_mode == "exp2_offset":
            lines.append(both("--scale with --scale-mode exp2_offset", mine.scale, cli_fix))
        elif near:
            lines.append(both(f"--scale next to exp2_offset policies ({', '.join(near)})", mine.scale, cli_fix))
    for p in policies:
        if p.scale_mode == "exp2_offset" and _small_integer(p.scale):
            lines.append(both(f"policy {p.name!r} (scale_mode exp2_offset, scale {p.scale:g})", p.scale,
                              f"set its scale to {2.0 ** p.scale:g}"))
    return lines
