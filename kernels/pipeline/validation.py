"""Reading config.yaml as the workflow does: both schemas, the preset merged, then the checks.

:func:`load_config` is what ``workflow/rules/common.smk`` runs before any job, and what the tests
run on hundreds of bad configs without starting Snakemake. Every refusal is one
:class:`~pcast.pipeline.config.ConfigError` whose message starts ``Invalid configuration`` and
names the config key and what is allowed.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from pcast.pipeline.config import ConfigError, check_config, resolve_preset, schema_message

__all__ = ["SCHEMA_DIR", "CONFIG_SCHEMA", "CLAIMS_SCHEMA", "validate_config", "load_config", "typed_overrides"]

SCHEMA_DIR = Path(__file__).resolve().parents[2] / "workflow" / "schemas"
CONFIG_SCHEMA = "config.schema.yaml"
CLAIMS_SCHEMA = "claims.schema.yaml"


def validate_config(cfg: dict, stage: str, schema: str = CONFIG_SCHEMA, schema_dir: Path = SCHEMA_DIR) -> None:
    """``snakemake.utils.validate`` (which also fills the schema's defaults into ``cfg``), with a
    message that names the key.

    Raises:
        ConfigError: ``Invalid configuration (<stage>): config key '...' ...; allowed: ...``.
    """
    from snakemake.exceptions import WorkflowError  # lazy: snakemake is not part of the slim install
    from snakemake.utils import validate  # lazy: snakemake is not part of the slim install

    try:
        validate(cfg, str(Path(schema_dir) / schema))
    except WorkflowError as e:
        err = e.__context__
        if err is None or not hasattr(err, "absolute_path"):
            raise
        raise ConfigError(f"Invalid configuration ({stage}): {schema_message(err, schema)}") from None


_BOOLS = {"true": True, "false": False}


def _scalar(text: str):
    """A nested ``--config`` value as YAML would read it: an int, a float (``1e-3`` too), true/false,
    null, or else the string itself."""
    for parse in (int, float):
        try:
            return parse(text)
        except ValueError:
            pass
    if text.lower() in _BOOLS:
        return _BOOLS[text.lower()]
    if text in ("null", "~"):
        return None
    return text


def _typed(value):
    if isinstance(value, Mapping):
        return {k: _typed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_typed(v) for v in value]
    return _scalar(value) if isinstance(value, str) else value


def typed_overrides(overrides: Mapping) -> dict:
    """``--config`` values with their nested scalars typed.

    Snakemake reads a top-level ``key=value`` as an int, float or bool where it can, but a nested
    value (``'experiments={"collapse": {"sink_v_scale": [0.0, 0.5]}}'``) through YAML's base loader,
    which keeps every scalar a string. This reads those strings as numbers, booleans and nulls,
    as config.yaml's own YAML would; top-level values are left as Snakemake typed them.
    """
    return {k: (_typed(v) if isinstance(v, (Mapping, list)) else v) for k, v in overrides.items()}


def _overlay(base: dict, top: Mapping) -> None:
    for k, v in top.items():
        if isinstance(v, Mapping) and isinstance(base.get(k), dict):
            _overlay(base[k], v)
        else:
            base[k] = v


def load_config(cfg: dict, overrides: Mapping | None = None, schema_dir: Path = SCHEMA_DIR) -> dict:
    """Validate ``cfg`` (config.yaml with the command line's ``--configfile`` and ``--config``
    merged in, as Snakemake hands it over), merge its preset under ``overrides`` (the ``--config``
    values, which beat the preset), validate the result against both schemas, then
    :func:`~pcast.pipeline.config.check_config`. Returns the merged config; ``cfg`` gains the
    schemas' defaults, as under Snakemake.

    Raises:
        ConfigError: the first refusal, naming the key and what is allowed.
    """
    if overrides:
        overrides = typed_overrides(overrides)
        _overlay(cfg, overrides)  # cfg holds the same values, merged in by Snakemake as strings
    validate_config(cfg, "config.yaml with command-line overrides", CONFIG_SCHEMA, schema_dir)
    try:
        merged = resolve_preset(cfg, overrides)
    except ConfigError as e:
        raise ConfigError(f"Invalid configuration: {e}") from None
    stage = f"after merging preset {merged.get('preset')!r}"
    validate_config(merged, stage, CONFIG_SCHEMA, schema_dir)
    validate_config(merged, stage, CLAIMS_SCHEMA, schema_dir)
    try:
        check_config(merged)
    except ConfigError as e:
        raise ConfigError(f"Invalid configuration (preset {merged.get('preset')!r}): {e}") from None
    return merged
