"""A partial index of the tools awaiting review: the home counts them and the tools page's
"awaiting review" filter pages through them in name order, neither reading every tool. It
holds only the few flagged rows, so it is small and quick to build."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("registry", "0009_plain_word_labels"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="tool",
            index=models.Index(
                condition=models.Q(("awaiting_review", True)),
                fields=["name", "id"],
                name="tool_awaiting_review",
            ),
        ),
    ]
