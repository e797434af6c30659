"""Rewrite the preset lists of the docs (pcast.policies.lists.DOC_FILES) from pcast.policies.POLICIES."""

import sys
from pathlib import Path

from pcast.policies.lists import DOC_FILES, render

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    for rel in DOC_FILES:
        path = ROOT / rel
        text = path.read_text(encoding="utf-8")
        new = render(text)
        if new != text:
            path.write_text(new, encoding="utf-8")
            print(f"{rel}: preset list rewritten")
    return 0


if __name__ == "__main__":
    sys.exit(main())
