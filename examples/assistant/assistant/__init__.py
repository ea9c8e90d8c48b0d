"""toolpipe's example project: an assistant agent and its tools."""
