"""The server's Prometheus metrics, in a registry of its own (``GET /metrics``, text format):
requests by route and status, the queue depth, batch sizes and latencies."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)


class Metrics:
    """The metrics of one server (a registry per server: two servers in one process, as tests run
    them, never share counters)."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("capjudge_requests", "HTTP requests answered, by route and status code", ["route", "status"], registry=self.registry)
        self.samples = Counter("capjudge_samples", "samples and pairs judged, by route and record status", ["route", "status"], registry=self.registry)
        self.queue_depth = Gauge("capjudge_queue_depth", "samples and pairs waiting for the judge", registry=self.registry)
        self.in_flight = Gauge("capjudge_in_flight_requests", "judging requests received and not yet answered", registry=self.registry)
        self.batch_size = Histogram("capjudge_batch_size", "samples or pairs handed to the judge together", buckets=BATCH_BUCKETS, registry=self.registry)
        self.batch_seconds = Histogram("capjudge_batch_seconds", "seconds the judge took for one batch", buckets=LATENCY_BUCKETS, registry=self.registry)
        self.latency = Histogram("capjudge_request_seconds", "seconds from a request's arrival to its answer, by route", ["route"], buckets=LATENCY_BUCKETS, registry=self.registry)
        self.queue_wait = Histogram("capjudge_queue_wait_seconds", "seconds a request waited before its batch started", buckets=LATENCY_BUCKETS, registry=self.registry)

    def text(self) -> bytes:
        """The metrics in Prometheus' text exposition format."""
        return generate_latest(self.registry)


__all__ = ["Metrics"]
