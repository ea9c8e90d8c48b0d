"""Unit tests of `functions/`."""
