"""Unit tests of `infra/local/`."""
