"""What a run cost: the operations it made, counted as they are made (`meter.py`, `invocation.py`),
priced by a table the stack owner may override (`prices.py`), into an estimate (`estimate.py`)."""

from toolpipe.shared.costs.estimate import CostReport, estimate
from toolpipe.shared.costs.operations import FunctionUse, Operations
from toolpipe.shared.costs.prices import PriceTable

__all__ = ["CostReport", "FunctionUse", "Operations", "PriceTable", "estimate"]
