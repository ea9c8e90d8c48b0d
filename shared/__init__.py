"""Domain code every toolpipe handler uses. Never imports `functions` or `infra`."""
