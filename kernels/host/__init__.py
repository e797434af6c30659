"""What the pipeline and the instrument both keep on this machine, below both of them: files written whole
(:mod:`pcast.host.files`) and this machine's measured emulator costs, the calibration of the time estimates
(:mod:`pcast.host.calibration`). Neither module imports torch at import time."""
