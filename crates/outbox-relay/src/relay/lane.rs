//! The hot path (docs/design/insert-only.md): one task per lane this relay
//! owns reads the lane's window in batches, publishes each batch through
//! the same per-aggregate chains as a claim (`publish.rs`), and settles it
//! by moving the lane's position. No row of `messages` is ever written:
//! what the destination refused, and what an aggregate held in `retries`
//! holds back, is copied into `retries` by the same statement, in the
//! state today's settle would give it (`settle_plan.rs` decides), and the
//! claim path takes it from there.

use super::{Ordering, PassStats, PublishedBatch, Relay};
use crate::publisher::Publisher;
use crate::store::{LaneSettle, LaneWindow};
use crate::{Message, Result};
use std::collections::{HashMap, HashSet};
use std::num::NonZeroU32;
use tokio_util::sync::CancellationToken;

/// The lanes of the hot path (migration 12's `message_lane`): lane `l`
/// holds the aggregates of the buckets `b` with `b % LANES = l`.
pub(crate) const LANES: i32 = 4;

/// What one lane pass did, and what the lane does next.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LanePass {
    /// The pass's counts.
    pub stats: PassStats,
    /// The batch was full: more waits in this window.
    pub full: bool,
    /// The pass read rows.
    pub found: bool,
    /// The lane's position did not move: another relay owns the lane now,
    /// or the destination was down and the whole batch stays where it is.
    pub stayed: bool,
    /// A tick whose new window holds rows of some lane: the other lanes
    /// have work too.
    pub busy: bool,
    /// The window read said a row of `retries` is due for the claim path.
    pub retries_due: bool,
}

/// A lane's batch read and published, its settle decided, not yet run.
#[derive(Debug)]
pub(crate) struct Published {
    pub(super) lane: i32,
    /// The window read, and the highest id read.
    w: LaneWindow,
    last_id: i64,
    rows: usize,
    full: bool,
    busy: bool,
    stats: PassStats,
    settle: LaneSettle,
    /// Gates to narrow before the statement, and to hold on doubt after it.
    hold: Vec<(i64, i64, bool)>,
    hold_on_doubt: Vec<(i64, i64)>,
    /// The aggregates whose rows the settle puts in `retries`: a batch read
    /// before it commits holds their rows back as the probe would after.
    diverted: HashSet<i64>,
    /// The destination took none of it (down, or publishing abandoned):
    /// not settled, the position stays.
    stays: bool,
    sent: u64,
}

/// What reading a lane's batch found.
enum Read {
    /// No row of the lane in the window.
    Empty(LaneWindow),
    Batch(Box<Published>),
}

impl<P: Publisher> Relay<P> {
    /// One pass of `lane`: reads its window (the next one with `tick`: the
    /// last batch came back short), reads a batch, publishes it, settles.
    /// `at` is where the last pass of this task left the lane, if it knows:
    /// the position its settle inserted, so that reading on in a window
    /// costs no statement; it is emptied when the pass ends anywhere the
    /// task cannot know (an error, a lost lane), and the position is read
    /// again.
    ///
    /// `ahead` carries a full batch from one pass to the next, published
    /// and not yet settled: the next pass settles it while it reads and
    /// publishes the batch after it (the position after a full batch is
    /// known without the database), so the settle's commit is not waited
    /// for alone. Only a full batch is carried: after a short one the lane
    /// ticks, and a tick reads the position the settle writes. The batch
    /// carried is settled first: if its settle fails or finds the lane
    /// lost, the one read after it is not settled (its rows were published
    /// and are read again: duplicates, as after a crash).
    ///
    /// A batch the destination could not take at all (down, or publishing
    /// abandoned at shutdown) is not settled: the position stays, and the
    /// same rows are read again. Otherwise the position moves past the
    /// whole batch and the rows not sent go to `retries`.
    pub(crate) async fn lane_pass(
        &self,
        lane: i32,
        tick: bool,
        at: &mut Option<LaneWindow>,
        ahead: &mut Option<Box<Published>>,
        abandon: &CancellationToken,
    ) -> Result<LanePass> {
        if let Some(prev) = ahead.take() {
            let next = prev.w.next(prev.last_id);
            let diverted = prev.diverted.clone();
            let (settled, read) = tokio::join!(
                self.commit_lane(*prev, at),
                self.read_lane(lane, next, false, &diverted, abandon)
            );
            let pass = settled?;
            if pass.stayed {
                // What was read after it is read again from the position.
                *at = None;
                return Ok(pass);
            }
            return match read? {
                // The window is drained: the next pass ticks.
                Read::Empty(_) => Ok(LanePass {
                    full: false,
                    ..pass
                }),
                Read::Batch(p) if p.full && !p.stays => {
                    *ahead = Some(p);
                    Ok(pass)
                }
                Read::Batch(p) => {
                    let more = self.commit_lane(*p, at).await?;
                    Ok(LanePass {
                        stats: add(pass.stats, more.stats),
                        ..more
                    })
                }
            };
        }
        let w = match at.take() {
            Some(w) if !tick => w,
            _ => self.store.lane_window(lane, tick).await?,
        };
        let retries_due = w.retries_due;
        let pass = match self
            .read_lane(lane, w, tick, &HashSet::new(), abandon)
            .await?
        {
            Read::Empty(w) => self.settle_empty(lane, w, tick, at).await,
            Read::Batch(p) if p.full && !p.stays => {
                let pass = LanePass {
                    stats: p.stats,
                    full: true,
                    found: true,
                    stayed: false,
                    busy: p.busy,
                    retries_due: false,
                };
                *ahead = Some(p);
                Ok(pass)
            }
            Read::Batch(p) => self.commit_lane(*p, at).await,
        }?;
        Ok(LanePass {
            retries_due,
            ..pass
        })
    }

    /// One batch of each lane this relay owns, settled, after a beat
    /// ([`Relay::run_once`]): a lane goes on from its position, or ticks
    /// when its window there is drained.
    pub(super) async fn lanes_once(&self) -> Result<PassStats> {
        self.beat().await?;
        let never = CancellationToken::new();
        let mut total = PassStats::default();
        for lane in (0..LANES).filter(|l| self.order.owns_lane(*l)) {
            let (mut at, mut ahead) = (None, None);
            let mut pass = self
                .lane_pass(lane, false, &mut at, &mut ahead, &never)
                .await?;
            if !pass.found && !pass.stayed {
                pass = self
                    .lane_pass(lane, true, &mut at, &mut ahead, &never)
                    .await?;
            }
            if let Some(p) = ahead.take() {
                // Its counts so far were the read's; the settle's hold them.
                pass = self.commit_lane(*p, &mut at).await?;
            }
            total = add(total, pass.stats);
        }
        Ok(total)
    }

    /// A tick whose window holds rows only of other lanes is settled, so
    /// that this lane's next window starts past them.
    async fn settle_empty(
        &self,
        lane: i32,
        w: LaneWindow,
        tick: bool,
        at: &mut Option<LaneWindow>,
    ) -> Result<LanePass> {
        if !(tick && w.busy) {
            return Ok(LanePass::default());
        }
        let none = LaneSettle::default();
        let moved = self.settle_lane(lane, &w, w.after_id, &none).await?.moved;
        if moved {
            *at = Some(w.next(w.after_id));
        }
        Ok(LanePass {
            stayed: !moved,
            busy: true,
            ..LanePass::default()
        })
    }

    /// Reads the batch of `lane` in window `w`, publishes it and decides its
    /// settle (`settle_plan.rs`). Rows of the aggregates in `diverted` are
    /// held back, as if their aggregate had a live row in `retries` (the
    /// batch before put one there and has not committed yet).
    async fn read_lane(
        &self,
        lane: i32,
        w: LaneWindow,
        tick: bool,
        diverted: &HashSet<i64>,
        abandon: &CancellationToken,
    ) -> Result<Read> {
        let ordered = self.config.ordering == Ordering::Aggregate;
        if tick && !w.busy {
            // The new window holds no row of any lane.
            return Ok(Read::Empty(w));
        }
        let read = self
            .store
            .lane_batch(
                lane,
                &w,
                self.batch_limit() as i64,
                self.config.max_batch_bytes as i64,
                self.config.max_message_bytes as i64,
            )
            .await?;
        let Some(last_id) = read.last_id else {
            return Ok(Read::Empty(w));
        };
        let rows = read.rows;
        // With ordering off nothing is held: a failed row goes alone.
        let mut held: HashSet<i64> = match ordered {
            true => read.held.into_iter().collect(),
            false => HashSet::new(),
        };
        let claimed = read.raw.decode();
        let keys: HashMap<i64, i64> = match ordered {
            true => claimed.keys,
            false => HashMap::new(),
        };
        held.extend(
            keys.iter()
                .filter(|(_, k)| diverted.contains(k))
                .map(|(id, _)| *id),
        );
        let messages: Vec<Message> = claimed
            .messages
            .into_iter()
            .filter(|m| !held.contains(&m.id))
            .collect();
        let unloadable: Vec<(i64, String)> = claimed
            .unloadable
            .into_iter()
            .filter(|(id, _)| !held.contains(id))
            .collect();
        let outcomes = if messages.is_empty() {
            Some(Vec::new())
        } else {
            crate::metrics::claimed(messages.len());
            self.publish_lane(&messages, &claimed.refused, &keys, abandon)
                .await
        };
        let mut held_back: Vec<i64> = held.into_iter().collect();
        held_back.sort_unstable();
        let batch = PublishedBatch {
            messages,
            outcomes,
            unloadable: unloadable.iter().map(|u| u.0).collect(),
            held_back: held_back.clone(),
            keys: keys.clone(),
            ..PublishedBatch::default()
        };
        let plan = self.plan_settle(batch).await;
        let p = plan.params;
        let mut stats = plan.stats;
        // Released rows other than the held ones: the destination is down,
        // or publishing was abandoned. When that is all the batch did, it
        // is not settled: the position stays and the rows are read again.
        let released_fresh = p.released.len() - held_back.len();
        let stays = released_fresh > 0
            && p.sent.is_empty()
            && p.failed.is_empty()
            && p.dead.is_empty()
            && unloadable.is_empty();
        if stays {
            stats.released = released_fresh as u64;
        }
        let settle = LaneSettle {
            failed: p.failed,
            dead: unloadable.into_iter().chain(p.dead).collect(),
            held: p.released,
        };
        let diverted = settle
            .failed
            .iter()
            .map(|f| f.0)
            .chain(settle.held.iter().copied())
            .filter_map(|id| keys.get(&id).copied())
            .collect();
        Ok(Read::Batch(Box::new(Published {
            lane,
            busy: tick && w.busy,
            w,
            last_id,
            rows,
            full: rows >= self.batch_limit(),
            stats,
            settle,
            hold: plan.hold,
            hold_on_doubt: plan.hold_on_doubt,
            diverted,
            stays,
            sent: p.sent.len() as u64,
        })))
    }

    /// Settles a published batch: the position moves past it, its rare
    /// rows go to `retries` (nothing when it `stays`).
    pub(super) async fn commit_lane(
        &self,
        p: Published,
        at: &mut Option<LaneWindow>,
    ) -> Result<LanePass> {
        let ordered = self.config.ordering == Ordering::Aggregate;
        let lane = p.lane;
        if p.stays {
            return Ok(LanePass {
                stats: p.stats,
                found: true,
                stayed: true,
                ..LanePass::default()
            });
        }
        // Narrow before the statement (order.rs, rule 2): the claim path
        // must not take what the settle puts behind a live row.
        if ordered {
            let mut gates = self.order.gates();
            for &(k, id, waiting) in &p.hold {
                gates.hold(k, id, waiting);
            }
        }
        let settled = self.settle_lane(lane, &p.w, p.last_id, &p.settle).await;
        {
            // Rows copied into `retries` may sit below its claim floor.
            let mut cursor = self.cursor();
            let now = self.clock.now();
            p.settle
                .failed
                .iter()
                .for_each(|(id, _, at)| cursor.failed(*id, *at));
            p.settle
                .held
                .iter()
                .for_each(|id| cursor.released(*id, now));
        }
        let settled = match settled {
            Ok(s) => s,
            Err(e) => {
                if ordered {
                    let mut gates = self.order.gates();
                    for &(k, id) in &p.hold_on_doubt {
                        gates.hold(k, id, true);
                    }
                }
                *at = None;
                return Err(e);
            }
        };
        if !settled.moved {
            tracing::warn!(
                lane,
                rows = p.rows,
                "lane lost before settling; another relay owns it now and publishes these rows again"
            );
            *at = None;
            return Ok(LanePass {
                stats: PassStats {
                    claimed: p.stats.claimed,
                    published: p.stats.published,
                    ..PassStats::default()
                },
                found: true,
                stayed: true,
                ..LanePass::default()
            });
        }
        *at = Some(p.w.next(p.last_id));
        crate::metrics::settled(settled.failed, settled.dead, settled.held);
        let mut stats = p.stats;
        stats.marked_sent = p.sent;
        stats.failed = settled.failed + settled.dead;
        stats.dead = settled.dead;
        stats.released = settled.held;
        Ok(LanePass {
            stats,
            full: p.full,
            found: true,
            stayed: false,
            busy: p.busy,
            retries_due: false,
        })
    }

    /// Publishes a lane's batch as a claim's is published (waves per
    /// aggregate, refused rows failed alone, the deadline and panics
    /// caught), under the rate limit; `None` if `abandon` fired first. No
    /// lease to extend: the lane's is the relay's bucket lease, which the
    /// heartbeat renews.
    async fn publish_lane(
        &self,
        messages: &[Message],
        refused: &[(i64, String)],
        keys: &HashMap<i64, i64>,
        abandon: &CancellationToken,
    ) -> Option<Vec<crate::Outcome>> {
        // Early settles are a claim's (rows of a lane are settled together).
        let (accepted, _ignored) = tokio::sync::mpsc::unbounded_channel::<i64>();
        let publish = async {
            if let Some(limiter) = &self.limiter {
                if let Some(n) = NonZeroU32::new(messages.len() as u32) {
                    // n never exceeds the burst: the batch was capped.
                    let _ = limiter.until_n_ready(n).await;
                }
            }
            self.publish_in_waves(messages, refused, keys, &accepted)
                .await
        };
        tokio::select! {
            o = publish => Some(o),
            _ = abandon.cancelled() => None,
        }
    }

    /// The lane settle under this relay's registration; a unique violation
    /// on the position (another relay moved the lane from it) settles
    /// nothing, as a lost lease does.
    async fn settle_lane(
        &self,
        lane: i32,
        w: &LaneWindow,
        last_id: i64,
        s: &LaneSettle,
    ) -> Result<crate::store::LaneSettled> {
        let who = (self.config.relay_id.as_str(), self.order.token());
        match self.store.lane_settle(lane, w, last_id, who, s).await {
            Err(crate::Error::Database(e)) if is_position_taken(&e) => {
                Ok(crate::store::LaneSettled::default())
            }
            other => other,
        }
    }
}

/// Two passes' counts together.
pub(crate) fn add(a: PassStats, b: PassStats) -> PassStats {
    PassStats {
        claimed: a.claimed + b.claimed,
        published: a.published + b.published,
        marked_sent: a.marked_sent + b.marked_sent,
        failed: a.failed + b.failed,
        dead: a.dead + b.dead,
        released: a.released + b.released,
        aggregates: a.aggregates + b.aggregates,
        held_back: a.held_back + b.held_back,
        read_on: a.read_on || b.read_on,
    }
}

/// Whether `e` is a unique violation on the lanes' positions: another
/// relay settled from the same position first.
fn is_position_taken(e: &tokio_postgres::Error) -> bool {
    e.as_db_error().is_some_and(|d| {
        *d.code() == tokio_postgres::error::SqlState::UNIQUE_VIOLATION
            && d.constraint() == Some("lane_positions_pkey")
    })
}
