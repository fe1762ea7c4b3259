"""The web UI: failures, runs, culprits and attributing a file, plus the JSON API they use.

Served by ``otel-blame ui`` (standalone, over a blame store) and by ``otel-blame serve`` on its
HTTP port. Needs the ``ui`` extra (Starlette, Jinja2, uvicorn, SQLAlchemy).
"""
