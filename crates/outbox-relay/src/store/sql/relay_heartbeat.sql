-- One heartbeat of a relay (relay_heartbeat in migration 7): renews or
-- registers its lease, frees the buckets of relays whose lease ran out,
-- and takes or gives back buckets towards a fair share.
--
-- Parameters: $1 text the relay's id, $2 int8 its token, $3 text its
-- ordering mode, $4 float8 the lease in seconds.
--
-- Returns one row per bucket it owns afterwards and one with bucket NULL
-- (so that the flags come even when it owns none): bucket (int4 or NULL),
-- gained (bool, taken by this beat), renewed (bool, false when the relay
-- was not registered under its token), other_modes (int8, relays
-- registered with another ordering mode).
SELECT bucket, gained, renewed, other_modes
  FROM {schema}.relay_heartbeat($1, $2, $3, $4)
