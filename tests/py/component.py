"""The component binding the test suites use: the Python host package's own
(`hosts/python/src/proclease/_binding.py`, public wasmtime-py API only), which conftest.py puts
on the path. See that module for how values cross the boundary."""

from proclease._binding import *  # noqa: F401,F403
from proclease._binding import _is_tagged, engine, interface_name, result_shape  # noqa: F401
