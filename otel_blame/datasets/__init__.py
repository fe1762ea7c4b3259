"""Benchmark data sets of real failures, read as Trajectories with their labels kept apart, so that no
method can see them: Who&When (a decisive agent and step), TRAIL (errors marked on spans) and AEGIS
(faulty agents and their failure modes). ``otel-blame eval`` scores methods on them
(:mod:`otel_blame.evaluation`); the offline ranker is fitted on them (:mod:`otel_blame.training`)."""
