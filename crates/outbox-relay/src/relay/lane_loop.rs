//! A lane's task (`lane.rs` has the pass): passes back to back while the
//! lane has rows, then waiting to be woken; one lane polls for the relay,
//! and the claim pipelines on `retries` are woken by the lanes.

use super::lane::{LanePass, Published};
use super::run::{sleep_for, Failing};
use super::Relay;
use crate::publisher::Publisher;
use crate::store::LaneWindow;
use tokio::sync::{watch, Notify};
use tokio_util::sync::CancellationToken;

impl<P: Publisher> Relay<P> {
    /// Runs `lane` until `shutdown`: passes back to back while the lane has
    /// rows, then waits to be woken. As the claim pipelines do, one lane
    /// polls (the first this relay owns, every poll interval) and the
    /// others wait for it: a tick that finds rows of any lane, or a
    /// producer's notification, wakes every lane through `lanes` (a
    /// counter each lane has seen up to where its last pass began, so a
    /// wake-up during a pass is not lost). An idle relay reads one window
    /// per interval however many lanes it owns. The claim path's pipelines
    /// do not poll beside it: a window read says whether a row of
    /// `retries` is due, and the lane wakes them through `claims`. A lane
    /// this relay does not own waits for the heartbeat to hand it over.
    pub(super) async fn lane_loop(
        &self,
        lane: i32,
        wake: &Notify,
        lanes: &watch::Sender<u64>,
        claims: &Notify,
        shutdown: &CancellationToken,
        hard_stop: &CancellationToken,
    ) {
        let mut woken = lanes.subscribe();
        let mut at = None;
        let mut ahead = None;
        let mut failing = Failing::new(lane as usize);
        // The first pass goes on from the last position, which may still
        // hold rows (a relay stopped mid-window); so does the first after
        // the lane was taken over.
        let mut tick = false;
        while !shutdown.is_cancelled() {
            if self.breaker.is_open() {
                self.flush_ahead(&mut ahead, &mut at).await;
                if !self.wait_for_probe(shutdown).await {
                    break;
                }
                continue;
            }
            woken.borrow_and_update();
            let polls = self.order.first_lane() == Some(lane);
            let idle = polls.then_some(self.config.idle_sleep);
            let pause = if !self.order.owns_lane(lane) {
                self.flush_ahead(&mut ahead, &mut at).await;
                tick = false;
                at = None;
                Some(self.config.idle_sleep)
            } else {
                match self
                    .lane_pass(lane, tick, &mut at, &mut ahead, hard_stop)
                    .await
                {
                    Ok(pass) => {
                        self.read_only.writable();
                        failing.passed();
                        if pass.busy {
                            lanes.send_modify(|n| *n = n.wrapping_add(1));
                        }
                        if pass.retries_due {
                            claims.notify_one();
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
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = sleep_for(pause) => {}
                _ = woken.changed() => {}
                _ = wake.notified() => {
                    lanes.send_modify(|n| *n = n.wrapping_add(1));
                }
            }
        }
        // A batch published and not yet settled is settled before the
        // relay stops (the settle is the shutdown's to finish).
        self.flush_ahead(&mut ahead, &mut at).await;
    }

    /// Settles the batch carried ahead, if any (an error is logged: its
    /// rows are read again from the position, duplicates).
    async fn flush_ahead(&self, ahead: &mut Option<Box<Published>>, at: &mut Option<LaneWindow>) {
        if let Some(p) = ahead.take() {
            let lane = p.lane;
            if let Err(e) = self.commit_lane(*p, at).await {
                tracing::warn!(lane, error = %crate::error_chain(&e), "could not settle a published batch; its rows are published again");
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
