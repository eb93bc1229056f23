-- Second round of prototypes (docs/design/insert-only.md, "Settled by
-- measurement"): the hot path with its rare path and an insert-only cursor,
-- and what partitioning costs a producer. Loaded after schema.sql.
--
-- `retries` stands in for the rare-path table (today's claim table): an
-- aggregate with a row there that is not dead is held, and the hot path
-- copies its later messages there instead of publishing them.
CREATE TABLE proto.retries (LIKE proto.messages INCLUDING DEFAULTS, status text NOT NULL DEFAULT 'pending',
  attempts int NOT NULL DEFAULT 0, dead_at timestamptz, PRIMARY KEY (id));
CREATE INDEX retries_live_aggregate ON proto.retries (aggregate_type, aggregate_id) WHERE dead_at IS NULL;
-- The cursor as a log: each settled batch inserts its lane's next position
-- (no UPDATE, so a held transaction leaves no chain of dead versions to
-- walk); the lane's position is its row with the highest seq.
CREATE TABLE proto.batches (lane int, seq bigint, lo pg_snapshot NOT NULL, hi pg_snapshot NOT NULL,
  last_id bigint NOT NULL, sent_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (lane, seq));
-- Producers' side: the same row into a table partitioned by id range (ten
-- partitions of 100,000 ids and a default), against the plain table.
CREATE TABLE proto.pmessages (LIKE proto.messages INCLUDING DEFAULTS) PARTITION BY RANGE (id);
CREATE INDEX ON proto.pmessages (xid);
ALTER TABLE proto.pmessages ADD PRIMARY KEY (id);
CREATE TABLE proto.pmessages_default PARTITION OF proto.pmessages DEFAULT;
DO $$ BEGIN FOR i IN 0..9 LOOP
  EXECUTE format('CREATE TABLE proto.pmessages_%s PARTITION OF proto.pmessages FOR VALUES FROM (%s) TO (%s)',
                 i, i * 100000, (i + 1) * 100000);
END LOOP; END $$;
CREATE SEQUENCE proto.pmessages_id;
ALTER TABLE proto.pmessages ALTER COLUMN id SET DEFAULT nextval('proto.pmessages_id');
