"""Files the library opens for the caller (a SQLite store, the SDK's spool): their folder.

A path pasted from an example (``var/sagas.sqlite3``) into a fresh project names a folder
that does not exist yet; sqlite3 then says only "unable to open database file". The
folder is made instead, and a path that cannot be a file is refused naming it and what
to do.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..vocabulary.errors import StoreError

__all__ = ["ensure_file_folder"]


def ensure_file_folder(path: str | Path, what: str, option: str, example: str) -> None:
    """Make ``path``'s folder if missing, or raise ``StoreError`` saying what is wrong.

    ``what`` names the file for the message ("the sagaboard spool"), ``option`` the
    argument that gave it (``spool=``), ``example`` a file name to suggest inside a
    folder given by mistake. SQLite's own names (``:memory:``, ``file:`` URIs) are left
    to SQLite.
    """
    text = str(path)
    if text == ":memory:" or text.startswith("file:") or text == "":
        return
    path = Path(path)
    if path.is_dir():
        raise StoreError(
            f"{what} {text!r} is a folder: give a file path inside it, "
            f"such as {option}{str(path / example)!r}"
        )
    folder = path.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise StoreError(
            f"cannot create the folder {str(folder)!r} for {what} {text!r}: "
            f"{err.strerror or err}; create it, or pass another path ({option}) in a folder "
            "this process may write"
        ) from err
    if not os.access(folder, os.W_OK | os.X_OK):
        raise StoreError(
            f"cannot write in the folder {str(folder)!r} of {what} {text!r}: permission "
            f"denied; make it writable, or pass another path ({option}) in a folder this "
            "process may write"
        )
