"""Error types shared by every entry point.

Every problem with user input is raised as :class:`InputError`, whose message is a
single line of the form ``FILE:LINE: problem`` (or ``FILE: problem`` when no line
applies).  The CLI turns it into exit code 2 without a traceback.
"""

from __future__ import annotations

from typing import Optional


class InputError(ValueError):
    """Bad user input: a file, a column, an option.

    Parameters
    ----------
    problem : str
        What is wrong, in a few words.
    path : str, optional
        The file the problem is in.
    line : int, optional
        1-based line number in ``path``.
    """

    def __init__(self, problem: str, path: Optional[str] = None, line: Optional[int] = None):
        self.problem = problem
        self.path = None if path is None else str(path)
        self.line = line
        where = ""
        if self.path is not None:
            where = self.path if line is None else f"{self.path}:{line}"
            where += ": "
        super().__init__(f"{where}{problem}")


class MissingDependencyError(ImportError):
    """An optional dependency (an extra) is needed for this call."""

    def __init__(self, package: str, extra: str, what: str):
        super().__init__(
            f"{what} needs the optional package '{package}'; install it with "
            f"`pip install 'speed-tig[{extra}]'`"
        )
