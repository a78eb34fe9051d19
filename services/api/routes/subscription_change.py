"""A change to one subscription by a use case (``POST``/``DELETE /subscriptions/{id}/…``),
answered with the subscription as it then is and its version as the ETag."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Protocol, TypeVar

from fastapi import Depends, Header, Path
from pydantic import BaseModel
from starlette.responses import Response

from billing_core.db.pg import Connection
from billing_core.domain.money import BIGINT_MAX
from billing_core.repo import audit as audit_repo
from billing_core.repo import subscriptions as subscriptions_repo
from services.api.idempotency import IdempotentWrite, Outcome, SubscriptionsWrite
from services.api.routes.common import etag, expected_version, outcome
from services.api.schemas import SubscriptionOut

SubscriptionId = Annotated[
    int, Path(ge=1, le=BIGINT_MAX, description="Subscription id.", alias="id")
]
IfMatch = Annotated[
    str | None,
    Header(
        alias="If-Match",
        description='Expected subscription version (its ETag, e.g. "3"); 409 if it moved on.',
    ),
]

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)


class UseCase(Protocol[T_co]):
    """A use case that changes one subscription, optimistically locked on its version."""

    def __call__(
        self,
        conn: Connection,
        /,
        *,
        subscription_id: int,
        now: datetime,
        expected_version: int | None,
        actor: audit_repo.Actor,
    ) -> Awaitable[T_co]: ...


def _subscription_only(_result: object, subscription: SubscriptionOut) -> BaseModel:
    return subscription


@dataclass(frozen=True, slots=True)
class Change:
    """The subscription a request changes, its write and its If-Match."""

    subscription_id: int
    write: IdempotentWrite
    if_match: str | None

    async def run(
        self,
        use_case: UseCase[T],
        body_version: int | None,
        answer: Callable[[T, SubscriptionOut], BaseModel] = _subscription_only,
    ) -> Response:
        """``use_case`` in the write's transaction, expecting the version of If-Match or of
        the body's ``expectedVersion``; ``answer`` builds the body from its result and the
        subscription (the subscription alone by default)."""
        expected = expected_version(self.if_match, body_version)

        async def work(conn: Connection, now: datetime) -> Outcome:
            result = await use_case(
                conn,
                subscription_id=self.subscription_id,
                now=now,
                expected_version=expected,
                actor=self.write.actor,
            )
            sub = await subscriptions_repo.get(conn, self.subscription_id)
            return outcome(200, answer(result, SubscriptionOut.of(sub)), etag=etag(sub.version))

        return await self.write.run(work, expected_version=expected)


async def _change(
    subscription_id: SubscriptionId, write: SubscriptionsWrite, if_match: IfMatch = None
) -> Change:
    return Change(subscription_id, write, if_match)


SubscriptionChange = Annotated[Change, Depends(_change)]
