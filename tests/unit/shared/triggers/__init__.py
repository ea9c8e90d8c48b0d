"""Unit tests of `shared/triggers/`."""
