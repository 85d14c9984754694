-- Admin POSTs sent with an Idempotency-Key: the answer given (never a secret: a generated key
-- is shown once and not kept), and a fingerprint of the request, so a retry gets the first
-- answer instead of a second object and the key reused for another request is refused.
-- Written in the same transaction as the object; pruned after a day.
CREATE TABLE idempotency (
    admin TEXT NOT NULL,
    idem_key TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    status INTEGER NOT NULL,
    body TEXT NOT NULL,
    created_ms BIGINT NOT NULL,
    PRIMARY KEY (admin, idem_key)
);
