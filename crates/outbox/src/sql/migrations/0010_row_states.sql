-- Rows only in states the relay writes.
--
-- Anyone with UPDATE on the outbox (or INSERT on all its columns) could
-- write a row in a state the relay itself never writes, and such a row was
-- never settled and never seen: `processing` without a lease was never
-- reaped and held its aggregate back for ever; `pending` with `dead_at` set
-- was neither claimed (the claim index holds only rows whose dead_at is
-- NULL) nor listed by `dead list`; `dead` without `dead_at` blocked its
-- aggregate; a `created_at` of 'infinity' or past year 262141 cannot be
-- carried in the envelope. A CHECK now refuses each of them. The rule lives
-- in one function, so the CHECK, the sweep below and `dead replay` (which
-- leaves dead a row that would break it back in `pending`) apply the same
-- test.
--
-- Dead rows are exempt from all but "dead means dead_at": what killed a
-- row may be exactly what the rule refuses, and the relay's UPDATE that
-- dead-letters it (status, dead_at and the lease, nothing else) must pass.
-- Every other UPDATE of the relay writes status, lease and dead_at
-- together, so it passes too. A CHECK cannot tell an INSERT from those
-- UPDATEs, so rows already here that break the rule are dead-lettered
-- below, each alone, with the reason, as migration 6 does with headers:
-- an operator fixes and replays them. NOT VALID first locks the table
-- before the sweep, so the validation cannot fail.
--
-- The reasons are plain concatenations: `format()` and timestamp output
-- depend on session settings (STABLE), and an IMMUTABLE SQL function
-- whose body is not would not be inlined into the CHECK on every write.
-- Re-runnable (`outbox migrate` re-applies a migration whose record is
-- missing): CREATE OR REPLACE, DROP ... IF EXISTS, and a sweep that finds
-- nothing the second time.
CREATE OR REPLACE FUNCTION {schema}.message_state_problem(
    status text, locked_by text, locked_at timestamptz, dead_at timestamptz,
    attempts int, next_run_at timestamptz, created_at timestamptz) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $state$
    SELECT CASE
        WHEN dead_at IS NOT NULL AND status <> 'dead'
            THEN 'status ' || status || ' with dead_at set'
        WHEN dead_at IS NOT NULL THEN NULL
        WHEN status = 'dead' THEN 'status dead without dead_at'
        WHEN status = 'sent'
            THEN 'status sent in the hot table (the relay moves sent rows to messages_sent)'
        WHEN status = 'processing' AND (locked_by IS NULL OR locked_at IS NULL)
            THEN 'status processing without a lease (locked_by and locked_at)'
        WHEN status <> 'processing' AND (locked_by IS NOT NULL OR locked_at IS NOT NULL)
            THEN 'status ' || status || ' with a lease (locked_by or locked_at set)'
        WHEN NOT isfinite(locked_at) THEN 'locked_at is not a finite time'
        WHEN attempts < 0 THEN 'attempts below 0'
        WHEN NOT isfinite(next_run_at) THEN 'next_run_at is not a finite time'
        WHEN NOT isfinite(created_at) OR created_at >= '262142-01-01 00:00:00+00'
            THEN 'created_at is not a finite time before year 262142, which the envelope carries'
    END
$state$;

ALTER TABLE {schema}.messages DROP CONSTRAINT IF EXISTS messages_state_valid;
ALTER TABLE {schema}.messages ADD CONSTRAINT messages_state_valid CHECK (
    {schema}.message_state_problem(status, locked_by, locked_at, dead_at, attempts,
                                   next_run_at, created_at) IS NULL
) NOT VALID;

UPDATE {schema}.messages
   SET status = 'dead', dead_at = coalesce(dead_at, now()), locked_by = NULL, locked_at = NULL,
       dead_reason = 'refused by migration 10: '
           || {schema}.message_state_problem(status, locked_by, locked_at, dead_at, attempts,
                                             next_run_at, created_at)
           || '; fix the row, then replay',
       last_error = 'refused by migration 10'
 WHERE {schema}.message_state_problem(status, locked_by, locked_at, dead_at, attempts,
                                      next_run_at, created_at) IS NOT NULL;

ALTER TABLE {schema}.messages VALIDATE CONSTRAINT messages_state_valid;
