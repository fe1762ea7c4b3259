"""``otel-blame inject``: fault-injection campaigns that measure attribution on your own app."""
