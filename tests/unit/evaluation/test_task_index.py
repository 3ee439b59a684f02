"""Which lm-eval task index a task list needs: a user's own task is found in the user's folder without
lm-eval's whole index (~15 s to build); a user group, a typo or an unknown name still get the whole one."""

from __future__ import annotations

import pytest

from marin_lab.evaluation.harness import HarnessError, check_task_names, task_manager

QA = (
    "task: {name}\ndataset_path: allenai/ai2_arc\ndataset_name: ARC-Easy\noutput_type: multiple_choice\n"
    "test_split: test\ndoc_to_text: 'Q: {{{{question}}}}\\nA:'\ndoc_to_target: 0\n"
    "doc_to_choice: '{{{{choices.text}}}}'\n"
)


@pytest.fixture(scope="module")
def user_tasks(tmp_path_factory):
    folder = tmp_path_factory.mktemp("my_tasks")
    (folder / "my_qa.yaml").write_text(QA.format(name="my_qa"))
    (folder / "copa_mine.yaml").write_text(QA.format(name="copa"))  # overrides lm-eval's own copa
    (folder / "my_group.yaml").write_text("group: my_group\ntask:\n  - my_qa\n  - piqa\n")
    return str(folder)


def test_a_user_task_is_found_without_the_whole_index(user_tasks):
    manager = task_manager((user_tasks,), ["my_qa"])
    assert "my_qa" in manager.all_subtasks
    assert "hellaswag" not in manager.all_tasks  # only the user's folder was indexed
    mixed = task_manager((user_tasks,), ["my_qa", "arc_easy"])  # with a task this project knows
    assert {"my_qa", "arc_easy"} <= set(mixed.all_subtasks) and "hellaswag" not in mixed.all_tasks
    check_task_names(["my_qa", "arc_easy"], (user_tasks,))  # passes


def test_a_user_task_overrides_the_shipped_one_of_its_name(user_tasks):
    narrow = task_manager((user_tasks,), ["copa"])
    assert narrow.task_index["copa"].yaml_path is not None
    assert str(narrow.task_index["copa"].yaml_path).startswith(user_tasks)


@pytest.mark.slow
def test_a_user_group_or_a_typo_uses_the_whole_index(user_tasks):
    whole = task_manager((user_tasks,), ["my_group"])
    assert "hellaswag" in whole.all_tasks and "my_group" in whole.all_groups
    # The same precedence as the narrow index: the user's copa wins in the whole index too.
    assert str(whole.task_index["copa"].yaml_path).startswith(user_tasks)
    with pytest.raises(HarnessError, match=r"'my_qaa' \(closest: my_qa"):
        check_task_names(["my_qaa"], (user_tasks,))
