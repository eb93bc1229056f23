-- For each held-back aggregate, its lowest live message at or above an id:
-- a range scan from the id, one row when it is still live.
--
-- Parameters: $1 int8[] aggregate keys, $2 int8[] ids (one per key).
--
-- Returns aggregate_key (int8), from_id (int8), lowest_id (int8, NULL when
-- the aggregate has no live message there) per key.
SELECT g.k AS aggregate_key, g.id AS from_id,
       (SELECT min(m.id) FROM {schema}.messages m
         WHERE m.id >= g.id AND m.dead_at IS NULL
           AND {schema}.aggregate_key(m.aggregate_type, m.aggregate_id) = g.k) AS lowest_id
  FROM unnest($1::int8[], $2::int8[]) AS g(k, id)
