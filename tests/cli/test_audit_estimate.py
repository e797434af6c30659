"""pcast-audit's estimate of a long run (:func:`pcast.audit.files.estimate`), from this machine's calibration:
the time is the calibration's costs per score times the plan's scores, and a short run gets none."""

import torch

from pcast.audit import files


def _layer(heads, n, d):
    """A layer of shapes only (expanded views: no memory)."""
    q = torch.empty(1, 1, 1, d).expand(1, heads, n, d)
    return ("layer", q, q, q)


CAL = {"c_q": 1e-9, "c_p": 2e-9, "c_s": 3e-9, "c_v": 4e-9, "c_refa": 5e-9, "d": 64}


def test_a_model_scale_layer_gets_the_calibrations_time(monkeypatch):
    monkeypatch.setattr(files, "load_calibration", lambda: CAL)  # (the module's own name: fails if it has none)
    runs = [("a", {"order": "forward", "scale": 1.0}), ("b", {"order": "forward", "scale": 256.0}),
            ("c", {"order": "reverse", "scale": 1.0})]
    scores = 32 * 4096 * 4096
    d = 128 / 64
    # two units (forward and reverse differ in more than S), three runs; with the per-head measures
    per = (CAL["c_q"] * d + 2 * CAL["c_p"] + 3 * (CAL["c_s"] + CAL["c_v"] * d) + CAL["c_refa"] * d
           + CAL["c_refa"] * d + 3 * CAL["c_s"])
    note = files.estimate([_layer(32, 4096, 128)], runs, measure=True)
    assert note == (f"estimate: about {scores * per:.0f} s on one thread for 1 layer(s) x 3 runs "
                    f"({scores:.3g} scores per run), from this machine's calibration")


def test_a_small_run_gets_no_estimate_and_no_calibration(monkeypatch):
    def refuse():
        raise AssertionError("a small run must not calibrate")

    monkeypatch.setattr(files, "load_calibration", refuse)
    assert files.estimate([_layer(2, 256, 64)], [("a", {"order": "forward"})], measure=False) is None


def test_an_estimate_under_the_floor_is_left_out(monkeypatch):
    monkeypatch.setattr(files, "load_calibration", lambda: {k: 1e-15 for k in CAL} | {"d": 64})
    assert files.estimate([_layer(32, 4096, 128)], [("a", {"order": "forward"})], measure=False) is None
