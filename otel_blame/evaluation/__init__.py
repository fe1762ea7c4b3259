"""Scoring attribution methods on labelled data sets: what ``otel-blame eval`` runs. Standard library
and pydantic only (no numpy): the fitting code lives apart, in :mod:`otel_blame.training`."""
