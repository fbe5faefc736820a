"""The event log keeps what each engine event changed (``Event.change``), for replay."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("sagaboard", "0008_server_clock")]

    operations = [
        migrations.AddField(
            model_name="event",
            name="change",
            field=models.TextField(blank=True, null=True),
        ),
    ]
