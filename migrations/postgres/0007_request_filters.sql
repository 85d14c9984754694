-- The request log's filters (the console's log page, `GET /admin/requests`): how many attempts a
-- request made (failed over: more than one), whether it was marked as test traffic
-- (`x-switchyard-test`), and an index per filtered column entered at the page's time cursor.
-- Expand-only: a gateway one migration behind still writes its rows (the defaults fill in).

ALTER TABLE requests ADD COLUMN attempt_count INTEGER NOT NULL DEFAULT 1;
ALTER TABLE requests ADD COLUMN test BOOLEAN NOT NULL DEFAULT false;
CREATE INDEX requests_key_ts ON requests (key_name, ts_ms);
CREATE INDEX requests_channel_ts ON requests (channel, ts_ms);
CREATE INDEX requests_model_ts ON requests (requested_model, ts_ms);
