-- The sent table's counters, without reading the table (which holds every
-- sent message not yet archived): the rows ever inserted into it (the
-- statistics collector's counter, for the throughput chart: two samples'
-- difference is what was sent between them) and the collector's count of
-- its live rows (the planner's estimate before the collector has one).
--
-- Returns sent_inserted (int8 or NULL), sent_estimate (int8).
SELECT s.n_tup_ins AS sent_inserted,
       coalesce(s.n_live_tup, greatest(c.reltuples, 0)::int8) AS sent_estimate
  FROM pg_class c LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid
 WHERE c.oid = to_regclass('{schema}.messages_sent')
