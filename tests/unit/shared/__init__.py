"""Unit tests of `shared/`."""
