"""Every attribute, span and event name otel-blame reads or writes, in one place.

The OpenTelemetry GenAI semantic conventions come first; then the names other
instrumentations emit that we accept when building a Trajectory; then the project's
own names; then the ``blame.*`` names the processor writes, which are a public interface.
"""

from __future__ import annotations

# --- OpenTelemetry GenAI semantic conventions -------------------------------------------
GEN_AI_OPERATION_NAME = "gen_ai.operation.name"
GEN_AI_AGENT_NAME = "gen_ai.agent.name"
GEN_AI_AGENT_ID = "gen_ai.agent.id"
GEN_AI_AGENT_DESCRIPTION = "gen_ai.agent.description"
GEN_AI_CONVERSATION_ID = "gen_ai.conversation.id"
GEN_AI_INPUT_MESSAGES = "gen_ai.input.messages"
GEN_AI_OUTPUT_MESSAGES = "gen_ai.output.messages"
GEN_AI_SYSTEM_INSTRUCTIONS = "gen_ai.system_instructions"
GEN_AI_TOOL_NAME = "gen_ai.tool.name"
GEN_AI_TOOL_CALL_ID = "gen_ai.tool.call.id"
GEN_AI_TOOL_CALL_ARGUMENTS = "gen_ai.tool.call.arguments"
GEN_AI_TOOL_CALL_RESULT = "gen_ai.tool.call.result"
GEN_AI_PROVIDER_NAME = "gen_ai.provider.name"
GEN_AI_SYSTEM = "gen_ai.system"  # older name of gen_ai.provider.name, still emitted by many
GEN_AI_REQUEST_MODEL = "gen_ai.request.model"
GEN_AI_RESPONSE_MODEL = "gen_ai.response.model"
GEN_AI_USAGE_INPUT_TOKENS = "gen_ai.usage.input_tokens"
GEN_AI_USAGE_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
GEN_AI_EVALUATION_SCORE_VALUE = "gen_ai.evaluation.score.value"
GEN_AI_EVALUATION_NAME = "gen_ai.evaluation.name"
GEN_AI_EVALUATION_SCORE_LABEL = "gen_ai.evaluation.score.label"
GEN_AI_EVALUATION_EXPLANATION = "gen_ai.evaluation.explanation"
GEN_AI_RESPONSE_ID = "gen_ai.response.id"
GEN_AI_WORKFLOW_NAME = "gen_ai.workflow.name"  # the workflow an invoke_workflow span runs (v1.41+)

# values of gen_ai.operation.name
OP_INVOKE_WORKFLOW = "invoke_workflow"
OP_INVOKE_AGENT = "invoke_agent"
OP_CREATE_AGENT = "create_agent"
OP_EXECUTE_TOOL = "execute_tool"
OP_CHAT = "chat"
OP_TEXT_COMPLETION = "text_completion"
OP_GENERATE_CONTENT = "generate_content"
OP_PLAN = "plan"  # an agent's planning phase (semantic-conventions-genai): it groups the planning model call
# a framework's entry point steering a turn across agents (semantic-conventions-genai, not yet released)
OP_HANDLE_CONVERSATION_TURN = "handle_conversation_turn"

# log records (events) that carry message content instead of span attributes
EVENT_INFERENCE_DETAILS = "gen_ai.client.inference.operation.details"
EVENT_SYSTEM_MESSAGE = "gen_ai.system.message"
EVENT_USER_MESSAGE = "gen_ai.user.message"
EVENT_ASSISTANT_MESSAGE = "gen_ai.assistant.message"
EVENT_TOOL_MESSAGE = "gen_ai.tool.message"
EVENT_CHOICE = "gen_ai.choice"
EVENT_NAME = "event.name"
# a GenAI client operation's exception, as a log record (v1.41+; some instrumentations add it as a span event)
EVENT_CLIENT_OPERATION_EXCEPTION = "gen_ai.client.operation.exception"

# content capture switch shared with the opentelemetry-instrumentation-genai packages
ENV_CAPTURE_MESSAGE_CONTENT = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
# which version of the conventions instrumentations emit (opentelemetry-instrumentation's _semconv reads it):
# a comma-separated list; GEN_AI_LATEST_EXPERIMENTAL in it selects the latest GenAI conventions
ENV_SEMCONV_STABILITY_OPT_IN = "OTEL_SEMCONV_STABILITY_OPT_IN"
GEN_AI_LATEST_EXPERIMENTAL = "gen_ai_latest_experimental"
# otel-blame's own settings: per-message content cap in bytes (default 64 KiB)
ENV_MAX_CONTENT_BYTES = "OTEL_BLAME_MAX_CONTENT_BYTES"
# level of the log line with a finished run's trace id (default INFO; WARNING shows it with no logging set up)
ENV_TRACE_ID_LOG_LEVEL = "OTEL_BLAME_TRACE_ID_LOG_LEVEL"
# the instrumentation scope (tracer name) of every span otel_blame.instrument emits
INSTRUMENTATION_SCOPE = "otel_blame.instrument"

# --- general OpenTelemetry names ---------------------------------------------------------
SERVICE_NAME = "service.name"
EXCEPTION_EVENT = "exception"
EXCEPTION_TYPE = "exception.type"
EXCEPTION_MESSAGE = "exception.message"
ERROR_TYPE = "error.type"
# dependencies a step called: what tells a failing tool, API or provider apart (victims, not culprits)
HTTP_RESPONSE_STATUS_CODE = "http.response.status_code"
HTTP_STATUS_CODE = "http.status_code"  # the pre-1.21 name, still emitted by many instrumentations
RPC_GRPC_STATUS_CODE = "rpc.grpc.status_code"
SERVER_ADDRESS = "server.address"
PEER_SERVICE = "peer.service"
URL_FULL = "url.full"
HTTP_URL = "http.url"  # the pre-1.21 name of url.full

# --- other instrumentations we accept ----------------------------------------------------
# OpenInference (Arize Phoenix)
OPENINFERENCE_SPAN_KIND = "openinference.span.kind"
OPENINFERENCE_AGENT_NAME = "agent.name"
OPENINFERENCE_INPUT_VALUE = "input.value"
OPENINFERENCE_OUTPUT_VALUE = "output.value"
OPENINFERENCE_TOOL_NAME = "tool.name"
OPENINFERENCE_SESSION_ID = "session.id"
OPENINFERENCE_METADATA = "metadata"  # JSON; LangChain runs carry LangGraph's keys here
OPENINFERENCE_GRAPH_NODE_ID = "graph.node.id"
OPENINFERENCE_GRAPH_NODE_NAME = "graph.node.name"
OPENINFERENCE_OUTPUT_MIME_TYPE = "output.mime_type"
# smolagents (OpenInference's instrumentor): an agent run's task and the agents it manages
SMOLAGENTS_TASK = "smolagents.task"
SMOLAGENTS_TOOLS_NAMES = "smolagents.tools_names"
SMOLAGENTS_MANAGED_AGENTS = "smolagents.managed_agents."  # + "{i}.name", "{i}.tools_names"
# LangGraph run metadata (in OpenInference's metadata): the node a run belongs to
LANGGRAPH_NODE = "langgraph_node"
LANGGRAPH_CHECKPOINT_NS = "langgraph_checkpoint_ns"
# OpenLLMetry (Traceloop)
TRACELOOP_SPAN_KIND = "traceloop.span.kind"
TRACELOOP_ENTITY_NAME = "traceloop.entity.name"
TRACELOOP_ENTITY_INPUT = "traceloop.entity.input"
TRACELOOP_ENTITY_OUTPUT = "traceloop.entity.output"
TRACELOOP_WORKFLOW_NAME = "traceloop.workflow.name"

# AG2's built-in tracing (autogen.opentelemetry): its own span type next to the GenAI names
AG2_SPAN_TYPE = "ag2.span.type"
AG2_CODE_EXECUTION_OUTPUT = "ag2.code_execution.output"
AG2_CODE_EXECUTION_EXIT_CODE = "ag2.code_execution.exit_code"
AG2_TYPE_AGENT = "agent"
AG2_TYPE_TOOL = "tool"
AG2_TYPE_CODE_EXECUTION = "code_execution"
AG2_TYPE_LLM = "llm"
AG2_TYPE_CONVERSATION = "conversation"
OP_EXECUTE_CODE = "execute_code"  # AG2's operation name for code execution spans
OP_CONVERSATION = "conversation"  # AG2's operation name for a whole chat
# values of openinference.span.kind
OPENINFERENCE_KIND_AGENT = "AGENT"
OPENINFERENCE_KIND_TOOL = "TOOL"
OPENINFERENCE_KIND_LLM = "LLM"
OPENINFERENCE_KIND_CHAIN = "CHAIN"
# values of traceloop.span.kind
TRACELOOP_KIND_AGENT = "agent"
TRACELOOP_KIND_TOOL = "tool"
TRACELOOP_KIND_WORKFLOW = "workflow"
TRACELOOP_KIND_TASK = "task"
# OpenLLMetry's indexed prompt/completion attributes: gen_ai.completion.{i}.content / .role
OPENLLMETRY_COMPLETION_PREFIX = "gen_ai.completion."
OPENLLMETRY_PROMPT_PREFIX = "gen_ai.prompt."
LLM_REQUEST_TYPE = "llm.request.type"
# evaluation results recorded as span events (GenAI conventions)
GEN_AI_EVALUATION_RESULT_EVENT = "gen_ai.evaluation.result"

# --- otel-blame's own attributes, for what the conventions lack --------------------------
STEP_INDEX = "otel_blame.step.index"
STEP_ROLE = "otel_blame.step.role"  # the raw speaker label, e.g. "Orchestrator (-> WebSurfer)"
STEP_KIND = "otel_blame.step.kind"  # message | tool | code_execution
TASK_NAME = "otel_blame.task.name"
TASK_INPUT = "otel_blame.task.input"
TASK_EXPECTED_OUTPUT = "otel_blame.task.expected_output"
TASK_FINAL_OUTPUT = "otel_blame.task.final_output"
TASK_OUTCOME = "otel_blame.task.outcome"
TASK_OUTCOME_REASON = "otel_blame.task.outcome_reason"
CONTENT_TRUNCATED = "otel_blame.content.truncated"
CONTENT_REDACTED = "otel_blame.content.redacted"
INSTRUMENTATION_SOURCE = "otel_blame.instrumentation.source"  # which hook emitted the span

OUTCOME_SUCCESS = "success"
OUTCOME_FAILURE = "failure"

# --- what the processor writes (public interface: never rename) -------------------------
BLAME_CULPRIT = "blame.culprit"
BLAME_AGENT = "blame.agent"
BLAME_STEP = "blame.step"
BLAME_SCORE = "blame.score"
BLAME_CONFIDENCE = "blame.confidence"
BLAME_DECIDED = "blame.decided"  # true when the evidence supports the verdict, false for a ranked guess
BLAME_REASON = "blame.reason"
BLAME_METHOD = "blame.method"
BLAME_MODEL = "blame.model"
BLAME_ASSIGNED_EVENT = "blame.assigned"
BLAME_CATEGORY = "blame.category"  # agent | dependency | specification
BLAME_DEPENDENCY = "blame.dependency"  # the failing tool or service, when the category is dependency
BLAME_FAILURE_MODE = "blame.failure_mode"  # a MAST failure mode, e.g. step_repetition
BLAME_CROSS_RUN_SUSPICIOUSNESS = "blame.cross_run.suspiciousness"  # 0..1, passing vs failing runs
BLAME_PATTERN = "blame.pattern"  # the failure pattern's id: the recurring cause this run belongs to
CATEGORY_AGENT = "agent"
CATEGORY_DEPENDENCY = "dependency"
CATEGORY_SPECIFICATION = "specification"
# the attribution as a GenAI evaluation result (event gen_ai.evaluation.result on the culprit span)
EVALUATION_FAILURE_ATTRIBUTION = "failure_attribution"  # its gen_ai.evaluation.name
EVALUATION_LABEL_CULPRIT = "culprit"  # its gen_ai.evaluation.score.label

# --- span names ---------------------------------------------------------------------------


def workflow_span_name(task_name: str) -> str:
    """Root span of one task: ``invoke_workflow {name}``."""
    return f"{OP_INVOKE_WORKFLOW} {task_name}"


def agent_span_name(agent: str) -> str:
    """One agent message: ``invoke_agent {agent}``."""
    return f"{OP_INVOKE_AGENT} {agent}"


def tool_span_name(tool: str) -> str:
    """One tool or code execution: ``execute_tool {tool}``."""
    return f"{OP_EXECUTE_TOOL} {tool}"


def late_blame_span_name(agent: str) -> str:
    """The span a late verdict adds to an already exported trace: ``blame {agent}``."""
    return f"blame {agent}"
