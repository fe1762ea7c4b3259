"""The one interface the stages of the chain share, as the Collector links its components with
``consumer.Traces``: each stage consumes one kind of item and hands what it makes to the next
stage's ``consume``.

    receivers -> Ingest (log) -> AssemblyStage -> AnalysisStage -> EnrichExportStage -> OTLPExporter
                 ArrivedGroups    BufferedTrace      Analysed         ExportItem    (what each consumes)

``consume`` never blocks on a later stage's work: a stage that needs time (analysis) queues the
item and returns. Which object consumes what is decided in one place, the wiring in
:mod:`otel_blame.processor.pipeline`.
"""

from __future__ import annotations

from typing import Protocol, TypeVar

Item = TypeVar("Item", contravariant=True)


class Consumer(Protocol[Item]):
    """A stage of the chain (or its end): takes an item and returns at once."""

    def consume(self, item: Item) -> None: ...
