"""Unit tests of `infra/cdk/`."""
