"""ZooKeeper, as a ZooKeeper-mode Kafka cluster uses it: Kafka's znode layout and JSON
(`layout`, without I/O) and a broker's session with its conditional reads and writes
(`store`). Below everything that keeps cluster state in ZooKeeper: the replica manager,
the controller, ACLs, SCRAM credentials and client quotas."""
