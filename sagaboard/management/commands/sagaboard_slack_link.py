"""manage.py sagaboard_slack_link <slack_user_id> <username>: who a Slack user is in sagaboard."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from sagaboard.models import AuditEntry, SlackIdentity


class Command(BaseCommand):
    help = (
        "Link a Slack user (the U... id from their Slack profile: 'Copy member ID') to a "
        "sagaboard user, so their Approve/Reject clicks in Slack decide as that user (who "
        "must still have the approver role in the approval's project). Relinking moves it."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("slack_user_id", help="the Slack member id, e.g. U012ABCDEF")
        parser.add_argument("username", nargs="?", help="the sagaboard username")
        parser.add_argument(
            "--remove", action="store_true", help="unlink the Slack user (no username needed)"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        slack_id = options["slack_user_id"].strip()
        if options["remove"]:
            gone, _ = SlackIdentity.objects.filter(slack_user_id=slack_id).delete()
            self._audit("slack.unlink", slack_id, "")
            self.stdout.write(f"unlinked {slack_id}" if gone else f"{slack_id} was not linked")
            return
        if not options["username"]:
            raise CommandError("give the sagaboard username to link to (or --remove)")
        user = get_user_model().objects.filter(username=options["username"]).first()
        if user is None:
            raise CommandError(f"no sagaboard user {options['username']!r}")
        with transaction.atomic():
            SlackIdentity.objects.filter(user=user).exclude(slack_user_id=slack_id).delete()
            SlackIdentity.objects.update_or_create(slack_user_id=slack_id, defaults={"user": user})
            self._audit("slack.link", slack_id, user.get_username())
        self.stdout.write(self.style.SUCCESS(f"linked Slack user {slack_id} to {user.username}"))

    def _audit(self, action: str, slack_id: str, username: str) -> None:
        AuditEntry.objects.create(
            actor="cli", action=action, target=f"slack:{slack_id}",
            data={"username": username} if username else {},
        )  # fmt: skip
