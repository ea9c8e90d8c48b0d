"""The figures each reliability scenario records: one line each, collected for the report."""

import threading
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class Figure:
    scenario: str
    tried: int
    survived: int
    lost: int
    duplicated: int
    goal: str
    met: bool
    in_doubt: int | None = None
    note: str = ""

    def line(self) -> str:
        doubt = "" if self.in_doubt is None else f" in_doubt={self.in_doubt}"
        return (
            f"RELIABILITY {self.scenario}: tried={self.tried} survived={self.survived} "
            f"lost={self.lost} duplicated={self.duplicated}{doubt} goal_met={self.met}"
        )


class _Figures:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._figures: dict[str, Figure] = {}
        # Each reliability test's wall time, for the report's total.
        self.seconds: dict[str, float] = {}

    def record(self, figure: Figure) -> Figure:
        print(figure.line())
        with self._lock:
            self._figures[figure.scenario] = figure
        return figure

    def all(self) -> list[Figure]:
        with self._lock:
            return list(self._figures.values())

    def payload(self) -> dict[str, Any]:
        """What a pytest-xdist worker hands its controller (plain data: it crosses processes)."""
        return {"figures": [asdict(f) for f in self.all()], "seconds": dict(self.seconds)}

    def merge(self, payload: dict[str, Any]) -> None:
        """The controller of a parallel run takes in one worker's figures."""
        with self._lock:
            for fields in payload.get("figures", []):
                figure = Figure(**fields)
                self._figures[figure.scenario] = figure
            self.seconds.update(payload.get("seconds", {}))


FIGURES = _Figures()


def record(
    scenario: str,
    *,
    tried: int,
    survived: int,
    lost: int,
    duplicated: int,
    goal: str,
    met: bool,
    in_doubt: int | None = None,
    note: str = "",
) -> Figure:
    """Print the scenario's one figure line and keep it for the session's table."""
    return FIGURES.record(Figure(scenario, tried, survived, lost, duplicated, goal, met, in_doubt, note))
