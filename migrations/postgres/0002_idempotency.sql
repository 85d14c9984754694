-- Admin POSTs sent with an Idempotency-Key: the answer given, so a retry gets it again instead
-- of a second object. Written in the same transaction as the object.
CREATE TABLE idempotency (
    admin TEXT NOT NULL,
    idem_key TEXT NOT NULL,
    status INTEGER NOT NULL,
    body TEXT NOT NULL,
    created_ms BIGINT NOT NULL,
    PRIMARY KEY (admin, idem_key)
);
