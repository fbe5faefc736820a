"""Who acts: the people who sign in, typed once for every feature.

sagaboard uses Django's own user model (``settings.AUTH_USER_MODEL`` is not swapped):
a service's ``user`` is a signed-in ``User``; a read that a page may run before anyone
signs in (or for a socket whose session ended) takes a ``Viewer``, which may be anonymous.
"""

from django.contrib.auth.models import AnonymousUser
from django.contrib.auth.models import User as AuthUser

type User = AuthUser
"""A signed-in person: the user model (who approves, operates, writes notes)."""

type Viewer = AuthUser | AnonymousUser
"""``request.user`` as a page sees it: anonymous until someone signs in."""
