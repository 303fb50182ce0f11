"""The line between a user's mistake and ours.

A :class:`UserError` is bad input the user can fix: a config file and field, a damaged or foreign file of a run, a
missing command-line option. ``dppo-bench`` prints its message on one line and exits 2; any other exception is a
bug of ours and keeps its traceback (``dppo-bench --debug`` shows the traceback of a user error too).
"""

from __future__ import annotations


class UserError(ValueError):
    """Bad input, named in the message (the file and field, the option) so that the user can fix it."""


class UnknownNameError(UserError, KeyError):
    """A name the input gives that nothing defines (a hyperparameter profile, a mask rule, a verl loss mode)."""

    def __str__(self) -> str:  # the message, not KeyError's repr of it
        return str(self.args[0]) if self.args else ""
