"""Fanout becomes the outbox: a row owed until `fanned_out_at`, with the lease of the task
the sweep queued for it. Rows written before were made by their fan-out: done. A request
still open owes its answer's message once it closes (the opening now writes that row).
What the sweep before this would still have found (a request opened or escalated while the
queue was down and still open, one closed in the last six hours without its answered
message) is owed now, so nothing is lost across the upgrade."""

import datetime as dt

from django.db import migrations, models
from django.db.models import Exists, F, OuterRef
from django.utils import timezone

# What the sweep before this looked back over for requests closed without their message.
ANSWERED_LOOKBACK = dt.timedelta(hours=6)


def _owe_what_was_missed(apps, schema_editor):  # type: ignore[no-untyped-def]
    Fanout = apps.get_model("notifications", "Fanout")
    ApprovalRequest = apps.get_model("approvals", "ApprovalRequest")
    Fanout.objects.update(fanned_out_at=F("created_at"))
    now = timezone.now()

    def made(event):  # type: ignore[no-untyped-def]
        return Exists(Fanout.objects.filter(request=OuterRef("pk"), event=event))

    pending = ApprovalRequest.objects.filter(status="PENDING", expires_at__gt=now)
    owed = [
        *((pk, "REQUESTED") for pk in pending.exclude(made("REQUESTED")).values_list("pk", flat=True)),
        *(
            (pk, "ANSWERED")
            for pk in ApprovalRequest.objects.filter(status="PENDING")
            .exclude(made("ANSWERED"))
            .values_list("pk", flat=True)
        ),
        *(
            (pk, "ESCALATED")
            for pk in pending.filter(escalated_at__isnull=False)
            .exclude(made("ESCALATED"))
            .values_list("pk", flat=True)
        ),
        *(
            (pk, "ANSWERED")
            for pk in ApprovalRequest.objects.exclude(status="PENDING")
            .filter(
                Exists(
                    Fanout.objects.filter(
                        request=OuterRef("pk"), event="REQUESTED", created_at__gte=now - ANSWERED_LOOKBACK
                    )
                )
            )
            .exclude(made("ANSWERED"))
            .values_list("pk", flat=True)
        ),
    ]
    Fanout.objects.bulk_create(
        [Fanout(request_id=pk, event=event) for pk, event in owed], ignore_conflicts=True, batch_size=1000
    )


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0015_grant_approvers"),
        ("notifications", "0001_initial"),
    ]

    operations = [
        migrations.RemoveIndex(model_name="fanout", name="fanout_event_created"),
        migrations.AddField(
            model_name="fanout", name="fanned_out_at", field=models.DateTimeField(blank=True, null=True)
        ),
        migrations.AddField(
            model_name="fanout", name="lease_until", field=models.DateTimeField(blank=True, null=True)
        ),
        migrations.RunPython(_owe_what_was_missed, migrations.RunPython.noop),
        migrations.AddIndex(
            model_name="fanout",
            index=models.Index(
                condition=models.Q(("fanned_out_at__isnull", True)), fields=["id"], name="fanout_owed"
            ),
        ),
    ]
