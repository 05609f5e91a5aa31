"""The failover scenario's webhook check (chaos/failover.py) on a real ledger: a ``workflow.succeeded``
delivery whose executor was lost after recording its effect marker is L-EFFECT-4's dead letter (it may
have been sent: never re-sent automatically), which the check counts as held for confirmation, not as a
lost event; a delivery still to run is neither, and the check explains it from the database."""

from __future__ import annotations

from app.db import transaction
from app.ids import new_id
from app.integrations import subscriptions
from app.ledger import transitions
from app.ledger.states import EXTERNAL_OUTCOME_UNKNOWN
from chaos.failover import explain_undelivered, held_for_confirmation
from tests.engine.conftest import eng  # noqa: F401 - the fixture ``out`` takes
from tests.engine.helpers import author, claim_task, complete_task, publish, run_jobs, start
from tests.integrations.test_webhooks_and_automation import DOC, OUT, _q, out  # noqa: F401 - fixture
from tests.ledger_helpers import claim_one, job

# a namespace of this module's own: ``author`` keeps one credential per namespace for the process, and another
# module's clean-up may remove the credential it made for a namespace shared with it (then every delivery of
# the subscription is skipped: its author is gone)
NS = "ns-" + new_id()[:8]


def _succeeded_workflow(db) -> str:
    iid = start(db, NS, publish(db, NS, DOC), {})["id"]
    complete_task(db, NS, claim_task(db, NS, "int-q"), {"ok": True})
    return iid


def test_a_lost_executor_with_its_marker_is_held_for_confirmation_not_lost(out) -> None:  # noqa: F811
    principal = author(NS)
    with transaction(out) as conn:  # nothing listens on port 1: a delivery that ran would fail, not vanish
        subscriptions.create(
            conn, principal, None, {"url": "http://127.0.0.1:1/hook", "event_types": ["workflow.*"]}
        )
    held_id, waiting_id = _succeeded_workflow(out), _succeeded_workflow(out)
    # the dispatches (one delivery per workflow event), and each delivery's first attempt: refused before
    # sending, it waits for its retry
    assert {t for t, _ in run_jobs(out, queue=OUT, limit=30)} == {"event_dispatch", "webhook_delivery"}
    # only the first workflow's workflow.succeeded delivery is due
    _q(out, "UPDATE workflow_jobs SET run_at = now() + interval '1 day' WHERE type = 'webhook_delivery'")
    (target,) = _q(
        out,
        "SELECT d.job_id FROM webhook_deliveries d JOIN workflow_events e ON e.id = d.event_id "
        "WHERE e.instance_id = :i AND e.type = 'workflow.succeeded'",
        i=held_id,
    )
    _q(out, "UPDATE workflow_jobs SET run_at = now() WHERE id = :j", j=target[0])
    # its executor records the marker, then is lost before sending (a failover): the lease runs out
    row = claim_one(out, OUT)
    assert row["id"] == target[0]
    with transaction(out) as conn:
        assert transitions.set_effect_marker(
            conn, row["id"], row["generation"], row["lease_token"], {"method": "POST", "step_key": "deliver"}
        )
    _q(out, "UPDATE workflow_jobs SET lease_until = now() - interval '1 minute' WHERE id = :j", j=row["id"])
    with transaction(out) as conn:
        reclaimed = transitions.reclaim_expired(conn, limit=10, backoff_base=1, backoff_cap=5, queue=OUT)
    assert [r["id"] for r in reclaimed] == [row["id"]]
    got = job(out, row["id"])
    assert (got["status"], got["error_code"]) == ("dead", EXTERNAL_OUTCOME_UNKNOWN)

    assert held_for_confirmation(out, [held_id, waiting_id]) == {held_id}
    (note,) = explain_undelivered(out, [waiting_id])
    assert note.startswith(f"undelivered {waiting_id}: instance: ('SUCCEEDED'")
    # every part of the explanation ran (a failed query is reported in the note, never raised)
    assert "query failed" not in note and "workflow.succeeded" in note and "event_dispatch" in note
    assert "deliveries: ('workflow.started', 'retrying', 1" in note
