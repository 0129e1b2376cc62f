"""Sends log records to a node over OTLP/gRPC with the OpenTelemetry Python SDK's own exporter
(gzip, the tenant in the `x-scope-orgid` metadata), and fails unless every export succeeded.

Usage: send_grpc.py HOST:PORT TENANT COUNT
"""

import logging
import sys

from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter
from opentelemetry.exporter.otlp.proto.grpc.exporter import Compression
from opentelemetry.sdk._logs import LoggerProvider, LoggingHandler
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor, LogRecordExportResult
from opentelemetry.sdk.resources import Resource


class CheckedExporter(OTLPLogExporter):
    """The SDK's exporter, keeping each export's result and size."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.results = []

    def export(self, batch):
        result = super().export(batch)
        self.results.append((result, len(batch)))
        return result


def main():
    endpoint, tenant, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    exporter = CheckedExporter(
        endpoint=endpoint,
        insecure=True,
        headers=(("x-scope-orgid", tenant),),
        compression=Compression.Gzip,
        timeout=30,
    )
    provider = LoggerProvider(resource=Resource.create({"service.name": "interop-grpc"}))
    provider.add_log_record_processor(
        BatchLogRecordProcessor(exporter, max_export_batch_size=7)
    )
    logger = logging.getLogger("interop-grpc")
    logger.propagate = False
    logger.setLevel(logging.INFO)
    logger.addHandler(LoggingHandler(level=logging.INFO, logger_provider=provider))
    for i in range(count):
        if i % 4 == 3:
            logger.warning("disk /dev/sd%s is %d%% full", "abc"[i % 3], 50 + i)
        else:
            logger.info("user %d logged in from 10.0.%d.%d", 1000 + i, i % 7, i % 250)
    provider.shutdown()
    sent = sum(n for _, n in exporter.results)
    failed = [r for r, _ in exporter.results if r != LogRecordExportResult.SUCCESS]
    print(f"send_grpc: {len(exporter.results)} exports of {sent} records, {len(failed)} failed")
    if failed or sent != count:
        sys.exit(1)


if __name__ == "__main__":
    main()
