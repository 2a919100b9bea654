"""`sluice console`: a web console for any Kafka-compatible cluster, as AKHQ or Kafka UI.

    sluice console --bootstrap-server H:P [--port 8080] [--host 127.0.0.1]
                   [--command-config FILE] [--lag-interval-ms 5000] [--allow-offset-reset]

A process of its own, speaking only the Kafka protocol through `sluice_client` (of
`broker` it imports only the HTTP server it shares with the metrics endpoint,
`broker.http`), serving HTML pages and JSON: brokers and controller,
topics with their partitions, replicas, ISR, offsets and recent messages, consumer groups
with members, offsets, lag and a live lag chart. Read-only unless started with
--allow-offset-reset. See `sluice.console.app` for the routes.
"""

from sluice.console.command import main

__all__ = ["main"]
