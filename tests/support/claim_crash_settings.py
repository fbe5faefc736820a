"""sagaboard's settings for the claim-crash fault test: the worker also imports
``tests.support.claim_crash`` (the seam between claiming an approved undo and starting it).

Celery imports ``CELERY_IMPORTS`` once Django is set up, in the worker's main process
(the solo pool runs the undo there), so the seam is in place before any task runs.
"""

from sagaboard.config.settings import *  # noqa: F403
from sagaboard.config.settings import CELERY_IMPORTS

CELERY_IMPORTS = [*CELERY_IMPORTS, "tests.support.claim_crash"]
