"""Unit tests of `infra/cli/`."""
