"""The Sluice broker: a Kafka-compatible broker on asyncio with a durable segmented log."""
