"""Number formats and rounding: FP8 (E4M3, E5M2 and their fnuz variants), FP4 with microscaling.

* :mod:`.fp8`: the formats as parameters (:class:`FP8Format`, :data:`FORMATS`), torch-free;
* :mod:`.rounding`: bit-exact rounding of float32 onto an FP8 grid, in torch;
* :mod:`.microscaling`: NVFP4 and MXFP4 (E2M1 elements, one scale per group);
* :mod:`.quantize`: :func:`pcast.quantize`, one entry point for every format above.

May import: nothing else in ``pcast``. Importing this package stays torch-free.
"""

from pcast.formats.fp8 import FORMATS, HALF_FORMATS, FP8Format, format_names, get_format, get_p_format

__all__ = ["FP8Format", "FORMATS", "HALF_FORMATS", "get_format", "get_p_format", "format_names"]
