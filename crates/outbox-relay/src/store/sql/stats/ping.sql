-- The readiness probe's round trip.
SELECT 1
