"""docs/audit.md states the policy flags' allowed values and defaults in the parser's own words, and what it
states is what the parser does (a multiple of 16 such as 160 is taken for --block-n; 100 is refused)."""

import re
from pathlib import Path

import pytest

from pcast.audit.flags import flag, policy_fields
from pcast.cli.audit import _parser, settings

DOC = Path(__file__).resolve().parents[2] / "docs" / "audit.md"


def _table() -> dict:
    text = DOC.read_text(encoding="utf-8")
    start = text.index("| flag | values | default |")
    rows = {}
    for line in text[start:].splitlines()[2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        for name in re.findall(r"`(--[a-z0-9-]+)`", cells[0]):
            rows[name] = (cells[1], cells[2])
    return rows


def test_every_policy_flag_is_documented_as_the_parser_states_it():
    helps = {a.option_strings[0]: a.help for a in _parser()._actions if a.option_strings}
    table = _table()
    assert set(table) == {flag(f.name) for f in policy_fields()}
    for name, (values, default) in table.items():
        assert helps[name] == f"{values} (default: {default})", name


@pytest.mark.parametrize("block_n, ok", [("160", True), ("16", True), ("100", False), ("0", False)])
def test_block_n_takes_what_the_docs_say(block_n, ok):
    args = _parser().parse_args(["x.safetensors", "--block-n", block_n])
    if ok:
        assert settings(args).policy.block_n == int(block_n)
    else:
        with pytest.raises(ValueError, match="--block-n=.*allowed: a positive multiple of 16"):
            settings(args)
