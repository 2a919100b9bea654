"""Security: who is on a connection (listeners, TLS, SASL) and what they may do (ACLs)."""
