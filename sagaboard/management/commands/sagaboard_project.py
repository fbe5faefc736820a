"""manage.py sagaboard_project create|list: projects are the tenants of sagas and tokens."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.core.validators import validate_slug
from django.db import IntegrityError

from sagaboard.models import AuditEntry, Project


class Command(BaseCommand):
    help = "Create or list projects (each saga, token and policy belongs to one project)."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        create = sub.add_parser("create", help="create a project")
        create.add_argument("slug", help="short id used in URLs and commands, e.g. 'shop'")
        create.add_argument("--name", help="display name (default: the slug)")
        sub.add_parser("list", help="list projects")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["action"] == "list":
            for project in Project.objects.order_by("slug"):
                self.stdout.write(f"{project.slug}\t{project.name}")
            return
        slug = options["slug"]
        try:
            validate_slug(slug)
        except Exception as err:
            raise CommandError(f"slug {slug!r}: letters, digits, '-' and '_' only") from err
        try:
            project = Project.objects.create(slug=slug, name=options["name"] or slug)
        except IntegrityError as err:
            raise CommandError(f"project {slug!r} already exists") from err
        AuditEntry.objects.create(
            project=project, actor="cli", action="project.create", target=f"project:{slug}"
        )
        self.stdout.write(self.style.SUCCESS(f"created project {slug!r}"))
