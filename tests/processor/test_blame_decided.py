"""``blame.decided`` on the spans (issue 27 item 3): the root and the culprit span say whether the
evidence decided the verdict, added beside the other ``blame.*`` attributes (none renamed); a file
written before it existed reads as decided."""

from __future__ import annotations

import pytest

from otel_blame import semconv as sc
from otel_blame.attribution.result import Attribution
from otel_blame.conventions import attributes_to_dict, sdk_spans_to_proto, trajectory_from_spans
from otel_blame.loaders import recorded_blame
from otel_blame.processor.enricher import BlameEnricher

from .spans import record_agent_run

STEPS = [("Planner", "Plan: multiply."), ("Researcher", "Six times seven is 41."), ("Solver", "41.")]


@pytest.mark.parametrize("decided", [True, False])
def test_root_and_culprit_span_carry_blame_decided(decided: bool) -> None:
    resource_spans = sdk_spans_to_proto(record_agent_run(STEPS, failed=True))
    trajectory = trajectory_from_spans(resource_spans)
    attribution = Attribution(
        agent="Researcher", step=1, confidence=0.6, decided=decided, reason="r", method="ranker"
    )
    BlameEnricher().enrich(resource_spans, trajectory, attribution)
    spans = [span for rs in resource_spans for ss in rs.scope_spans for span in ss.spans]
    root = attributes_to_dict(next(s for s in spans if not s.parent_span_id).attributes)
    culprit = attributes_to_dict(
        next(s for s in spans if s.span_id.hex() == trajectory.steps[1].span_id).attributes
    )
    for where in (root, culprit):
        assert where[sc.BLAME_DECIDED] is decided
        assert (where[sc.BLAME_AGENT], where[sc.BLAME_STEP]) == ("Researcher", 1)  # beside, not instead
    assert culprit[sc.BLAME_CULPRIT] is True  # an undecided verdict still marks its top pick's span
    others = [
        attributes_to_dict(s.attributes) for s in spans if s.span_id.hex() != trajectory.steps[1].span_id
    ]
    assert all(sc.BLAME_DECIDED not in a for a in others if sc.BLAME_AGENT not in a)
    # read back from the file (otel-blame attribute on an exported trace)
    assert recorded_blame(resource_spans, trajectory)[0].decided is decided
    for resource in resource_spans:  # a trace enriched before blame.decided existed
        for scope in resource.scope_spans:
            for span in scope.spans:
                kept = [kv for kv in span.attributes if kv.key != sc.BLAME_DECIDED]
                del span.attributes[:]
                span.attributes.extend(kept)
    assert recorded_blame(resource_spans, trajectory)[0].decided is True
