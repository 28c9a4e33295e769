"""One error type for everything a user can get wrong; the CLI prints it as one line, exit 2."""


class UserError(ValueError):
    """Bad input or an unusable model/pair: the message is shown to the user as is."""
