"""The tool list pages through tools in (name, id) order (keyset pagination): this index
lets it read one page in order instead of sorting every tool for each page."""

from __future__ import annotations

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("registry", "0001_initial"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="tool",
            index=models.Index(fields=["name", "id"], name="tool_name_id"),
        ),
    ]
