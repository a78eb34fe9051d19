"""customer foreign keys: subscriptions, invoices and payment methods reference a customer

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-05

0009 created the customer table, but ``subscription.customer_id``, ``invoice.customer_id`` and
``gateway_customer.customer_id`` stayed bare numbers: nothing kept them pointing at a customer.
This first gives every number in use that has no customer row one (as 0009 did: the number as
its external id, the time zone of its first subscription), moves the id sequence past them, and
then adds the three foreign keys. Existing databases keep working; from here on a subscription
of an unknown customer is refused.

Downgrade drops the foreign keys only: the customer rows stay (0009's downgrade drops them).
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# (table, constraint): each table's customer_id references customer.id.
FOREIGN_KEYS = (
    ("subscription", "fk_subscription_customer_id_customer"),
    ("invoice", "fk_invoice_customer_id_customer"),
    ("gateway_customer", "fk_gateway_customer_customer_id_customer"),
)


# Moves the customer id sequence past the highest id if a row took one it would hand out.
NEXT_ID_AFTER_EXISTING = """
SELECT setval(pg_get_serial_sequence('customer', 'id'), top.id)
FROM (SELECT max(id) AS id FROM customer) AS top, customer_id_seq AS seq
WHERE top.id >= seq.last_value + CASE WHEN seq.is_called THEN 1 ELSE 0 END
"""


def upgrade() -> None:
    op.execute(
        """
        INSERT INTO customer (id, external_id, time_zone)
        SELECT ids.customer_id, ids.customer_id::text,
               COALESCE((SELECT s.time_zone FROM subscription s
                         WHERE s.customer_id = ids.customer_id ORDER BY s.id LIMIT 1), 'UTC')
        FROM (SELECT customer_id FROM subscription
              UNION SELECT customer_id FROM invoice
              UNION SELECT customer_id FROM gateway_customer) AS ids
        WHERE NOT EXISTS (SELECT 1 FROM customer c WHERE c.id = ids.customer_id)
        ON CONFLICT (external_id) DO NOTHING
        """
    )
    # A number whose text another customer already uses as its external id gets a suffixed one.
    op.execute(
        """
        INSERT INTO customer (id, external_id, time_zone)
        SELECT ids.customer_id, 'customer-id-' || ids.customer_id, 'UTC'
        FROM (SELECT customer_id FROM subscription
              UNION SELECT customer_id FROM invoice
              UNION SELECT customer_id FROM gateway_customer) AS ids
        WHERE NOT EXISTS (SELECT 1 FROM customer c WHERE c.id = ids.customer_id)
        """
    )
    op.execute(NEXT_ID_AFTER_EXISTING)
    for table, name in FOREIGN_KEYS:
        op.create_foreign_key(name, table, "customer", ["customer_id"], ["id"])


def downgrade() -> None:
    for table, name in reversed(FOREIGN_KEYS):
        op.drop_constraint(name, table, type_="foreignkey")
