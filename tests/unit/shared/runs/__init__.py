"""Unit tests of `shared/runs/`."""
