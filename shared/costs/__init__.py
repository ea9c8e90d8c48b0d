"""What a run cost: the operations it made, counted as they are made (`meter.py`, `invocation.py`),
priced by a table the stack owner may override (`prices.py`), into an estimate (`estimate.py`).

Nothing is imported here: a function's cold start pays only for the modules it uses (the tool
worker meters, it never prices).
"""
