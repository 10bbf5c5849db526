from __future__ import annotations

from django.urls import path

from aimon_admin.notifications import views

app_name = "notifications"

urlpatterns = [
    path("", views.channels_view, name="channels"),
    path("channels/new/", views.channel_add_view, name="channel-add"),
    path("channels/<int:pk>/test/", views.channel_test_view, name="channel-test"),
    path("channels/<int:pk>/remove/", views.channel_remove_view, name="channel-remove"),
    path("preferences/", views.preferences_view, name="preferences"),
    path("deliveries/", views.my_deliveries_view, name="my-deliveries"),
    path("log/", views.delivery_log_view, name="log"),
    path("webhooks/", views.webhooks_view, name="webhooks"),
    path("webhooks/new/", views.webhook_create_view, name="webhook-create"),
    path("webhooks/<int:pk>/rotate/", views.webhook_rotate_view, name="webhook-rotate"),
    path("webhooks/<int:pk>/secret/", views.webhook_secret_view, name="webhook-secret"),
]
