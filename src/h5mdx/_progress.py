"""The one progress bar of h5mdx: rich, else tqdm, else nothing.

Used by convert, rechunk, the worked example and the ``h5mdx bench`` grid. (dask
computations show dask's or distributed's own bars: see
:func:`h5mdx.parallel.schedulers.compute`.)
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["Bar", "progress_bar"]


class Bar:
    """A running bar: ``bar(n)`` or ``bar.advance(n)`` moves it, ``bar.describe(text)``
    changes its label. Does nothing when the bar is off."""

    def __init__(self, advance: Callable[[int], Any] | None = None,
                 describe: Callable[[str], Any] | None = None) -> None:
        self._advance = advance
        self._describe = describe

    def advance(self, n: int = 1) -> None:
        """Move the bar by ``n``."""
        if self._advance is not None:
            self._advance(n)

    __call__ = advance

    def describe(self, text: str) -> None:
        """Change the label."""
        if self._describe is not None:
            self._describe(text)


@contextlib.contextmanager
def progress_bar(total: int | None, description: str, enabled: bool = True, *,
                 unit: str | None = "frames", elapsed: bool = False,
                 stderr: bool = False) -> Iterator[Bar]:
    """A progress bar (rich, else tqdm, else nothing); yields a :class:`Bar`.

    Parameters
    ----------
    total : int or None
        Steps to go (None: unknown).
    description : str
        The label.
    enabled : bool, optional
        False gives a bar that shows nothing.
    unit : str or None, optional
        What a step is, shown after the count (None: nothing).
    elapsed : bool, optional
        Show the time elapsed instead of the time remaining.
    stderr : bool, optional
        Draw on stderr (default stdout).
    """
    if not enabled:
        yield Bar()
        return
    try:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )
    except ImportError:
        try:
            from tqdm import tqdm
        except ImportError:
            yield Bar()
            return
        with tqdm(total=total, desc=description, unit=(unit or "it").rstrip("s")) as bar:
            yield Bar(bar.update, bar.set_description)
        return
    columns: list[Any] = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn()]
    if unit:
        columns.append(TextColumn(unit))
    columns.append(TimeElapsedColumn() if elapsed else TimeRemainingColumn())
    kwargs: dict[str, Any] = {"console": Console(stderr=True)} if stderr else {}
    with Progress(*columns, transient=False, **kwargs) as prog:
        task = prog.add_task(description, total=total)
        yield Bar(lambda n: prog.advance(task, n),
                  lambda text: prog.update(task, description=text))
