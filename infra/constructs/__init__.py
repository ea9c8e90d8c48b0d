"""The stack's components, one construct each."""
