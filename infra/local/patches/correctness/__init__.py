"""Patches of moto where it behaves unlike AWS in a way a run notices: one module per fix."""

from toolpipe.infra.local.patches.correctness import (
    answers_skip_unstarted,
    branch_stopped_before_start,
    error_keeps_the_stop,
    heartbeat_before_clock,
    history_limit,
    history_pages,
    no_thread_list,
    stop_before_start,
    stop_ends_at_once,
    stop_interrupts_waits,
    stop_keeps_its_reason,
    timestamp_waits,
)

PATCHES = (
    heartbeat_before_clock,
    stop_before_start,
    answers_skip_unstarted,
    stop_interrupts_waits,
    stop_ends_at_once,
    stop_keeps_its_reason,
    error_keeps_the_stop,
    no_thread_list,
    history_limit,
    history_pages,
    branch_stopped_before_start,
    timestamp_waits,
)
