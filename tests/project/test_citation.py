"""Licence, citation and archive metadata: present, valid, and in agreement with pyproject.toml."""

import json
import re
import tomllib
from pathlib import Path

import jsonschema
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
# The Citation File Format's own JSON schema, version 1.2.0 (Draft 7), as the cffconvert package ships it.
CFF_SCHEMA = ROOT / "tests" / "support" / "schemas" / "citation-file-format-1.2.0.schema.json"


def _project():
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _cff():
    return yaml.safe_load((ROOT / "CITATION.cff").read_text())


def _validator():
    schema = json.loads(CFF_SCHEMA.read_text())
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def _dates_as_text(value):
    """YAML reads an unquoted date as a date object; CFF's schema wants the ISO text."""
    if isinstance(value, dict):
        return {k: _dates_as_text(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_dates_as_text(v) for v in value]
    return value.isoformat() if hasattr(value, "isoformat") else value


def test_citation_cff_validates_against_the_cff_1_2_schema():
    errors = sorted(_validator().iter_errors(_dates_as_text(_cff())), key=str)
    assert not errors, "\n".join(f"{list(e.absolute_path)}: {e.message}" for e in errors)


def test_the_schema_rejects_a_broken_citation():
    broken = {k: v for k, v in _dates_as_text(_cff()).items() if k != "authors"} | {"license": "not-a-licence"}
    messages = [e.message for e in _validator().iter_errors(broken)]
    assert any("authors" in m for m in messages) and len(messages) >= 2


def test_citation_names_the_artifact_and_the_paper():
    cff = _cff()
    assert cff["cff-version"] == "1.2.0" and cff["type"] == "software"
    assert cff["version"] == _project()["version"]
    paper = cff["preferred-citation"]
    assert "P-Cast Precision in FP8 Attention" in paper["title"]
    assert "2606.06521" in paper["url"] and any("2606.06521" in i["value"] for i in paper["identifiers"])


@pytest.mark.parametrize("source", ["pyproject", "cff", "zenodo"])
def test_licence_is_mit_everywhere(source):
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("MIT License") and "WITHOUT WARRANTY OF ANY KIND" in text
    licence = {"pyproject": lambda: _project()["license"]["text"], "cff": lambda: _cff()["license"],
               "zenodo": lambda: json.loads((ROOT / ".zenodo.json").read_text())["license"]}[source]()
    assert licence == "MIT"


def test_zenodo_metadata_agrees_with_the_citation():
    zen = json.loads((ROOT / ".zenodo.json").read_text())
    cff = _cff()
    assert zen["title"] == cff["title"] and zen["version"] == cff["version"] == _project()["version"]
    assert zen["upload_type"] == "software" and zen["creators"]
    assert [c["name"] for c in zen["creators"]] == [a["name"] for a in cff["authors"]]
    assert any("2606.06521" in r["identifier"] for r in zen["related_identifiers"])


def test_the_authors_are_honest_entities_not_placeholder_persons():
    """The artifact's author is the project as an entity (the LICENSE's copyright holder, Zenodo's creator); the
    paper's authors are pointed to, not made up. No person is named: no given or family names, and no name of
    the kind a template leaves behind."""
    cff = _cff()
    placeholders = re.compile(r"\b(doe|todo|tbd|your name|lastname|firstname|placeholder|anonymous|xxx)\b", re.I)
    for who in cff["authors"] + cff["preferred-citation"]["authors"]:
        assert set(who) == {"name"}, who  # an entity: no given-names / family-names invented
        assert not placeholders.search(who["name"]), who
    holder = re.search(r"Copyright \(c\) \d{4} (.+)", (ROOT / "LICENSE").read_text())[1].strip()
    assert [a["name"] for a in cff["authors"]] == [holder] == ["The pcast-fp8 project"]
    assert "arXiv:2606.06521" in cff["preferred-citation"]["authors"][0]["name"]
