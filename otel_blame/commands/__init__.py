"""The command line's commands, one module each; ``otel_blame.cli`` registers them lazily.

This is the top layer: a command may import the processor, the UI, the store, inject and bench,
none of which imports it back. Each module imports what it needs inside its command, so
``otel-blame attribute`` starts without loading what it does not use (an LLM client, gRPC,
the web stack).
"""
