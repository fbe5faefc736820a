"""The settings: read from typed environment variables, and nothing written at import."""

from __future__ import annotations

import os
import runpy
import stat
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from django.core.exceptions import ImproperlyConfigured

from sagaboard.config.env import env_bool, env_float, env_int, env_list
from sagaboard.config.local_files import local_secret_key, prepare_folders
from tests.support.live_server import ROOT

SETTINGS_FILE = str(Path(ROOT) / "sagaboard" / "config" / "settings.py")


def test_importing_the_settings_writes_no_file_or_folder(tmp_path: Path) -> None:
    var = tmp_path / "var"
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    env = {key: value for key, value in os.environ.items()
           if key not in ("SAGABOARD_SECRET_KEY", "DATABASE_URL", "CELERY_BROKER_URL", "REDIS_URL",
                          "SAGABOARD_TEST_SQLITE")}  # fmt: skip
    env |= {"SAGABOARD_VAR_DIR": str(var), "PYTHONPATH": str(ROOT),
            "DJANGO_SETTINGS_MODULE": "sagaboard.config.settings"}  # fmt: skip
    code = (
        "import sagaboard.config.settings as s; from django.conf import settings; "
        "assert settings.CELERY_BROKER_URL == 'filesystem://'; "
        "assert str(s.VAR_DIR) in settings.DATABASES['default']['NAME']"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert not var.exists()
    assert list(cwd.iterdir()) == []


def test_the_generated_secret_key_is_made_once_on_first_use_for_its_owner_only(
    tmp_path: Path,
) -> None:
    var = tmp_path / "var"
    key = local_secret_key(var)
    assert len(key) >= 32 and local_secret_key(var) == key
    assert stat.S_IMODE((var / "secret-key").stat().st_mode) == 0o600


def test_the_app_start_makes_the_embedded_defaults_folders(tmp_path: Path) -> None:
    settings = SimpleNamespace(
        DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3",
                               "NAME": str(tmp_path / "db" / "a.sqlite3"),
                               "TEST": {"NAME": str(tmp_path / "test" / "t.sqlite3")}}},
        STATIC_ROOT=tmp_path / "static",
        CELERY_BROKER_URL="filesystem://",
        CELERY_BROKER_TRANSPORT_OPTIONS={"data_folder_in": str(tmp_path / "q"),
                                         "data_folder_out": str(tmp_path / "q"),
                                         "control_folder": str(tmp_path / "c")},
    )  # fmt: skip
    prepare_folders(settings)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c", "db", "q", "static", "test"]
    assert list((tmp_path / "db").iterdir()) == []  # the folder only: SQLite makes the file


# Each variable the settings read as a number, a flag or a choice, with a value it refuses.
BAD_VALUES = [
    ("SAGABOARD_API_MAX_BODY", "abc", "a whole number"),
    ("SAGABOARD_API_MAX_BODY", "0", "1 or more"),
    ("SAGABOARD_API_MAX_BATCH", "1.5", "a whole number"),
    ("SAGABOARD_MAX_JSON_DEPTH", "deep", "a whole number"),
    ("SAGABOARD_MAX_VALUE_SIZE", "-1", "1 or more"),
    ("SAGABOARD_MAX_STEPS", "many", "a whole number"),
    ("SAGABOARD_RETENTION_DAYS", "x", "a whole number"),
    ("SAGABOARD_RETENTION_DAYS", "-3", "0 or more"),
    ("SAGABOARD_HSTS_SECONDS", "a year", "a whole number"),
    ("SAGABOARD_LIVE_POLL_SECONDS", "fast", "a number of seconds"),
    ("SAGABOARD_LIVE_RECHECK_SECONDS", "nan", "a number of seconds"),
    ("SAGABOARD_UNDO_TIMEOUT_SECONDS", "0", "a number of seconds"),
    ("SAGABOARD_WORKER_LEASE_SECONDS", "inf", "a number of seconds"),
    ("SAGABOARD_CLOCK_SKEW", "soon", "a number of seconds"),
    ("SAGABOARD_DEBUG", "maybe", "1 or 0"),
    ("SAGABOARD_HTTPS", "ture", "1 or 0"),
    ("SAGABOARD_HSTS_SUBDOMAINS", "2", "1 or 0"),
    ("SAGABOARD_HSTS_PRELOAD", "y", "1 or 0"),
    ("SAGABOARD_DB_POOL", "sure", "1 or 0"),
    ("SAGABOARD_ALLOW_COMMAND_UNDOS", "please", "1 or 0"),
    ("SAGABOARD_TASKS_EAGER", "eager", "1 or 0"),
    ("SAGABOARD_LOG_FORMAT", "xml", "one of json, text"),
    ("SAGABOARD_LOG_LEVEL", "LOUD", "one of DEBUG"),
]


@pytest.mark.parametrize(("name", "value", "reason"), BAD_VALUES)
def test_a_bad_environment_value_stops_the_start_naming_the_variable(
    name: str, value: str, reason: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SAGABOARD_SECRET_KEY", "k" * 40)  # nothing read from var/
    monkeypatch.setenv(name, value)
    with pytest.raises(ImproperlyConfigured) as refused:
        runpy.run_path(SETTINGS_FILE)  # the settings' code again, in a namespace of its own
    message = str(refused.value)
    assert message.startswith(f"{name} must be ") and reason in message and repr(value) in message


def test_a_bad_value_in_a_real_start_is_an_error_naming_the_variable() -> None:
    env = {**os.environ, "SAGABOARD_RETENTION_DAYS": "x"}
    done = subprocess.run([sys.executable, "manage.py", "check"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode != 0
    assert "ImproperlyConfigured: SAGABOARD_RETENTION_DAYS must be a whole number" in done.stderr


def test_unset_or_empty_variables_take_their_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SAGABOARD_T_EMPTY", "  ")
    monkeypatch.delenv("SAGABOARD_T_UNSET", raising=False)
    for name in ("SAGABOARD_T_EMPTY", "SAGABOARD_T_UNSET"):
        assert env_int(name, 7, minimum=1) == 7
        assert env_float(name, 0.5) == 0.5
        assert env_bool(name, True) is True
        assert env_list(name, "a, b,,") == ["a", "b"]


SPELLINGS = [
    ("1", True),
    ("Yes", True),
    (" on ", True),
    ("0", False),
    ("FALSE", False),
    ("off", False),
]


@pytest.mark.parametrize(("raw", "expected"), SPELLINGS)
def test_flags_read_the_usual_spellings(
    raw: str, expected: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SAGABOARD_T_FLAG", raw)
    assert env_bool("SAGABOARD_T_FLAG", not expected) is expected


@pytest.mark.parametrize(
    ("debug", "expected"), [("0", []), ("1", ["sagaboard.demo.compensations"])]
)
def test_the_demos_undos_are_registered_only_with_debug_on(
    debug: str, expected: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SAGABOARD_SECRET_KEY", "k" * 40)
    monkeypatch.setenv("SAGABOARD_DEBUG", debug)
    monkeypatch.delenv("SAGABOARD_COMPENSATION_MODULES", raising=False)
    assert runpy.run_path(SETTINGS_FILE)["SAGABOARD_COMPENSATION_MODULES"] == expected
    monkeypatch.setenv("SAGABOARD_COMPENSATION_MODULES", "shop.undos, more.undos")
    listed = runpy.run_path(SETTINGS_FILE)["SAGABOARD_COMPENSATION_MODULES"]
    assert listed == ["shop.undos", "more.undos"]
