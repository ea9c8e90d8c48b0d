"""The orchestrator function: the state machine's model step, a run's start, its ending."""
