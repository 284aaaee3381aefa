"""The one exception type users see: a single line that says what is wrong and what to do."""


class LongctxError(Exception):
    """Bad input or setup. The message names the file/item/field and the fix."""


class DataError(LongctxError):
    """A dataset file that does not match the schema."""
