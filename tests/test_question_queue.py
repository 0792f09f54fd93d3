"""The question queue: ids that stay with their question while the session delivers from the front."""

from __future__ import annotations

from kstui.engine.question_queue import QuestionQueue, QueuedQuestion


def test_an_edit_names_its_question_not_a_position() -> None:
    q = QuestionQueue()
    first = q.add(QueuedQuestion("first"))
    second = q.add(QueuedQuestion("second"))
    assert q.pop() is first  # delivered while the human was editing "first"
    assert q.edit(first.id, "first, sharpened") is False  # too late: nothing else changes
    assert [x.text for x in q] == ["second"]
    assert q.edit(second.id, "second, sharpened") and [x.text for x in q] == ["second, sharpened"]
    assert q.remove(first.id) is False and q.remove(second.id) and len(q) == 0


def test_an_interrupting_question_goes_first_and_ids_are_never_reused() -> None:
    q = QuestionQueue()
    a = q.add(QueuedQuestion("a"))
    now = q.add(QueuedQuestion("now", interrupt=True), front=True)
    assert [x.text for x in q] == ["now", "a"]
    q.remove(a.id)
    b = q.add(QueuedQuestion("b"))
    assert len({a.id, now.id, b.id}) == 3


def test_a_restored_queue_keeps_its_ids_and_gives_old_entries_new_ones() -> None:
    q = QuestionQueue()
    q.restore([{"text": "kept", "source": "human", "id": 7}, {"text": "from an older trace", "source": "bank"}])
    kept, old = list(q)
    assert kept.id == 7 and old.id > 7 and old.source == "bank"
    assert q.add(QueuedQuestion("new")).id > old.id
    assert q.snapshot()[0] == {"text": "kept", "source": "human", "question_id": None, "kind": None,
                               "interrupt": False, "id": 7}
