//! The statements behind per-aggregate order: bucket leases and the
//! refreshes of what a relay holds back. One function per statement.

use super::decode;
use super::Store;
use crate::Result;

/// A 1,024-bit map of buckets, as the claim's filter reads it (`get_bit`: bit
/// `n` is bit `n % 8` of byte `n / 8`, least significant first).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BucketSet([u8; 128]);

/// Buckets there are: an aggregate's bucket is its key's low 10 bits.
pub const BUCKETS: usize = 1024;

impl Default for BucketSet {
    fn default() -> Self {
        Self([0; 128])
    }
}

impl BucketSet {
    /// The bucket of an aggregate key.
    pub fn of(key: i64) -> usize {
        (key & (BUCKETS as i64 - 1)) as usize
    }

    /// Whether bucket `b` is in the set.
    pub fn contains(&self, b: usize) -> bool {
        self.0[b / 8] & (1 << (b % 8)) != 0
    }

    /// Adds bucket `b`.
    pub fn insert(&mut self, b: usize) {
        self.0[b / 8] |= 1 << (b % 8);
    }

    /// How many buckets are in the set.
    pub fn len(&self) -> usize {
        self.0.iter().map(|b| b.count_ones() as usize).sum()
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.0.iter().all(|b| *b == 0)
    }

    /// Buckets in `self` and not in `other`.
    pub fn minus(&self, other: &Self) -> Self {
        let mut out = [0; 128];
        for (i, o) in out.iter_mut().enumerate() {
            *o = self.0[i] & !other.0[i];
        }
        Self(out)
    }

    /// Buckets in `self` or in `other`.
    pub fn union(&self, other: &Self) -> Self {
        let mut out = self.0;
        for (o, b) in out.iter_mut().zip(other.0) {
            *o |= b;
        }
        Self(out)
    }

    /// The map as `bytea`.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

/// What one heartbeat returned.
#[derive(Debug, Clone, Default)]
pub struct Heartbeat {
    /// Buckets owned now.
    pub owned: BucketSet,
    /// Of those, the ones taken in this heartbeat.
    pub gained: BucketSet,
    /// False when the relay was not registered under its token: its first
    /// beat, or it was removed after its lease ran out.
    pub renewed: bool,
    /// Relays registered with the other ordering mode.
    pub other_modes: i64,
}

impl Store {
    /// Renews (or takes) this relay's registration and its fair share of
    /// buckets (`relay_heartbeat` in migration 7).
    pub(crate) async fn relay_heartbeat(
        &self,
        relay_id: &str,
        token: i64,
        ordering: &str,
        lease: std::time::Duration,
    ) -> Result<Heartbeat> {
        let client = self.client().await?;
        let rows = client
            .query(
                &self.q().relay_heartbeat,
                &[&relay_id, &token, &ordering, &lease.as_secs_f64()],
            )
            .await?;
        let mut beat = Heartbeat::default();
        for r in rows {
            beat.renewed = decode::get(&r, "renewed")?;
            beat.other_modes = decode::get(&r, "other_modes")?;
            let Some(bucket) = decode::get::<Option<i32>>(&r, "bucket")? else {
                continue;
            };
            let b = usize::try_from(bucket).unwrap_or(0) % BUCKETS;
            beat.owned.insert(b);
            if decode::get::<bool>(&r, "gained")? {
                beat.gained.insert(b);
            }
        }
        Ok(beat)
    }

    /// Removes this relay's registration and frees its buckets.
    pub(crate) async fn relay_leave(&self, relay_id: &str, token: i64) -> Result<()> {
        let client = self.client().await?;
        client
            .execute(&self.q().relay_leave, &[&relay_id, &token])
            .await?;
        Ok(())
    }

    /// `(aggregate key, lowest live id)` of every aggregate in `buckets`
    /// with a message in flight or waiting for a retry.
    pub(crate) async fn held_in_buckets(&self, buckets: &BucketSet) -> Result<Vec<(i64, i64)>> {
        let client = self.client().await?;
        let rows = client
            .query(&self.q().held_in_buckets, &[&buckets.as_bytes()])
            .await?;
        rows.iter()
            .map(|r| {
                Ok((
                    decode::get(r, "aggregate_key")?,
                    decode::get(r, "lowest_id")?,
                ))
            })
            .collect()
    }

    /// For each `(key, id)`, the aggregate's lowest live message at or
    /// above `id`, if any.
    pub(crate) async fn next_live(
        &self,
        heads: &[(i64, i64)],
    ) -> Result<Vec<(i64, i64, Option<i64>)>> {
        let client = self.client().await?;
        let (keys, ids): (Vec<i64>, Vec<i64>) = heads.iter().copied().unzip();
        let rows = client.query(&self.q().next_live, &[&keys, &ids]).await?;
        rows.iter()
            .map(|r| {
                Ok((
                    decode::get(r, "aggregate_key")?,
                    decode::get(r, "from_id")?,
                    decode::get(r, "lowest_id")?,
                ))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_bits_least_significant_first() {
        let mut s = BucketSet::default();
        s.insert(0);
        s.insert(9);
        s.insert(1023);
        assert_eq!(s.as_bytes()[0], 1);
        assert_eq!(s.as_bytes()[1], 2);
        assert_eq!(s.as_bytes()[127], 0x80);
        assert_eq!(s.len(), 3);
        assert!(s.contains(9) && !s.contains(8));
        assert_eq!(BucketSet::of(-1), 1023);
        assert_eq!(BucketSet::of(1024 + 5), 5);
    }
}
