-- Values invmon makes once and keeps: the key that masks personal data in rows.
CREATE TABLE meta (
    name TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
