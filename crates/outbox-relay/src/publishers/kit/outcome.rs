//! A batch's outcomes, one per message in order, built the same way by
//! every publisher: a message the destination would refuse is settled
//! before anything is sent (see `limits.rs`), the rest share one round
//! trip, and a failure of that round trip is theirs, not the refused ones'.

use crate::{Outcome, PublishError};

/// Every message of a batch of `n` failed with `e` (no connection, one
/// transaction for all, ...).
pub(crate) fn all_failed(n: usize, e: PublishError) -> Vec<Outcome> {
    vec![Err(e); n]
}

/// A batch being settled: `Some` for a message settled already, `None` for
/// one sent and waiting for its reply.
#[derive(Debug, Default)]
pub(crate) struct Settling(Vec<Option<Outcome>>);

impl From<Vec<Option<Outcome>>> for Settling {
    fn from(outcomes: Vec<Option<Outcome>>) -> Self {
        Self(outcomes)
    }
}

impl FromIterator<Option<Outcome>> for Settling {
    fn from_iter<I: IntoIterator<Item = Option<Outcome>>>(iter: I) -> Self {
        Self(iter.into_iter().collect())
    }
}

impl Settling {
    /// How many messages were sent (are waiting for a reply).
    pub(crate) fn sent(&self) -> usize {
        self.0.iter().filter(|o| o.is_none()).count()
    }

    /// Each message sent gets, in order, the next outcome of `replies`; one
    /// left without a reply is retryable.
    pub(crate) fn finish(self, mut replies: impl Iterator<Item = Outcome>) -> Vec<Outcome> {
        self.0
            .into_iter()
            .map(|o| {
                o.unwrap_or_else(|| {
                    replies.next().unwrap_or_else(|| {
                        Err(PublishError::retryable("no reply for this message"))
                    })
                })
            })
            .collect()
    }

    /// Every message sent failed with `e` (the round trip failed); the ones
    /// settled before sending keep their outcome.
    pub(crate) fn fail_sent(self, e: PublishError) -> Vec<Outcome> {
        self.finish(std::iter::repeat(Err(e)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refused_messages_keep_their_outcome_and_the_rest_share_the_replies() {
        let refused = PublishError::permanent("too large");
        let s: Settling = [None, Some(Err(refused.clone())), None]
            .into_iter()
            .collect();
        assert_eq!(s.sent(), 2);
        let got = s.finish([Ok(())].into_iter());
        assert!(got[0].is_ok());
        assert_eq!(got[1].as_ref().unwrap_err().message, refused.message);
        assert!(got[2].as_ref().is_err_and(PublishError::is_retryable));
        let s = Settling::from(vec![None, Some(Ok(()))]);
        let got = s.fail_sent(PublishError::retryable("down"));
        assert!(got[0].is_err() && got[1].is_ok());
        assert_eq!(all_failed(3, PublishError::retryable("x")).len(), 3);
    }
}
