from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.templatetags.static import static
from django.urls import path
from django.views.generic import RedirectView

from sagaboard.access.pages import token_pages
from sagaboard.actions.pages import decide_pages, queue_pages, stop_pages
from sagaboard.approvals.pages import policy_pages
from sagaboard.batches.pages import batch_pages
from sagaboard.collab.pages import inbox_pages, note_pages, saved_view_pages
from sagaboard.config.api import api
from sagaboard.health.pages import health_pages, probes
from sagaboard.sagas.pages import export_pages, pages, payload_pages, permalink_pages

handler404 = "sagaboard.ui.not_found.page_not_found"
handler500 = "sagaboard.ui.unavailable.server_error"

urlpatterns = [
    # First: agents call the API far more often than people open pages, and Django tries
    # the patterns in order (no page's pattern matches under api/).
    path("api/v1/", api.urls),
    path("", pages.saga_list, name="saga_list"),
    path("overview/", pages.overview, name="overview"),
    path("views/", saved_view_pages.saved_view_save, name="saved_view_save"),
    path("views/<int:pk>/delete/", saved_view_pages.saved_view_delete, name="saved_view_delete"),
    path("healthz", probes.healthz, name="healthz"),
    path("metrics", probes.metrics, name="metrics"),
    path("tokens/", token_pages.token_list, name="token_list"),
    path("approvals/", queue_pages.approval_queue, name="approval_queue"),
    path("approvals/<int:pk>/", permalink_pages.approval_permalink, name="approval_permalink"),
    path("approvals/<int:pk>/decide/", queue_pages.approval_decide, name="approval_decide"),
    path("approvals/bulk/", queue_pages.approvals_bulk, name="approvals_bulk"),
    path("decide/<str:token>/", decide_pages.decision_link, name="decision_link"),
    path("slack/interactions", decide_pages.slack_interactions, name="slack_interactions"),
    path("attention/", queue_pages.attention, name="attention"),
    path("inbox/", inbox_pages.inbox, name="inbox"),
    path("inbox/badges/", inbox_pages.badges, name="inbox_badges"),
    path("steps/<int:pk>/action/", queue_pages.step_action, name="step_action"),
    path("steps/bulk/", queue_pages.steps_bulk, name="steps_bulk"),
    path("steps/<int:pk>/acknowledge/", queue_pages.step_acknowledge, name="step_acknowledge"),
    path("steps/<int:pk>/outcome/", queue_pages.step_outcome, name="step_outcome"),
    path("batch/", batch_pages.batch_list, name="batch_list"),
    path("batch/new/", batch_pages.batch_new, name="batch_new"),
    path("batch/<int:pk>/", batch_pages.batch_detail, name="batch_detail"),
    path("batch/<int:pk>/progress/", batch_pages.batch_progress, name="batch_progress"),
    path("batch/<int:pk>/cancel/", batch_pages.batch_cancel, name="batch_cancel"),
    path("notes/saga/<int:saga_pk>/", note_pages.note_add, name="note_add"),
    path("sagas/<int:saga_pk>/notes/", note_pages.saga_notes, name="saga_notes"),
    path("notes/<int:pk>/edit/", note_pages.note_edit, name="note_edit"),
    path("notes/<int:pk>/delete/", note_pages.note_delete, name="note_delete"),
    path("owners/saga/<int:saga_pk>/", note_pages.saga_assign, name="saga_assign"),
    path(
        "sagas/<int:saga_pk>/rollback-request/",
        stop_pages.saga_rollback_request,
        name="saga_rollback_request",
    ),
    path("policies/", policy_pages.policy_list, name="policy_list"),
    path("policies/<int:pk>/", policy_pages.policy_edit, name="policy_edit"),
    path("audit/", policy_pages.audit, name="audit"),
    path("tools/", health_pages.tool_list, name="tool_list"),
    path("tools/<path:tool_name>/", health_pages.tool_detail, name="tool_detail"),
    path("sagas/export.csv", export_pages.export_csv, name="saga_export_csv"),
    path("sagas/export.jsonl", export_pages.export_jsonl, name="saga_export_jsonl"),
    path("tokens/<str:prefix>/revoke/", token_pages.token_revoke, name="token_revoke"),
    # <path:>: an agent's saga id may hold "/" (ids are the agent's choice); <str:> made every
    # page linking to such a saga fail to render (NoReverseMatch), for every user.
    path("sagas/<slug:project>/<path:saga_id>/", pages.saga_detail, name="saga_detail"),
    # A step's raw JSON (its id, not a database key; ids may hold "/": the view tries each split).
    path(
        "sagas/<slug:project>/<path:saga_id>/steps/<path:step_id>/<str:part>.json",
        payload_pages.step_payload,
        name="step_payload",
    ),
    path(
        "sagas/<slug:project>/<path:saga_id>/steps/<path:step_id>/payloads.html",
        payload_pages.step_trees,
        name="step_trees",
    ),
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    # Pages without an icon link (the admin's) make browsers ask for this: no 404 in their console.
    path(
        "favicon.ico",
        RedirectView.as_view(url=static("sagaboard/favicon.svg")),
        name="favicon",
    ),
    path("admin/", admin.site.urls),
]
