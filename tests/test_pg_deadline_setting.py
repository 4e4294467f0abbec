"""When a PostgreSQL call sets the server's statement_timeout: only when the connection's setting
would cancel a statement before the call's deadline, or too long after it for the watchdog's grace."""

from __future__ import annotations

import time

from tortoise_sdk.store.postgres import deadline as pg_deadline


class _Conn:
    def __init__(self, ms: int) -> None:
        self.statement_timeout_ms = ms
        self.sent: list[tuple] = []

    def execute(self, sql, args):  # type: ignore[no-untyped-def]
        self.sent.append(args)


def _bound(current_ms: int, left_s: float | None) -> list[tuple]:
    conn = _Conn(current_ms)
    pg_deadline.bound_statements(conn, None if left_s is None else time.monotonic() + left_s)  # type: ignore[arg-type]
    return conn.sent


def test_a_reflex_call_sets_its_budget_once_and_its_later_statements_keep_it():
    assert [a[0] for a in _bound(30_000, 0.050)] in (["50"], ["49"], ["48"])  # from the store's bound: set
    assert _bound(50, 0.030) == []  # a later statement of the same call: the server cancels 20 ms late at most
    assert _bound(50, 0.002) == []
    assert _bound(50, 0.049) == []  # the next call with the same budget


def test_a_setting_that_cancels_too_early_or_far_too_late_is_replaced():
    assert _bound(50, 30.0)  # a call with the store's bound after a reflex call
    assert _bound(20, 0.050)  # would cancel before the deadline
    assert _bound(30_000, None)  # no deadline: no server bound either
    assert _bound(0, None) == [] and _bound(30_000, 30.0) == []
