"""Standard Kafka clients against Sluice, unmodified: confluent-kafka and kcat.

    python -m examples.plain_clients [--bootstrap-server HOST:PORT]
"""

import shutil
import subprocess

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from examples._support import broker_from_args

with broker_from_args(__doc__) as bootstrap:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("greetings", num_partitions=2, replication_factor=1)])["greetings"].result(10)

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i in range(10):
        producer.produce("greetings", key=f"k{i}", value=f"hello {i}", headers={"lang": b"en"})
    producer.flush(10)

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "greeters",
                         "auto.offset.reset": "earliest"})
    consumer.subscribe(["greetings"])
    received = []
    for _ in range(100):  # bounded: at most 100 polls
        message = consumer.poll(0.5)
        if message is not None and not message.error():
            received.append(message.value().decode())
        if len(received) == 10:
            break
    consumer.close()  # commits the group's offsets and leaves the group
    print(f"confluent-kafka consumer in group 'greeters' got {len(received)} messages")

    kcat = shutil.which("kcat")
    if kcat is None:
        print("kcat is not installed (apt-get install kcat); skipping its part")
    else:
        subprocess.run([kcat, "-b", bootstrap, "-P", "-t", "greetings", "-p", "0", "-K:"],
                       input="kk:from kcat\n", text=True, check=True, timeout=30)
        listing = subprocess.run([kcat, "-b", bootstrap, "-L", "-t", "greetings"],
                                 capture_output=True, text=True, check=True, timeout=30).stdout
        print(listing.strip().splitlines()[-3:])
        consumed = subprocess.run([kcat, "-b", bootstrap, "-C", "-t", "greetings", "-e", "-q",
                                   "-f", "%p %o %k=%s\\n"], capture_output=True, text=True,
                                  check=True, timeout=30).stdout
        print(f"kcat read {len(consumed.splitlines())} messages back, e.g. {consumed.splitlines()[-1]!r}")
