"""manage.py sagaboard_token create|revoke|list: API tokens, the secret shown once."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from sagaboard.access.services.tokens import parse_prefix, token_create, token_revoke
from sagaboard.models import ApiToken, Project


class Command(BaseCommand):
    help = "Create, revoke or list API tokens. A new token's secret is printed once only."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        create = sub.add_parser("create", help="mint a token for a project")
        create.add_argument("project", help="project slug")
        create.add_argument("--label", default="", help="what uses the token, e.g. 'storebot'")
        revoke = sub.add_parser("revoke", help="revoke a token by its prefix (sgb_xxxxxxxx)")
        revoke.add_argument("prefix")
        revoke.add_argument("--reason", default="", help="recorded in the audit log")
        listing = sub.add_parser("list", help="list a project's tokens by prefix")
        listing.add_argument("project", help="project slug")

    def handle(self, *args: Any, **options: Any) -> None:
        action = options["action"]
        if action == "revoke":
            prefix = parse_prefix(options["prefix"])
            token = ApiToken.objects.filter(prefix=prefix).first()
            if token is None:
                raise CommandError(f"no token with prefix {prefix!r}")
            token_revoke(token=token, reason=options["reason"])
            self.stdout.write(self.style.SUCCESS(f"revoked sgb_{prefix}"))
            return
        project = Project.objects.filter(slug=options["project"]).first()
        if project is None:
            raise CommandError(f"no project {options['project']!r} (sagaboard_project list)")
        if action == "list":
            for t in project.tokens.order_by("created_at"):
                state = "revoked" if t.revoked_at else "active"
                self.stdout.write(f"sgb_{t.prefix}\t{state}\t{t.label}\t{t.created_at:%Y-%m-%d}")
            return
        minted = token_create(project=project, label=options["label"] or "token")
        self.stdout.write(minted.secret)
        self.stderr.write("Store this token now: it is not shown again.")
