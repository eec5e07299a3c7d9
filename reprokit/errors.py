"""Errors meant for people: one sentence and a way out, never a traceback."""


class UserError(Exception):
    """Bad input or a missing prerequisite, found before any run starts.

    The CLI prints the message and exits with status 2.
    """
