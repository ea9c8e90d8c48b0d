"""Unit tests of `shared/model/`."""
