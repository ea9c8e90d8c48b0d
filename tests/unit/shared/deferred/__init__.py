"""Unit tests of `shared/deferred/`."""
