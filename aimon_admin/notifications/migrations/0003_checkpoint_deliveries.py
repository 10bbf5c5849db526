"""Signed audit checkpoints (A4) sent to the webhooks that take them: a fan-out and a
delivery name a checkpoint instead of a request, once per checkpoint (and channel). No row
before this is about a checkpoint: no webhook could take them, so nothing is owed."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0015_grant_approvers"),
        ("audit", "0017_merkle_tree_and_checkpoints"),
        ("notifications", "0002_owed_fanouts"),
    ]

    operations = [
        migrations.RemoveConstraint(
            model_name="delivery",
            name="delivery_event_valid",
        ),
        migrations.RemoveConstraint(
            model_name="delivery",
            name="delivery_request_unless_test",
        ),
        migrations.RemoveConstraint(
            model_name="fanout",
            name="fanout_event_valid",
        ),
        migrations.AddField(
            model_name="delivery",
            name="checkpoint",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="+",
                to="audit.auditcheckpoint",
            ),
        ),
        migrations.AddField(
            model_name="fanout",
            name="checkpoint",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="+",
                to="audit.auditcheckpoint",
            ),
        ),
        migrations.AlterField(
            model_name="delivery",
            name="event",
            field=models.CharField(
                choices=[
                    ("REQUESTED", "Request opened"),
                    ("ANSWERED", "Request answered"),
                    ("ESCALATED", "Request escalated"),
                    ("TEST", "Test message"),
                    ("CHECKPOINT", "Audit checkpoint signed"),
                ],
                max_length=12,
            ),
        ),
        migrations.AlterField(
            model_name="fanout",
            name="event",
            field=models.CharField(
                choices=[
                    ("REQUESTED", "Request opened"),
                    ("ANSWERED", "Request answered"),
                    ("ESCALATED", "Request escalated"),
                    ("TEST", "Test message"),
                    ("CHECKPOINT", "Audit checkpoint signed"),
                ],
                max_length=12,
            ),
        ),
        migrations.AlterField(
            model_name="fanout",
            name="request",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="+",
                to="approvals.approvalrequest",
            ),
        ),
        migrations.AddConstraint(
            model_name="delivery",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("event__in", ["REQUESTED", "ANSWERED", "ESCALATED", "TEST", "CHECKPOINT"])
                ),
                name="delivery_event_valid",
                violation_error_message="Unknown event.",
            ),
        ),
        migrations.AddConstraint(
            model_name="delivery",
            constraint=models.UniqueConstraint(
                condition=models.Q(("checkpoint__isnull", False)),
                fields=("checkpoint", "channel", "event"),
                name="delivery_once_per_checkpoint_channel",
                violation_error_message="This channel already has this checkpoint.",
            ),
        ),
        migrations.AddConstraint(
            model_name="delivery",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    models.Q(
                        ("checkpoint__isnull", True),
                        ("request__isnull", False),
                        models.Q(("event__in", ["TEST", "CHECKPOINT"]), _negated=True),
                    ),
                    models.Q(
                        ("checkpoint__isnull", False), ("event", "CHECKPOINT"), ("request__isnull", True)
                    ),
                    models.Q(("checkpoint__isnull", True), ("event", "TEST"), ("request__isnull", True)),
                    _connector="OR",
                ),
                name="delivery_about_one_subject",
                violation_error_message="A message is about a request, or a signed checkpoint (its own event), or nothing (a test).",
            ),
        ),
        migrations.AddConstraint(
            model_name="fanout",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("event__in", ["REQUESTED", "ANSWERED", "ESCALATED", "TEST", "CHECKPOINT"])
                ),
                name="fanout_event_valid",
                violation_error_message="Unknown event.",
            ),
        ),
        migrations.AddConstraint(
            model_name="fanout",
            constraint=models.UniqueConstraint(
                condition=models.Q(("checkpoint__isnull", False)),
                fields=("checkpoint", "event"),
                name="fanout_once_per_checkpoint",
                violation_error_message="This checkpoint was already fanned out.",
            ),
        ),
        migrations.AddConstraint(
            model_name="fanout",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    models.Q(
                        ("checkpoint__isnull", True),
                        ("request__isnull", False),
                        models.Q(("event__in", ["TEST", "CHECKPOINT"]), _negated=True),
                    ),
                    models.Q(
                        ("checkpoint__isnull", False), ("event", "CHECKPOINT"), ("request__isnull", True)
                    ),
                    models.Q(("checkpoint__isnull", True), ("event", "TEST"), ("request__isnull", True)),
                    _connector="OR",
                ),
                name="fanout_about_one_subject",
                violation_error_message="A fan-out is about a request, or a checkpoint (its own event).",
            ),
        ),
    ]
