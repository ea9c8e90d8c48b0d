"""The toolpipe stack's components, one construct each."""
