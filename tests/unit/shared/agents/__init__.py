"""Unit tests of `shared/agents/`."""
