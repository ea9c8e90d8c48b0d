"""The figures each reliability scenario records: one line each, collected for the report."""

import threading
from dataclasses import dataclass


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

    def record(self, figure: Figure) -> Figure:
        print(figure.line())
        with self._lock:
            self._figures[figure.scenario] = figure
        return figure

    def all(self) -> list[Figure]:
        with self._lock:
            return list(self._figures.values())


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
