"""Unit tests of `functions/api/`."""
