"""The triggers function: an S3 object or a `RunRequested` event from the queue starts a run."""
