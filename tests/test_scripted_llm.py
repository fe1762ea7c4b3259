import openai
import pytest

from tests.support import Reply, ScriptedLLM


def test_replies_in_order_through_the_real_client():
    with ScriptedLLM(["first", Reply(tool_calls=[{"name": "lookup", "arguments": {"q": 1}}])]) as llm:
        client = openai.OpenAI(base_url=llm.base_url, api_key="test", max_retries=0)
        one = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hello"}])
        two = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "again"}])
    assert one.choices[0].message.content == "first"
    assert one.usage.prompt_tokens >= 1
    call = two.choices[0].message.tool_calls[0]
    assert call.function.name == "lookup" and call.function.arguments == '{"q": 1}'
    assert [r["messages"][0]["content"] for r in llm.requests] == ["hello", "again"]


def test_error_status_and_exhaustion():
    with ScriptedLLM([Reply(status=429, content="slow down")]) as llm:
        client = openai.OpenAI(base_url=llm.base_url, api_key="test", max_retries=0)
        with pytest.raises(openai.RateLimitError):
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
        with pytest.raises(openai.InternalServerError, match="exhausted"):
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])


def test_script_function_sees_the_request():
    with ScriptedLLM(lambda req: req["messages"][-1]["content"].upper()) as llm:
        client = openai.OpenAI(base_url=llm.base_url, api_key="test", max_retries=0)
        out = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "echo"}])
    assert out.choices[0].message.content == "ECHO"


def test_the_responses_api_through_the_real_client():
    """The OpenAI Agents SDK's default model and Agent Framework's OpenAIChatClient use the Responses API."""
    script = ["first", Reply(tool_calls=[{"id": "call_1", "name": "lookup", "arguments": {"q": 1}}])]
    with ScriptedLLM(script) as llm:
        client = openai.OpenAI(base_url=llm.base_url, api_key="test", max_retries=0)
        one = client.responses.create(model="m", input="hello")
        two = client.responses.create(model="m", input=[{"role": "user", "content": "again"}])
        with pytest.raises(openai.BadRequestError, match="streamed"):
            client.responses.create(model="m", input="x", stream=True)
    assert one.output_text == "first" and one.usage.input_tokens >= 1
    call = two.output[0]
    assert (call.type, call.name, call.call_id) == ("function_call", "lookup", "call_1")
    assert call.arguments == '{"q": 1}'
    assert [r["input"] for r in llm.requests] == ["hello", [{"role": "user", "content": "again"}]]
