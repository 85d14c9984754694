-- The request log's `request_bytes` and `response_bytes`: what the client sent and was
-- answered, in bytes (an MCP tool call's arguments and result). Expand-only: a gateway one
-- migration behind still writes its rows (the columns stay null).

ALTER TABLE requests ADD COLUMN request_bytes BIGINT;
ALTER TABLE requests ADD COLUMN response_bytes BIGINT;

-- With `[log] mcp_bodies`: an MCP tool call's arguments and result, as JSON.
ALTER TABLE requests ADD COLUMN bodies TEXT;
