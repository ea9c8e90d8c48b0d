"""Unit tests of `infra/`."""
