"""Shared set-up of the emulator tests: one torch thread for every test here, as every pipeline job
runs (the emulator's matmuls are small, and on a shared 2-core machine torch's thread pool spins)."""

import pytest


@pytest.fixture(autouse=True)
def _one_thread_here(one_thread):
    """tests/conftest.py's one_thread for every test of this folder."""
    yield
