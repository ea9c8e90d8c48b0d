"""Unit tests of `shared/tools/`."""
