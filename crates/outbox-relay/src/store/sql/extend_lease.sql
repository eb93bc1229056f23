-- Extend a batch's lease, for the rows the claim still holds.
--
-- Parameters: $1 int8[] ids, $2 text the relay's id, $3 timestamptz the
-- lease's locked_at.
--
-- Returns locked_at (timestamptz), the new one, per row still held.
UPDATE {schema}.messages SET locked_at = now()
 WHERE id = ANY($1::int8[]) AND status = 'processing'
   AND locked_by = $2 AND locked_at = $3
RETURNING locked_at
