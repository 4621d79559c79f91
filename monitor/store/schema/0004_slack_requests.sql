-- Signed Slack requests already seen: replays are refused across restarts too.
CREATE TABLE slack_requests (
    signature TEXT PRIMARY KEY,
    seen_at TEXT NOT NULL
);
