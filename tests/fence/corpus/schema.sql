-- Tables the fence corpora read: the refunds domain (deploy/demo/schema.sql is loaded
-- first) and a few generic ones. Nothing here is hostile; hostile objects are created by
-- each live case's own `setup`.
CREATE TABLE events (id bigint PRIMARY KEY, payload jsonb NOT NULL, created_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE users (id bigint PRIMARY KEY, email text NOT NULL, name text NOT NULL);
CREATE TABLE t (id int PRIMARY KEY, a int, x numeric, note text);
CREATE TABLE docs (id int PRIMARY KEY, body text NOT NULL);  -- xml when the server has libxml
CREATE SEQUENCE refund_seq;
CREATE VIEW settled_refunds AS SELECT refund_id, dispute_id FROM refunds WHERE status = 'settled';
INSERT INTO t SELECT g, g % 3, g * 1.5, 'row ' || g FROM generate_series(1, 20) g;
INSERT INTO events SELECT g, jsonb_build_object('kind', 'refund', 'settled', g % 2 = 0, 'amount', g) FROM generate_series(1, 10) g;
INSERT INTO users VALUES (1, 'a@example.com', 'Ann  Lee'), (2, 'b@example.org', 'Bo');
INSERT INTO docs VALUES (1, '<receipt><id>1</id></receipt>');
