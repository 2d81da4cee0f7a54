"""The sessions that ended, as the pool's state counts them for
``hostpool_session_ends_total``: a session in the API (written or seen Assigned) that ends
counts once, whoever ends it; a reservation whose write never applied does not."""

from __future__ import annotations

from prometheus_client import generate_latest

from hostpool_operator.controller.metrics import PrometheusMetrics
from hostpool_operator.engine.placement import Assign
from support.state_builders import Pool, assigned, host_obj, pool_obj, request_obj


def placed(pool: Pool, name: str, user: str) -> Assign:
    pool.arrive(name, user)
    (intent,) = [i for i in pool.place() if isinstance(i, Assign)]
    return intent


def test_a_written_session_that_is_deleted_counts_once() -> None:
    pool = Pool(pool_obj(limit=2), [host_obj("h1")])
    intent = placed(pool, "r1", "alice")
    pool.written(intent)
    pool.state.assignment_written(intent.record, new_session=True)
    assert pool.state.take_sessions_ended() == 0
    pool.state.drop_request("r1")
    assert pool.state.take_sessions_ended() == 1
    assert pool.state.take_sessions_ended() == 0  # taken


def test_a_reservation_whose_write_failed_is_no_session_that_ended() -> None:
    pool = Pool(pool_obj(limit=2), [host_obj("h1")])
    intent = placed(pool, "r1", "alice")
    pool.state.inflight.discard("r1")
    pool.state.release(intent.record)  # the write was refused: the slot is free again
    assert "alice" not in pool.state.ledger
    assert pool.state.take_sessions_ended() == 0


def test_deleted_while_its_assignment_was_written_counts_at_the_write() -> None:
    pool = Pool(pool_obj(limit=2), [host_obj("h1")])
    intent = placed(pool, "r1", "alice")
    pool.state.drop_request("r1")  # the deletion event came first
    assert pool.state.take_sessions_ended() == 0
    pool.state.assignment_written(intent.record, new_session=True)
    assert pool.state.take_sessions_ended() == 1


def test_a_reconnect_ends_nothing_until_the_last_request_goes() -> None:
    pool = Pool(pool_obj(limit=2), [host_obj("h1")])
    pool.session("r1", "alice", "h1")
    pool.put(request_obj("r2", "alice", status=assigned("h1", reason="Reconnected")))
    pool.state.drop_request("r1")
    assert pool.state.take_sessions_ended() == 0
    pool.state.drop_request("r2")
    assert pool.state.take_sessions_ended() == 1


def test_sessions_seen_assigned_end_with_their_host() -> None:
    """Adopted sessions (seen Assigned, e.g. after a restart) count when they end."""
    pool = Pool(pool_obj(limit=5), [host_obj("h1"), host_obj("h2")])
    pool.session("r1", "alice", "h1")
    pool.session("r2", "bob", "h1")
    pool.session("r3", "carol", "h2")
    lost = pool.state.drop_host("h1")
    assert len(lost) == 2
    assert pool.state.take_sessions_ended() == 2


def test_the_exposition_has_the_counter_and_a_forgotten_pool_drops_it() -> None:
    metrics = PrometheusMetrics()
    metrics.sessions_ended("vdi", "finance", 2)
    metrics.sessions_ended("vdi", "finance", 1)
    metrics.sessions_ended("vdi", "sales", 1)
    text = generate_latest(metrics.registry).decode()
    assert "# TYPE hostpool_session_ends_total counter" in text
    assert 'hostpool_session_ends_total{namespace="vdi",pool="finance"} 3.0' in text
    metrics.forget_pool("vdi", "finance")
    text = generate_latest(metrics.registry).decode()
    assert 'pool="finance"' not in text
    assert 'hostpool_session_ends_total{namespace="vdi",pool="sales"} 1.0' in text
