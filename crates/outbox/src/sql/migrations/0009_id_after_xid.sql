-- A message's id is drawn after its transaction has an id (xid) of its own.
--
-- The relay's claim floor passes an id once every transaction that was
-- running when the next claim began has ended (relay/cursor.rs): one that
-- held a lower id and commits late is then seen by a claim from the floor.
-- But an INSERT evaluates the id's default first and takes its xid only
-- when it writes the row: a backend preempted in between holds an id
-- without being a running transaction in anyone's snapshot, and the floor
-- could pass its row, which then waited for the next sweep (5 s by
-- default). Seen at 1,000 msg/s on 2 busy cores: one message in about
-- 100,000, 0.4 to 4 s late. Taking the xid first closes that gap: whoever
-- has drawn an id is a running transaction in every snapshot taken after.
-- An id given by hand (not the default) still relies on the sweep.
CREATE OR REPLACE FUNCTION {schema}.next_message_id() RETURNS int8
    LANGUAGE plpgsql VOLATILE AS $next_id$
BEGIN
    PERFORM pg_current_xact_id();
    RETURN nextval('{schema}.messages_id_seq');
END
$next_id$;
ALTER TABLE {schema}.messages ALTER COLUMN id SET DEFAULT {schema}.next_message_id();
