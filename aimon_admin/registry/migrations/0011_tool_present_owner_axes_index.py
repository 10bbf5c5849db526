"""An index of the present tools by owner (runtime or server) and axes: the home's forecast of
tools that would fail unattended counts them per owner and combination of axes, and with every
column it reads in this small index (on PostgreSQL an index-only scan) it never reads the
tools' wide rows (their claims, schemas and explanations)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("registry", "0010_tool_awaiting_review_index"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="tool",
            index=models.Index(
                condition=models.Q(("present", True)),
                fields=[
                    "runtime",
                    "server",
                    "side_effect_level",
                    "destructive_behavior",
                    "idempotency_behavior",
                ],
                name="tool_present_owner_axes",
            ),
        ),
    ]
