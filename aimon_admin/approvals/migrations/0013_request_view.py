# The request page's "viewed": who first opened a request's page, and when.

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0012_request_escalated_at"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="RequestView",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("viewed_at", models.DateTimeField()),
                (
                    "request",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="views",
                        to="approvals.approvalrequest",
                    ),
                ),
                (
                    "viewer",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={
                "ordering": ["request", "viewed_at", "id"],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("request", "viewer"),
                        name="request_view_once_per_person",
                        violation_error_message="This person's first view of this request is already recorded.",
                    )
                ],
            },
        ),
    ]
