"""manage.py sagaboard_demo_agent: the demo's checkout agent, posting to sagaboard over HTTP."""

from __future__ import annotations

import logging
import signal
import threading
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connections

from sagaboard.demo.agent import PREFIX, Agent, TokenRefused
from sagaboard.demo.flows import demo_agent_token

TOKEN_FILE = "demo-agent.token"
SPOOL_FILE = "demo-agent.spool"


class Command(BaseCommand):
    help = (
        "Run the demo agent (sagaboard/demo/agent.py): checkout sagas in the demo project, a "
        "step every few seconds, posted through the Python SDK to the sagaboard at --url "
        "(waited for until it answers). Stop one from its page and the agent runs its own "
        "undos. Its token is kept in var/ (SAGABOARD_VAR_DIR) for the next start. "
        "SIGTERM or Ctrl-C rolls back the checkout under way and exits; so does a token the "
        "server refuses (revoked), saying so. `make run` starts it. Refused when DEBUG is off "
        "unless --force."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--url", default="http://127.0.0.1:8000", help="sagaboard's URL")
        parser.add_argument(
            "--think-seconds", type=float, default=4.0, help="the wait before each tool call"
        )
        parser.add_argument(
            "--pause-seconds", type=float, default=8.0, help="the wait between two checkouts"
        )
        parser.add_argument("--sagas", type=int, default=None, help="stop after N checkouts")
        parser.add_argument(
            "--hold-seconds", type=float, default=None,
            help="how long a checkout whose calls are done stays open, waiting for the "
            "carrier, before it completes (default: until someone stops it, so there is "
            "always one running checkout to stop and the list does not fill up)",
        )  # fmt: skip
        parser.add_argument(
            "--force", action="store_true", help="run even when SAGABOARD_DEBUG is off"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if not settings.DEBUG and not options["force"]:
            raise CommandError("the demo agent is for local use: DEBUG is off (use --force)")
        var = Path(settings.VAR_DIR)
        try:
            token = demo_agent_token(var / TOKEN_FILE)
        except LookupError as err:
            raise CommandError(str(err)) from None
        connections.close_all()  # the agent talks HTTP only from here on
        # Each poll is an HTTP request: httpx's INFO line for each buried what the agent did
        # (the lines after "demo agent:") in make run's terminal.
        logging.getLogger("httpx").setLevel(logging.WARNING)
        stop = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            if signal.getsignal(sig) is not signal.SIG_IGN:  # make's background jobs ignore ^C
                signal.signal(sig, lambda *_: stop.set())
        agent = Agent(
            options["url"].rstrip("/"), token, think_seconds=options["think_seconds"],
            pause_seconds=options["pause_seconds"], sagas=options["sagas"], stop=stop,
            hold_seconds=options["hold_seconds"],
            spool=var / SPOOL_FILE, say=self._say,
        )  # fmt: skip
        try:
            agent.run()
        except TokenRefused as err:  # revoked meanwhile: after the checkout's undos, one line
            raise CommandError(str(err)) from None

    def _say(self, text: str) -> None:
        self.stdout.write(f"{PREFIX} {text}")
        self.stdout.flush()
