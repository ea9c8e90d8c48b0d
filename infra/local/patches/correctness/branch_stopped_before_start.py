"""A Parallel branch stopped before its thread began ends quietly, as a stopped branch does.

moto: each branch of a Parallel state runs in a thread of its own, which starts the branch's
program by setting its first state. When another branch fails (or the execution stops) before
that thread got to run, the branch is already stopped, and setting its first state raises
`RuntimeError: Could not set NextState value when in state ProgramStopped`: the thread dies with
a traceback on the process's stderr, and never says it ended.

Why it matters: the run's limit (`RunWithin`: the loop beside a timer branch) stops the timer
branch whenever the loop ends first, often before the timer's thread starts. `toolpipe serve`
printed a moto traceback for such a run.

The patch: the branch's thread, when its program raises because its branch is already stopped,
ends as a stopped branch ends (`on_terminated`), without the traceback. Any other error is
raised as before.
"""

from moto.stepfunctions.parser.asl.component.state.exec.state_parallel.branch_worker import BranchWorker
from moto.stepfunctions.parser.asl.eval.program_state import ProgramStopped

CHECKED_WITH = ("5.2.5",)


def _thread_routine(self: BranchWorker) -> None:
    try:
        self._program.eval(self.env)
    except RuntimeError:
        if not isinstance(self.env.program_state(), ProgramStopped):
            raise
    self._branch_worker_comm.on_terminated(env=self.env)


def install() -> None:
    BranchWorker._thread_routine = _thread_routine  # type: ignore[method-assign]
