"""Fitting and validating the offline ranker on labelled runs, out of sample (cross-validation,
leave-one-dataset-out). Offline only: needs numpy (the dev extra); the model it writes is a data file
the package reads with the standard library (``otel_blame/attribution/ranker_model.json``)."""
