"""The preset lists the docs show, made from :data:`pcast.policies.POLICIES` (so a new preset is one entry there).

:func:`preset_list` is the text between ``<!-- presets -->`` and ``<!-- /presets -->`` in each file of
:data:`DOC_FILES`; ``python tools/preset_docs.py`` rewrites those blocks and a test checks them.
"""

from __future__ import annotations

import re
from pathlib import Path

from pcast.policies import POLICIES

__all__ = ["preset_list", "DOC_FILES", "BEGIN", "END", "render", "stale"]

DOC_FILES = ("docs/interfaces.md", "docs/instrument.md", "docs/audit.md")
BEGIN, END = "<!-- presets -->", "<!-- /presets -->"
_PAPER = re.compile(r"^(forward|reverse)-s(1|256)$")


def preset_list(policies=None) -> str:
    """``fa3``, ``fa4``, ... in three groups: single-pass deployed kernels, decode presets, the paper's four."""
    pols = POLICIES if policies is None else policies
    names = list(pols)
    decode = [n for n in names if pols[n].num_splits > 1]
    paper = [n for n in names if _PAPER.match(n)]
    single = [n for n in names if n not in decode and n not in paper]

    def q(group):
        return ", ".join(f"`{n}`" for n in group)

    return (f"{q(single)}; the decode presets {q(decode)} (docs/decode.md); and the paper's {q(paper)} "
            f"({len(names)} presets)")


def render(text: str, policies=None) -> str:
    """``text`` with every presets block replaced by :func:`preset_list`."""
    block = f"{BEGIN}{preset_list(policies)}{END}"
    return re.sub(re.escape(BEGIN) + r".*?" + re.escape(END), lambda _: block, text, flags=re.S)


def stale(root: Path, policies=None) -> list[str]:
    """The files of :data:`DOC_FILES` under ``root`` whose presets block is missing or out of date."""
    out = []
    for rel in DOC_FILES:
        text = (root / rel).read_text(encoding="utf-8")
        if BEGIN not in text or render(text, policies) != text:
            out.append(rel)
    return out
