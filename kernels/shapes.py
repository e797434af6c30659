"""The shapes the kernel supports, shared by the API, the generator and the config checks.

Torch-free, so the pipeline can check a config before anything heavy is imported.
"""

HEAD_DIMS = (16, 32, 64, 128, 256)  # head dimension d: a power of two from 16 to 256
BLOCK_SIZES = (16, 32, 64, 128, 256)  # block_m, block_n: powers of two (tl.arange, tl.dot >= 16)


def is_allowed(value, allowed) -> bool:
    """True when ``value`` is an int (not a bool, not a float) in ``allowed``."""
    return isinstance(value, int) and not isinstance(value, bool) and value in allowed
