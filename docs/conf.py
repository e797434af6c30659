"""Sphinx configuration: the user guide (Markdown, through MyST) and the API reference (autodoc).

Build: ``python -m sphinx -W -n -b html docs docs/_build/html`` (see docs/contributing.md).
Warnings are errors and cross-references are checked (nitpicky): a renamed function that a
docstring or a page still names fails the build. Names outside this project (torch, numpy, ...)
are not checked, since the build has no network for intersphinx.
"""

import os
import sys

from sphinx.ext.napoleon.docstring import GoogleDocstring

sys.path.insert(0, os.path.abspath(".."))

project = "pcast-fp8"
author = "the pcast-fp8 project"
copyright = "the pcast-fp8 project"

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.mathjax",
]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build"]

myst_heading_anchors = 3
myst_enable_extensions = ["dollarmath"]

autodoc_default_options = {"members": True, "undoc-members": True, "show-inheritance": False}
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_preserve_defaults = True
napoleon_google_docstring = True
napoleon_numpy_docstring = True
napoleon_use_ivar = True

# Napoleon reads an attribute's docstring "text: more text" as "type: description"; this package's
# attribute and constant docstrings are plain sentences, so they are kept whole.
GoogleDocstring._parse_attribute_docstring = lambda self: self._format_field("", "", self._consume_to_end())

nitpicky = True
# Names outside this package cannot be resolved without intersphinx; ours all must be.
nitpick_ignore_regex = [
    # Private helpers (a leading underscore) are named in docstrings but are not part of the reference.
    (r"py:.*", r"(.*\.)?_[A-Za-z][\w.]*"),
    # Module constants without a doc comment are not in the reference (autodoc lists only documented
    # data), so a reference to one is not checked.
    (r"py:data", r"([\w.]*\.)?[A-Z][A-Z0-9_]*"),
    (r"py:.*", r"(torch|numpy|np|pandas|pd|scipy|matplotlib|triton|tl|safetensors|snakemake|"
               r"transformers|collections|typing|os|pathlib|logging|argparse|json|csv|io|re|"
               r"dataclasses|concurrent|multiprocessing|contextlib|enum|abc|fractions)(\..*)?"),
    (r"py:class", r"(int|float|str|bool|dict|list|tuple|set|bytes|object|None|callable|Callable|"
                  r"Iterable|Iterator|Sequence|Mapping|Any|Path|PathLike|DataFrame|Tensor|"
                  r"optional|array-like|Literal\[.*\])"),
]

html_theme = "alabaster"
html_title = "pcast-fp8"
