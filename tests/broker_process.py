"""Tests run the real broker through sluice/broker_process.py's `BrokerProcess` (the
launcher `sluice cluster` shares); this name stays for the many tests that import it here."""

from sluice.broker_process import BrokerProcess

__all__ = ["BrokerProcess"]
