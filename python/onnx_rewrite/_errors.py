"""The errors the library reports, as Python exceptions (the extension raises these).

``str(error)`` is the line ``onnx-rewrite`` prints after ``onnx-rewrite: error: `` — the file, a
colon and the message for an :class:`InputError`, the message alone for a :class:`UsageError` —
with control characters written as ``\\xNN``, as the CLI writes them.
"""

from typing import Optional, Tuple, Type


def _printable(text: str) -> str:
    # As onnx_rewrite::printable (include/onnx_rewrite/error.h): control bytes as \xNN.
    return "".join("\\x%02x" % ord(c) if ord(c) < 0x20 or ord(c) == 0x7F else c for c in text)


class Error(Exception):
    """Base of the errors the library reports (catch this for all of them).

    Attributes:
        message: what is wrong, as the CLI words it (without the file).
        file: the file the error is about (a model, a rule file, a data file, the output), or
            ``None`` for a usage error, which is about no file.
        exit_code: the code ``onnx-rewrite`` exits with for this error (3: bad input, 2: usage).
    """

    exit_code: int = 3

    def __init__(self, message: str, file: Optional[str] = None) -> None:
        self.message = message
        self.file = file
        super().__init__(message, file)

    def __str__(self) -> str:
        if self.file is None:
            return _printable(self.message)
        return f"{_printable(self.file)}: {_printable(self.message)}"

    def __reduce__(self) -> Tuple[Type["Error"], Tuple[str, Optional[str]]]:  # picklable, for multiprocessing
        return (type(self), (self.message, self.file))


class InputError(Error):
    """An input can't be read or is invalid: the model (missing, not ONNX, a graph a runtime
    would refuse), its external data, a rule file (``file`` is then ``path:line:col``), a target
    file; or an output can't be written. The CLI exits 3 with it.
    """

    exit_code = 3
    file: str


class UsageError(Error):
    """The call asks for something impossible: an unknown target or rule id, an output whose
    directory does not exist or that would replace the input. The CLI exits 2 with it.
    """

    exit_code = 2
