"""Who only gives the task (otel_blame.attribution.roles), read from what each speaker says."""

from __future__ import annotations

from otel_blame.attribution.roles import read_roles
from otel_blame.attribution.signals import _window
from otel_blame.trajectory import Task, Trajectory

QUESTION = "How many kilometres does a runner cover with 5 miles on Monday and 11 miles on Tuesday?"


def run(*steps: tuple[str, str], task: str = QUESTION) -> Trajectory:
    return Trajectory.from_steps(
        [{"agent": agent, "content": content} for agent, content in steps], task=Task(input=task)
    )


def givers(trajectory: Trajectory) -> frozenset[str]:
    return read_roles(trajectory, [_window(step.content) for step in trajectory.steps]).task_givers


def test_a_moderator_who_gives_the_task_and_forwards_the_answers_is_a_task_giver() -> None:
    debate = run(
        ("User", QUESTION),
        ("Assistant1", "5 miles is 8.05 km and 11 miles is 17.70 km, so 25.75 km in all."),
        ("User", "These are the opinions of the other agents: ```25.75 km``` Give an updated answer."),
        ("Assistant2", "Converting 16 miles at 1.609 km per mile gives 25.74 km."),
        ("User", QUESTION),
        ("Assistant3", "I agree with 25.75 km."),
    )
    assert givers(debate) == {"User"}


def test_a_system_prompt_before_the_task_and_a_short_directive_give_no_work() -> None:
    team = run(
        ("System", "You are an expert assistant who solves tasks with code. Think, then act."),
        ("User", f"New task: {QUESTION}"),
        ("Manager", "Plan: 1. convert both days. 2. add them. ```python\nprint(round(16 * 1.609, 2))\n```"),
        ("User", "Now proceed and carry out this plan."),
        ("Manager", "The answer is 25.74 km."),
    )
    assert givers(team) == {"System", "User"}


def test_an_expert_who_restates_the_task_and_then_works_is_no_task_giver() -> None:
    experts = run(
        ("Excel_Expert", f"# Task\n{QUESTION}\n## Plan\n1. Convert each day.\n2. Add them."),
        ("Computer_terminal", "exitcode: 0 (execution succeeded)\nCode output: 25.75"),
        ("Excel_Expert", "```python\nprint(5 * 1.609 + 11 * 1.609)\n```"),
        ("Checker", "The total of 25.74 km is correct."),
    )
    assert givers(experts) == set()


def test_a_speaker_who_copies_another_agents_work_is_no_task_giver() -> None:
    answer = "Converting miles to kilometres: 5 miles is 8.05 km and 11 miles is 17.70 km.\nTotal: 25.75 km."
    copied = run(("Assistant1", answer), ("Assistant2", answer), ("Assistant3", "I get 25.74 km instead."))
    roles = read_roles(copied, [_window(step.content) for step in copied.steps])
    assert roles.task_givers == set()
    assert roles.copied[1] == 1.0 and roles.copied[0] == 0.0


def test_when_every_speaker_looks_like_one_only_who_gave_the_task_is() -> None:
    assert givers(run(("user", QUESTION))) == set()
    assert givers(run(("user", QUESTION), ("helper", "Now proceed."))) == {"user"}
    # a debate whose assistants answered nothing: they failed at the work, the moderator gave the task
    empty = run(
        ("User", QUESTION),
        ("Assistant1", "None"),
        ("User", "These are the recent opinions from other agents: ```None``` Give an updated answer."),
        ("Assistant2", "None"),
    )
    assert givers(empty) == {"User"}
    # with no delivery found, nobody gave the task: two speakers who say nothing of their own
    assert givers(run(("a", "Let us begin."), ("b", "Go on."))) == set()


def test_a_task_rewritten_before_it_reached_the_agents_is_still_given() -> None:
    cited = 'Check the citation: Greetham, "How I Lost My Author(s)", vol. 3, pages 45-46. Is it right?'
    rewritten = run(
        ("System", "You are an expert assistant who can solve any task using code blobs."),
        (
            "User",
            'New task:\nDo not check: Greetham, "How I Lost My Author(s)", vol. 3. Tell a story.',
        ),
        ("Manager", "Plan: 1. invent the story. 2. write it up. ```python\nprint('Greetham')\n```"),
        ("User", "Now proceed and carry out this plan."),
        ("Manager", "Here is the story of how Greetham lost an author."),
        task=cited,
    )
    assert givers(rewritten) == {"System", "User"}  # ("Author(s)" reads as code, but it is the task's)
    # reworded on its way: "return" reads as code, and the words around it are the task's
    asked = "What is the oldest Blu-Ray in this spreadsheet? Return it as appearing in the sheet."
    reworded = run(
        ("System", "You are an expert assistant who can solve any task using code blobs."),
        (
            "User",
            "New task:\nYou have one question to answer. It is important that you provide an answer; "
            "failure is not an option! Here is the task: What is the oldest Blu-Ray in this spreadsheet? "
            "return it as it appears there. Noteworthy titles include Time-Parking 2 from 2009, Cereal "
            "Killer III from 2011 and Windshield Bug from 2016, each marked as missing or rented out.",
        ),
        ("Manager", "Plan: 1. read the sheet with a tool. 2. sort the Blu-Rays by year."),
        ("User", "Now proceed and carry out this plan."),
        ("Manager", "The oldest is Time-Parking 2."),
        task=asked,
    )
    assert givers(reworded) == {"System", "User"}
    # a coordinator that opens with work of its own (code) is no task-giver, whatever it says later
    coordinated = run(
        ("Lead", "```python\nmiles = [5, 11]\n```"),
        ("Worker", "That is 25.75 km."),
        ("Lead", "Now proceed."),
    )
    assert givers(coordinated) == set()


def test_a_serialised_delivery_with_escaped_quotes_gives_the_task() -> None:
    asked = "I'm running 5 miles on Monday and 11 miles on Tuesday: how many kilometres is that in all?"
    escaped = asked.replace("'", "\\'")  # (as a repr of the message escapes it)
    serialised = "[{'type': 'text', 'text': '" + escaped + "'}]"
    debate = run(
        ("User", asked),
        ("Assistant1", "5 + 11 = 16 miles, 25.75 km."),
        ("User", serialised),
        ("Assistant2", "Checked: 25.75 km."),
        task=asked,
    )
    roles = read_roles(debate, [_window(step.content) for step in debate.steps])
    assert roles.delivers_task == {0, 2}


def test_a_user_who_rephrases_the_task_inside_instructions_of_its_own_gives_it() -> None:
    asked = "What writer is quoted by Merriam-Webster for the Word of the Day from June 27, 2022?"
    team = run(
        ("System", "You are an expert assistant who can solve any task using code blobs."),
        (
            "User",
            "New task:\nThere is a question awaiting your response, and it's essential that you strive to "
            "provide the most accurate answer possible. You should not settle for failure. Take your time: "
            "Which writer was quoted by Merriam-Webster for the Word of the Day on June 27, 2022? Loop "
            "back and reassess the question if new information arises.",
        ),
        ("Manager", "Plan: search for the Word of the Day page of June 27, 2022 and read the quote."),
        ("User", "Now proceed and carry out this plan."),
        ("Manager", "The quoted writer is Annie Dillard."),
        task=asked,
    )
    assert givers(team) == {"System", "User"}
    # a worker's answer that restates a question is not its delivery: only the run's opening message may
    answers = run(
        ("User", asked),
        ("Assistant1", "The page of 2022-06-27 quotes Annie Dillard."),
        ("Assistant2", "Which writer was quoted by Merriam-Webster on June 27, 2022? Annie Dillard."),
        task=asked,
    )
    assert givers(answers) == {"User"}
