-- The store's first shape: settings of the store itself, the objects managed through the admin
-- API (one JSON document each, in the fields of its config entry, secrets sealed), and the
-- append-only audit chain. Later migrations only add (expand, then contract a release later).

CREATE TABLE meta (
    k TEXT PRIMARY KEY,
    v TEXT NOT NULL
);

CREATE TABLE objects (
    kind TEXT NOT NULL,
    name TEXT NOT NULL,
    body TEXT NOT NULL,
    created_ms INTEGER NOT NULL,
    updated_ms INTEGER NOT NULL,
    PRIMARY KEY (kind, name)
);

CREATE TABLE audit (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    ts_ms INTEGER NOT NULL,
    admin TEXT NOT NULL,
    action TEXT NOT NULL,
    kind TEXT NOT NULL,
    name TEXT NOT NULL,
    diff TEXT NOT NULL,
    prev_hash TEXT NOT NULL,
    hash TEXT NOT NULL
);
