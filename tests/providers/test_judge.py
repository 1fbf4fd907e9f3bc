"""A model-judged scorer through a real adapter (OpenAI's SDK against the local fake
server), on SQLite and PostgreSQL: its grade and note read from the answer, its call drawn
from the adapter's `provider/model` limit and settled with the usage the provider reported."""

from __future__ import annotations

from runner import Agent, Runner, judge
from runner.models import OpenAIChat
from tests.providers.conftest import KEY
from tests.providers.fake_servers import FakeServer, openai_completion


def test_a_judge_grades_through_an_adapter_and_draws_from_its_limit(
    db_url: str, server: FakeServer
) -> None:
    grader = OpenAIChat("gpt-4.1-mini", base_url=f"{server.url}/v1", api_key=KEY)
    right = judge(grader, "Is the product right?", name="right")
    agent = Agent(lambda transcript: {"type": "final", "content": "35"}, scorers=[right])
    server.reply(openai_completion("0.8\nRight, but says nothing of how.", usage=(200, 10, 0)))
    with Runner(db_url) as runner:
        runner.set_limit("openai/gpt-4.1-mini", tokens_per_minute=10_000)
        runner.run(agent, "What is 5 * 7?", id="judged")
        [score] = runner.run_scorers("judged", agent)
        assert (score.name, score.value, score.note) == (
            "right",
            0.8,
            "Right, but says nothing of how.",
        )
        [info] = runner.limits()
        assert (info.requests, info.tokens, info.in_flight) == (1, 210, 0)
