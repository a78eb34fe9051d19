"""Pure billing rules: no I/O, no clock of their own (every function takes ``now``)."""

from __future__ import annotations
