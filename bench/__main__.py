"""`python -m bench [--quick]`: every benchmark, each side by side with its baseline."""

import sys

from bench import (broker, cluster, codec, compaction, connections, coordinators, durability, group_protocols,
                   metrics, reassignment, security, spark_latency, spark_write)

quick = "--quick" in sys.argv[1:]
codec.main(["--seconds", "0.5" if quick else "2"])
print()
spark_write.main(["--quick"] if quick else [])  # the sink against confluent-kafka, and reads
print()
spark_latency.main(["--quick"] if quick else [])  # pipelines record by record against Spark's Kafka connector
print()
broker.main(["--quick"] if quick else [])
print()
durability.main(["--quick"] if quick else [])
print()
cluster.main(["--quick"] if quick else [])  # 3 brokers under ZooKeeper vs one
print()
reassignment.main(["--quick"] if quick else [])  # moving partitions, throttled or not, and retiring a broker
print()
coordinators.main(["--quick"] if quick else [])  # groups and transactions in the cluster
print()
group_protocols.main(["--quick"] if quick else [])  # rebalance time: KIP-848 against the classic protocol
print()
connections.main([])  # RSS per idle connection
print()
security.main(["--quick"] if quick else [])  # SSL and SASL_SSL against PLAINTEXT
print()
metrics.main(["--quick"] if quick else [])  # the /metrics scrape, and what counting costs a request
print()
compaction.main(["--quick"] if quick else [])  # the log cleaner: throughput, produce latency, coordinator load
