"""The embedded default's own files (under ``var/``), made when a process first needs them.

Importing the settings writes nothing: a fresh checkout, a read-only image or a
``manage.py check --deploy`` on a build machine leaves the disk as it was. The
generated secret key is made on its first use (the settings hold a lazy value), and
the folders (the SQLite database's, the static files', the filesystem broker's) when
the app starts (``SagaboardConfig.ready``), before any connection or task needs them.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Any

__all__ = ["local_secret_key", "prepare_folders"]


def local_secret_key(var_dir: Path) -> str:
    """A random key made once for this checkout (``var/secret-key``, readable by its owner only).

    For one host; several hosts must share SAGABOARD_SECRET_KEY, or their sessions and
    signed values would not be understood by each other.
    """
    path = var_dir / "secret-key"
    if not path.exists():
        var_dir.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:  # another process made it first: read theirs
            pass
        else:
            with os.fdopen(fd, "w") as out:
                out.write(secrets.token_urlsafe(50))
    return path.read_text().strip()


def _sqlite_files(settings: Any) -> list[Path]:
    database = settings.DATABASES["default"]
    if database["ENGINE"] != "django.db.backends.sqlite3":
        return []
    names = [database.get("NAME"), (database.get("TEST") or {}).get("NAME")]
    return [Path(str(name)) for name in names if name and str(name) != ":memory:"]


def prepare_folders(settings: Any) -> None:
    """Create the folders the settings point at and nothing else creates: the SQLite
    files' (SQLite makes a file, not its folder), STATIC_ROOT (whitenoise looks there
    first) and the filesystem broker's (kombu expects them)."""
    folders = [path.parent for path in _sqlite_files(settings)]
    folders.append(Path(settings.STATIC_ROOT))
    if settings.CELERY_BROKER_URL == "filesystem://":
        options = settings.CELERY_BROKER_TRANSPORT_OPTIONS
        folders += [Path(options[key]) for key in ("data_folder_in", "data_folder_out",
                                                    "control_folder")]  # fmt: skip
    for folder in folders:
        folder.mkdir(parents=True, exist_ok=True)
