"""A real scrape of GET /metrics, read with prometheus_client's own parser."""

from __future__ import annotations

from django.test import Client, override_settings
from prometheus_client.parser import text_string_to_metric_families

TOKEN = "metrics-test-token-0123456789"


class Scrape:
    """Every sample of one scrape, by name and labels."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.families = list(text_string_to_metric_families(text))
        self.samples = {
            (sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in self.families
            for sample in family.samples
        }

    def value(self, name: str, **labels: str) -> float:
        """The sample's value; 0 when the scrape has none (a counter never moved)."""
        return self.samples.get((name, tuple(sorted(labels.items()))), 0.0)

    def total(self, name: str) -> float:
        """The sum over every label set of `name`."""
        return sum(value for (sample, _), value in self.samples.items() if sample == name)

    def series(self) -> set[str]:
        """Every series name a query may use: each family's samples' names, declared or seen."""
        names = set()
        for family in self.families:
            names.update(sample.name for sample in family.samples)
            suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count")}
            names.update(family.name + suffix for suffix in suffixes.get(family.type, ("",)))
        return names


def scrape() -> Scrape:
    """GET /metrics with the metrics token, as Prometheus sends it."""
    with override_settings(AIMON_METRICS_TOKEN=TOKEN):
        response = Client().get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain; version=")
    return Scrape(response.content.decode())


def moved(before: Scrape, after: Scrape, name: str, **labels: str) -> float:
    return after.value(name, **labels) - before.value(name, **labels)
