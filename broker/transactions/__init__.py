"""Transactions: the coordinator (`coordinator`) and its log, `__transaction_state` (`txn_log`)."""
