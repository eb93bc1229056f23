//! The hot path (docs/design/insert-only.md): one task per lane this relay
//! owns reads the lane's window in batches, publishes each batch through
//! the same per-aggregate chains as a claim (`publish.rs`), and settles it
//! by moving the lane's position. No row of `messages` is ever written:
//! what the destination refused, and what an aggregate held in `retries`
//! holds back, is copied into `retries` by the same statement, in the
//! state today's settle would give it (`settle_plan.rs` decides), and the
//! claim path takes it from there.

use super::run::Failing;
use super::settle_plan::{self, SettlePlan};
use super::{Ordering, PassStats, PublishedBatch, Relay};
use crate::publisher::Publisher;
use crate::store::{LaneSettle, LaneWindow};
use crate::{Message, Result};
use std::collections::{HashMap, HashSet};
use std::num::NonZeroU32;
use tokio::sync::{watch, Notify};
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
}

impl<P: Publisher> Relay<P> {
    /// One pass of `lane`: reads its window (the next one with `tick`: the
    /// last batch came back short), reads a batch, publishes it, settles.
    /// `at` is where the last pass of this task left the lane, if it knows:
    /// the position its settle inserted, so that reading on in a window
    /// costs no statement; it is emptied when the pass ends anywhere the
    /// task cannot know (an error, a lost lane), and the position is read
    /// again.
    /// A batch the destination could not take at all (down, or publishing
    /// abandoned at shutdown) is not settled: the position stays, and the
    /// same rows are read again. Otherwise the position moves past the
    /// whole batch and the rows not sent go to `retries`.
    pub(crate) async fn lane_pass(
        &self,
        lane: i32,
        tick: bool,
        at: &mut Option<LaneWindow>,
        abandon: &CancellationToken,
    ) -> Result<LanePass> {
        let ordered = self.config.ordering == Ordering::Aggregate;
        let w = match at.take() {
            Some(w) if !tick => w,
            _ => self.store.lane_window(lane, tick).await?,
        };
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
            // A tick whose window holds rows only of other lanes is
            // settled, so that this lane's next window starts past them.
            if tick && w.busy {
                let none = LaneSettle::default();
                let moved = self.settle_lane(lane, &w, w.after_id, &none).await?.moved;
                if moved {
                    *at = Some(w.next(w.after_id));
                }
                return Ok(LanePass {
                    stayed: !moved,
                    busy: true,
                    ..LanePass::default()
                });
            }
            return Ok(LanePass::default());
        };
        let rows = read.rows;
        let full = rows >= self.batch_limit();
        // With ordering off nothing is held: a failed row goes alone.
        let held: HashSet<i64> = match ordered {
            true => read.held.into_iter().collect(),
            false => HashSet::new(),
        };
        let claimed = read.raw.decode();
        let keys: HashMap<i64, i64> = match ordered {
            true => claimed.keys,
            false => HashMap::new(),
        };
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
            keys,
            ..PublishedBatch::default()
        };
        let unreachable = match settle_plan::asks_destination(&batch) {
            true => self.destination_down().await,
            false => None,
        };
        let plan = SettlePlan::new(
            batch,
            &self.config.retry,
            self.clock.now(),
            unreachable,
            &mut rand::thread_rng(),
        );
        crate::metrics::order_breaks(plan.order_breaks);
        let p = &plan.params;
        let mut stats = plan.stats;
        // Released rows other than the held ones: the destination is down,
        // or publishing was abandoned. When that is all the batch did, it
        // is not settled: the position stays and the rows are read again.
        let released_fresh = p.released.len() - held_back.len();
        if released_fresh > 0
            && p.sent.is_empty()
            && p.failed.is_empty()
            && p.dead.is_empty()
            && unloadable.is_empty()
        {
            stats.released = released_fresh as u64;
            return Ok(LanePass {
                stats,
                found: true,
                stayed: true,
                ..LanePass::default()
            });
        }
        let settle = LaneSettle {
            failed: p.failed.clone(),
            dead: unloadable
                .into_iter()
                .chain(p.dead.iter().cloned())
                .collect(),
            held: p.released.clone(),
        };
        // Narrow before the statement (order.rs, rule 2): the claim path
        // must not take what the settle puts behind a live row.
        if ordered {
            let mut gates = self.order.gates();
            for &(k, id, waiting) in &plan.hold {
                gates.hold(k, id, waiting);
            }
        }
        let settled = self.settle_lane(lane, &w, last_id, &settle).await;
        {
            // Rows copied into `retries` may sit below its claim floor.
            let mut cursor = self.cursor();
            let now = self.clock.now();
            settle
                .failed
                .iter()
                .for_each(|(id, _, at)| cursor.failed(*id, *at));
            settle.held.iter().for_each(|id| cursor.released(*id, now));
        }
        let settled = match settled {
            Ok(s) => s,
            Err(e) => {
                if ordered {
                    let mut gates = self.order.gates();
                    for &(k, id) in &plan.hold_on_doubt {
                        gates.hold(k, id, true);
                    }
                }
                return Err(e);
            }
        };
        if !settled.moved {
            tracing::warn!(
                lane,
                rows,
                "lane lost before settling; another relay owns it now and publishes these rows again"
            );
            return Ok(LanePass {
                stats: PassStats {
                    claimed: stats.claimed,
                    published: stats.published,
                    ..PassStats::default()
                },
                found: true,
                stayed: true,
                ..LanePass::default()
            });
        }
        *at = Some(w.next(last_id));
        crate::metrics::settled(settled.failed, settled.dead, settled.held);
        stats.marked_sent = p.sent.len() as u64;
        stats.failed = settled.failed + settled.dead;
        stats.dead = settled.dead;
        stats.released = settled.held;
        Ok(LanePass {
            stats,
            full,
            found: true,
            stayed: false,
            busy: tick && w.busy,
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

    /// Runs `lane` until `shutdown`: passes back to back while the lane has
    /// rows, then waits to be woken. As the claim pipelines do, one lane
    /// polls (the first this relay owns, every poll interval) and the
    /// others wait for it: a tick that finds rows of any lane, or a
    /// producer's notification, wakes every lane through `lanes` (a
    /// counter each lane has seen up to where its last pass began, so a
    /// wake-up during a pass is not lost). An idle relay reads one window
    /// per interval however many lanes it owns. A lane this relay does not
    /// own waits for the heartbeat to hand it over.
    pub(super) async fn lane_loop(
        &self,
        lane: i32,
        wake: &Notify,
        lanes: &watch::Sender<u64>,
        shutdown: &CancellationToken,
        hard_stop: &CancellationToken,
    ) {
        let mut woken = lanes.subscribe();
        let mut at = None;
        let mut failing = Failing::new(lane as usize);
        // The first pass goes on from the last position, which may still
        // hold rows (a relay stopped mid-window); so does the first after
        // the lane was taken over.
        let mut tick = false;
        while !shutdown.is_cancelled() {
            if self.breaker.is_open() {
                let probe = async {
                    tokio::time::sleep_until(self.breaker.next_probe()).await;
                    self.probe().await;
                };
                tokio::select! {
                    _ = shutdown.cancelled() => break,
                    _ = probe => {}
                }
                continue;
            }
            woken.borrow_and_update();
            let polls = self.order.first_lane() == Some(lane);
            let idle = polls.then_some(self.config.idle_sleep);
            let pause = if !self.order.owns_lane(lane) {
                tick = false;
                at = None;
                Some(self.config.idle_sleep)
            } else {
                match self.lane_pass(lane, tick, &mut at, hard_stop).await {
                    Ok(pass) => {
                        self.read_only.writable();
                        failing.passed();
                        if pass.busy {
                            lanes.send_modify(|n| *n = n.wrapping_add(1));
                        }
                        let next = next_in_lane(&pass, tick);
                        tick = next.tick;
                        if !next.wait {
                            continue;
                        }
                        idle
                    }
                    Err(e) => {
                        // The settle may or may not have committed: read
                        // the position again.
                        tick = false;
                        Some(failing.failed(&e, &self.read_only))
                    }
                }
            };
            let sleep = async {
                match pause {
                    Some(p) => tokio::time::sleep(p).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = sleep => {}
                _ = woken.changed() => {}
                _ = wake.notified() => {
                    lanes.send_modify(|n| *n = n.wrapping_add(1));
                }
            }
        }
    }
}

/// What a lane does after a pass that succeeded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NextInLane {
    /// The next pass ticks to the next window. Only when this one read its
    /// window to the end: a tick starts the next window where the last
    /// one's snapshot ends, so rows of the last window not yet read would
    /// never be read.
    pub tick: bool,
    /// Wait for a wake-up or the poll interval first.
    pub wait: bool,
}

/// After `pass` (a tick if `tick`): a full batch reads on in its window at
/// once; a short one drained it, so the next pass ticks, at once unless
/// this was a tick that found nothing (then it waits). A pass whose
/// position stayed (lost lane, destination down: the breaker paces it)
/// waits and reads the same position again.
pub(crate) fn next_in_lane(pass: &LanePass, tick: bool) -> NextInLane {
    let (tick, wait) = if pass.stayed {
        (false, true)
    } else if pass.full {
        (false, false)
    } else {
        (true, tick && !pass.found)
    };
    NextInLane { tick, wait }
}

/// Whether `e` is a unique violation on the lanes' positions: another
/// relay settled from the same position first.
fn is_position_taken(e: &tokio_postgres::Error) -> bool {
    e.as_db_error().is_some_and(|d| {
        *d.code() == tokio_postgres::error::SqlState::UNIQUE_VIOLATION
            && d.constraint() == Some("lane_positions_pkey")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pass(full: bool, found: bool, stayed: bool) -> LanePass {
        LanePass {
            full,
            found,
            stayed,
            ..LanePass::default()
        }
    }

    fn next(tick: bool, wait: bool) -> NextInLane {
        NextInLane { tick, wait }
    }

    #[test]
    fn a_full_batch_reads_on_in_its_window_and_a_short_one_ticks() {
        assert_eq!(
            next_in_lane(&pass(true, true, false), false),
            next(false, false)
        );
        assert_eq!(
            next_in_lane(&pass(true, true, false), true),
            next(false, false)
        );
        assert_eq!(
            next_in_lane(&pass(false, true, false), false),
            next(true, false)
        );
        assert_eq!(
            next_in_lane(&pass(false, false, false), false),
            next(true, false)
        );
    }

    #[test]
    fn a_tick_that_found_nothing_waits_and_one_that_found_rows_ticks_again() {
        assert_eq!(
            next_in_lane(&pass(false, false, false), true),
            next(true, true)
        );
        assert_eq!(
            next_in_lane(&pass(false, true, false), true),
            next(true, false)
        );
    }

    #[test]
    fn a_pass_whose_position_stayed_waits_and_reads_it_again() {
        assert_eq!(
            next_in_lane(&pass(true, true, true), false),
            next(false, true)
        );
        assert_eq!(
            next_in_lane(&pass(false, true, true), true),
            next(false, true)
        );
    }
}
