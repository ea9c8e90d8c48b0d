"""The tool runner function: the tool code itself, invoked by the worker, with none of the run's keys."""
