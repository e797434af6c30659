"""The case of the exponent's fused multiply-add (:mod:`pcast.probes.cases_exp`): its rows rebuilt by the loop
oracle (which forms the fma from the exact rational value, sharing no code with the emulator), and its verdict."""

import pytest
import torch

from pcast.probes import cases_exp as ce
from pcast.probes.cases import CASES

from loop_contract import loop_attention

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def test_the_loop_oracle_gives_the_case_outputs():
    """Both forms of the fixture's first 128 one-hot rows, bit for bit: the fma moves most outputs off 1, the
    rounded form none."""
    q, k, v, _ = ce.fixture_inputs()
    q = q[:, :, :128]
    kw = dict(scale_mode="exp2_offset", fmt="bf16", sm_scale=1.0, block_n=ce.FMA_FIXTURE["keys"])
    rows = ce.one_hot_rows()
    for arg in ("fma", "rounded"):
        out, _ = loop_attention(q, k, v, exp_arg=arg, **kw)
        assert torch.equal(out[0, 0, :, 0].double(), rows[arg][:128]), arg
    assert (rows["fma"] != 1).float().mean() > 0.5 and (rows["rounded"] == 1).all()


def test_the_case_passes():
    assert ce.FMA_EXPONENT in CASES
    status = [m.evaluate()[1] for m in ce.FMA_EXPONENT.measurements]
    assert status == ["PASS"] * 3 + ["INCONCLUSIVE"] * 2
