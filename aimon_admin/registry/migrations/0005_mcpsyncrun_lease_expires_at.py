# Written by hand (only this field): the sync run's worker lease.

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("registry", "0004_text_length_limits"),
    ]

    operations = [
        migrations.AddField(
            model_name="mcpsyncrun",
            name="lease_expires_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
    ]
