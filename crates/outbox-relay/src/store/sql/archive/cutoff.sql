-- The archiver's cutoff, on the database's clock. It is fixed once per
-- run, so that a run ends even while new rows keep ageing past it.
--
-- Parameters: $1 float8 seconds.
--
-- Returns cutoff (timestamptz): now() - seconds.
SELECT now() - $1::float8 * interval '1 second' AS cutoff
