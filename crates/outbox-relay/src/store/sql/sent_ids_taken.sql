-- Which ids are already in messages_sent. Run only after a settle failed
-- on the sent table's key: a row written with an id the sequence had
-- already given out (by hand, or after setval).
--
-- Parameters: $1 int8[] ids.
--
-- Returns id (int8) per id taken.
SELECT id FROM {schema}.messages_sent WHERE id = ANY($1::int8[])
