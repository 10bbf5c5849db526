"""Notification writes: channels (services.channels) and deliveries (services.delivery)."""

from __future__ import annotations

from aimon_admin.notifications.services.channels import (
    channel_add,
    channel_remove,
    new_webhook_secret,
    preference_set,
    webhook_create,
    webhook_rotate,
    webhook_secret_problem,
)
from aimon_admin.notifications.services.delivery import (
    Sweep,
    channel_test,
    checkpoint_fan_out,
    checkpoint_owe,
    deliveries_sweep,
    deliveries_take,
    delivery_send,
    digest_send,
    fanout_owe,
    leases_end,
    request_fan_out,
)
from aimon_admin.notifications.services.errors import ChannelError

__all__ = [
    "ChannelError",
    "Sweep",
    "channel_add",
    "channel_remove",
    "channel_test",
    "checkpoint_fan_out",
    "checkpoint_owe",
    "deliveries_sweep",
    "deliveries_take",
    "delivery_send",
    "digest_send",
    "fanout_owe",
    "leases_end",
    "new_webhook_secret",
    "preference_set",
    "request_fan_out",
    "webhook_create",
    "webhook_rotate",
    "webhook_secret_problem",
]
