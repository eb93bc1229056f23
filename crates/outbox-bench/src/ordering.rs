//! `bench ordering`: what per-aggregate ordering costs, as ratios of
//! [`Case`]s measured within one run ([`RATIOS`], with their targets).
//! Its own pieces: the relay as an operator starts it (a process with its
//! default settings, timed from launch to the last `sent_at`), and the hot
//! table's bytes per pending message. The in-process drains (ordering on
//! and off, spread or one aggregate) are [`crate::drain_spec`].

use crate::drain::{check_drained, drop_schema, fresh_schema, prepare, wait_until_settled_or};
use crate::{drain_spec, Algorithm, BenchQueries, DrainResult, DrainSpec, Progress};
use deadpool_postgres::Pool;
use outbox::Schema;
use outbox_relay::admin::get;
use outbox_relay::relay::Ordering;
use outbox_relay::{Error, Result};
use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// What `bench ordering` measures, beyond how often.
#[derive(Debug, Clone, Copy)]
pub struct OrderingParams {
    /// Messages of the spread backlog.
    pub messages: u64,
    /// Aggregates the spread backlog is dealt over, round-robin.
    pub aggregates: u64,
    /// Messages of the one-aggregate case.
    pub one_aggregate: u64,
    /// Batch size of the relay and of the DELETE limit.
    pub batch_size: usize,
    /// In-process relay pipelines.
    pub concurrency: usize,
}

impl OrderingParams {
    /// The spread backlog, ordering on: what the DELETE limit and the relay
    /// process drain, and what the hot table's size is measured on.
    pub fn spread(&self) -> DrainSpec {
        DrainSpec {
            concurrency: self.concurrency,
            messages: self.messages,
            aggregates: Some(self.aggregates),
            batch_size: self.batch_size,
            ordering: Ordering::Aggregate,
        }
    }
}

/// One case of `bench ordering`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Case {
    /// Spread backlog, in-process relay, ordering off.
    SpreadOff,
    /// Spread backlog, in-process relay, ordering on.
    SpreadOn,
    /// One aggregate's backlog, ordering on.
    OneOn,
    /// The one-statement DELETE limit on the spread backlog.
    DeleteLimit,
    /// The `outbox relay` process with its defaults on the spread backlog.
    Process,
    /// Spread backlog, in-process relay, ordering on, over the insert-only
    /// engine (the draft migration 12).
    Lanes,
}

impl Case {
    /// Every case, in the order of a forward run.
    pub const ALL: [Case; 6] = [
        Case::SpreadOff,
        Case::SpreadOn,
        Case::OneOn,
        Case::DeleteLimit,
        Case::Process,
        Case::Lanes,
    ];

    /// Short key used in JSON.
    pub fn key(self) -> &'static str {
        match self {
            Case::SpreadOff => "spread_off",
            Case::SpreadOn => "spread_on",
            Case::OneOn => "one_aggregate_on",
            Case::DeleteLimit => "delete_limit",
            Case::Process => "relay_process",
            Case::Lanes => "lanes",
        }
    }

    /// Label used in tables.
    pub fn label(self, p: &OrderingParams) -> String {
        match self {
            Case::SpreadOff => format!("spread, ordering none ({} pipelines)", p.concurrency),
            Case::SpreadOn => format!("spread, ordering aggregate ({} pipelines)", p.concurrency),
            Case::OneOn => format!(
                "one aggregate, ordering aggregate ({} msgs)",
                p.one_aggregate
            ),
            Case::DeleteLimit => "DELETE one-statement limit".into(),
            Case::Process => "outbox relay process, defaults".into(),
            Case::Lanes => format!(
                "spread, insert-only engine (draft), ordering aggregate ({} pipelines)",
                p.concurrency
            ),
        }
    }
}

/// The cases a run of `bench ordering` measures (`--cases`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CaseSet(u8);

impl Default for CaseSet {
    /// Every case.
    fn default() -> Self {
        Self((1 << Case::ALL.len()) - 1)
    }
}

impl CaseSet {
    /// Whether `case` is measured.
    pub fn contains(self, case: Case) -> bool {
        self.0 & Self::bit(case) != 0
    }

    fn bit(case: Case) -> u8 {
        1 << Case::ALL.iter().position(|c| *c == case).unwrap_or(0)
    }

    /// The cases named by their keys, comma-separated; an unknown key is
    /// refused, naming the known ones.
    pub fn parse(text: &str) -> std::result::Result<Self, String> {
        let mut set = 0;
        for key in text.split(',').map(str::trim) {
            match Case::ALL.iter().find(|c| c.key() == key) {
                Some(c) => set |= Self::bit(*c),
                None => {
                    let known: Vec<&str> = Case::ALL.iter().map(|c| c.key()).collect();
                    return Err(format!(
                        "unknown case {key:?}: the cases are {}",
                        known.join(", ")
                    ));
                }
            }
        }
        Ok(Self(set))
    }
}

/// A ratio of two cases, per run and as the median of the per-run ratios.
#[derive(Debug)]
pub struct Ratio {
    /// Short key used in JSON.
    pub key: &'static str,
    /// What it compares, for tables.
    pub what: &'static str,
    /// Numerator and denominator.
    pub over: (Case, Case),
    /// The least median that meets the target.
    pub target: f64,
}

/// The ratios `bench ordering` reports, with their targets.
pub const RATIOS: [Ratio; 4] = [
    Ratio {
        key: "spread_on_over_off",
        what: "spread: ordering on / off",
        over: (Case::SpreadOn, Case::SpreadOff),
        target: 0.9,
    },
    Ratio {
        key: "one_aggregate_over_spread_on",
        what: "one aggregate / spread (on)",
        over: (Case::OneOn, Case::SpreadOn),
        target: 0.3,
    },
    Ratio {
        key: "process_over_delete_limit",
        what: "relay process / DELETE limit",
        over: (Case::Process, Case::DeleteLimit),
        target: 0.5,
    },
    Ratio {
        key: "lanes_over_delete_limit",
        what: "insert-only engine (draft) / DELETE limit",
        over: (Case::Lanes, Case::DeleteLimit),
        target: 1.0,
    },
];

impl Ratio {
    /// The ratio of every run, from each case's rates by key.
    pub fn per_run(&self, rates: &BTreeMap<&str, Vec<f64>>) -> Vec<f64> {
        let (a, b) = (&rates[self.over.0.key()], &rates[self.over.1.key()]);
        a.iter().zip(b).map(|(a, b)| a / b).collect()
    }
}

/// Runs one case of `bench ordering`. `relay` is the command that starts
/// a relay on a schema (the [`Case::Process`] case only).
pub async fn measure(
    pool: &Pool,
    p: &OrderingParams,
    case: Case,
    relay: impl FnOnce(&Schema) -> Command,
    progress: &Progress,
) -> Result<DrainResult> {
    let spread = p.spread();
    match case {
        Case::SpreadOff => {
            let spec = DrainSpec {
                ordering: Ordering::None,
                ..spread
            };
            drain_spec(pool, Algorithm::Relay, &spec, progress).await
        }
        Case::SpreadOn => drain_spec(pool, Algorithm::Relay, &spread, progress).await,
        Case::OneOn => {
            let spec = DrainSpec {
                messages: p.one_aggregate,
                aggregates: Some(1),
                ..spread
            };
            drain_spec(pool, Algorithm::Relay, &spec, progress).await
        }
        Case::DeleteLimit => drain_spec(pool, Algorithm::DeleteLimit, &spread, progress).await,
        Case::Process => drain_process(pool, &spread, relay, progress).await,
        Case::Lanes => drain_spec(pool, Algorithm::Lanes, &spread, progress).await,
    }
}

/// Kills the relay process however the drain ends (an error, a panic).
struct Running {
    child: Child,
    log: std::path::PathBuf,
}

impl Running {
    /// The end of what the process wrote to stderr.
    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        // Every row is settled by now (or the drain failed): nothing in
        // flight is lost, and the schema is dropped next.
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.log);
    }
}

/// Preloads the backlog of `spec` in a fresh schema, starts the process
/// `command(schema)` returns (a relay on that schema), and times it from
/// just before the launch to the last `sent_at`, both read from the
/// database's clock, so process start-up, connecting and the schema check
/// count, and the watcher's polling does not. The process is killed once
/// every message is settled; the schema is dropped.
pub async fn drain_process(
    pool: &Pool,
    spec: &DrainSpec,
    command: impl FnOnce(&Schema) -> Command,
    progress: &Progress,
) -> Result<DrainResult> {
    let schema = fresh_schema()?;
    let result = drain_process_in(pool, &schema, spec, command, progress).await;
    drop_schema(pool, &schema).await?;
    result
}

async fn drain_process_in(
    pool: &Pool,
    schema: &Schema,
    spec: &DrainSpec,
    command: impl FnOnce(&Schema) -> Command,
    progress: &Progress,
) -> Result<DrainResult> {
    let algorithm = Algorithm::RelayProcess;
    prepare(pool, schema, algorithm, spec).await?;
    let bq = BenchQueries::new(schema);
    let client = pool.get().await?;
    let done = progress.start(algorithm.key(), spec.messages);
    let log = std::env::temp_dir().join(format!("{}.relay.log", schema.name()));
    let stderr = std::fs::File::create(&log)
        .map_err(|e| Error::Check(format!("cannot create {}: {e}", log.display())))?;
    let launched: chrono::DateTime<chrono::Utc> =
        get(&client.query_one(&bq.clock_now, &[]).await?, "now")?;
    let mut cmd = command(schema);
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .map_err(|e| Error::config_from("cannot start the relay process", e))?;
    let mut running = Running { child, log };
    // Ids start at 1 in a fresh schema: the first unsettled id is about
    // how many are done.
    let watched = wait_until_settled_or(&client, &bq, |from| {
        done.store(
            from.saturating_sub(1).max(0) as u64,
            std::sync::atomic::Ordering::Relaxed,
        );
        match running.child.try_wait() {
            Ok(Some(status)) => Err(Error::Check(format!(
                "the relay process exited ({status}) before the backlog was sent:\n{}",
                running.log_tail()
            ))),
            _ => Ok(()),
        }
    })
    .await;
    watched?;
    let last: Option<chrono::DateTime<chrono::Utc>> = get(
        &client.query_one(&bq.last_sent_at, &[]).await?,
        "last_sent_at",
    )?;
    drop(running);
    let last = last.ok_or_else(|| Error::Check("the relay process sent nothing".into()))?;
    let elapsed = (last - launched)
        .to_std()
        .unwrap_or(Duration::ZERO)
        .max(Duration::from_micros(1));
    check_drained(pool, schema, algorithm, spec.messages as i64).await?;
    Ok(DrainResult {
        algorithm,
        messages: spec.messages,
        elapsed,
    })
}

/// Bytes of `messages` (heap, TOAST, every index) per pending message,
/// with the backlog of `spec` preloaded in a fresh schema (dropped
/// afterwards). The hot table is the same whatever the ordering mode:
/// ordering (migration 7) adds no column and no index to it.
pub async fn hot_table_bytes_per_message(pool: &Pool, spec: &DrainSpec) -> Result<f64> {
    let schema = fresh_schema()?;
    let result = async {
        prepare(pool, &schema, Algorithm::Relay, spec).await?;
        let bq = BenchQueries::new(&schema);
        let client = pool.get().await?;
        let bytes: i64 = get(
            &client.query_one(&bq.hot_table_total_bytes, &[]).await?,
            "bytes",
        )?;
        Ok(bytes as f64 / spec.messages.max(1) as f64)
    }
    .await;
    drop_schema(pool, &schema).await?;
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cases_are_chosen_by_key_and_an_unknown_one_is_refused() {
        let set = CaseSet::parse("lanes, delete_limit").unwrap();
        assert!(set.contains(Case::Lanes) && set.contains(Case::DeleteLimit));
        assert!(!set.contains(Case::Process));
        assert!(Case::ALL.iter().all(|c| CaseSet::default().contains(*c)));
        let e = CaseSet::parse("lanes,fast").unwrap_err();
        assert!(e.contains("\"fast\"") && e.contains("delete_limit"), "{e}");
    }

    #[test]
    fn a_ratio_divides_its_cases_run_by_run() {
        let rates = BTreeMap::from([
            ("spread_on", vec![90.0, 80.0]),
            ("spread_off", vec![100.0, 100.0]),
        ]);
        assert_eq!(RATIOS[0].per_run(&rates), vec![0.9, 0.8]);
    }

    #[test]
    fn every_ratio_compares_two_distinct_cases() {
        for r in &RATIOS {
            assert_ne!(r.over.0, r.over.1, "{}", r.key);
            assert!(Case::ALL.contains(&r.over.0) && Case::ALL.contains(&r.over.1));
        }
    }
}
