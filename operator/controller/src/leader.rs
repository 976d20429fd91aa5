//! Leader election on a `coordination.k8s.io/v1` Lease (20 s lease, renewed every 5 s).
//!
//! The decision is a pure function ([`decide`]) of the Lease as read, what this replica saw of
//! it before, and the local monotonic clock; [`run`] is the thin loop that reads and writes the
//! Lease and publishes leadership on a `watch` channel. A standby takes over only after the
//! holder's record (holder, resourceVersion, renewTime) stayed unchanged for a whole lease
//! duration on *its own* clock, so clock skew between replicas cannot cause two leaders.
//! Writes carry the resourceVersion read, so two candidates racing for one Lease cannot both
//! win (the loser gets 409 and stays standby).

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::PostParams;
use tokio::sync::watch;

/// Name of the Lease.
pub const LEASE_NAME: &str = "rustqueue-operator-leader";
/// How long a Lease is valid without renewal.
pub const LEASE_DURATION: Duration = Duration::from_secs(20);
/// How often the holder renews and a standby retries.
pub const RENEW_INTERVAL: Duration = Duration::from_secs(5);

/// The fields of a Lease record that change whenever its holder renews.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// `spec.holderIdentity`.
    pub holder: Option<String>,
    /// `metadata.resourceVersion`.
    pub resource_version: Option<String>,
    /// `spec.renewTime` as text.
    pub renew_time: Option<String>,
}

/// What this replica last saw of someone else's record, and when (its own clock).
#[derive(Debug, Clone)]
pub struct Seen {
    /// The record.
    pub record: Record,
    /// When it was first seen in this exact state.
    pub since: Instant,
}

/// The next step for this replica.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// No Lease: create one holding it.
    Create,
    /// We hold it: renew.
    Renew,
    /// Holder empty or expired by our clock: take it over.
    TakeOver,
    /// Someone else holds a live Lease.
    Standby,
}

/// Decide from the Lease as read (`None` when absent).
pub fn decide(
    me: &str,
    lease: Option<&Record>,
    seen: Option<&Seen>,
    now: Instant,
    duration: Duration,
) -> Decision {
    let Some(rec) = lease else {
        return Decision::Create;
    };
    match rec.holder.as_deref() {
        Some(h) if h == me => Decision::Renew,
        None | Some("") => Decision::TakeOver,
        Some(_) => match seen {
            Some(s) if s.record == *rec && now.duration_since(s.since) >= duration => {
                Decision::TakeOver
            }
            _ => Decision::Standby,
        },
    }
}

fn record(lease: &Lease) -> Record {
    let spec = lease.spec.clone().unwrap_or_default();
    Record {
        holder: spec.holder_identity,
        resource_version: lease.metadata.resource_version.clone(),
        renew_time: spec.renew_time.map(|t| format!("{:?}", t.0)),
    }
}

fn now_micro() -> MicroTime {
    MicroTime(k8s_openapi::jiff::Timestamp::now())
}

fn duration_secs() -> i32 {
    i32::try_from(LEASE_DURATION.as_secs()).unwrap_or(20)
}

/// One election round against the API server. Returns whether this replica leads afterwards.
async fn round(api: &Api<Lease>, me: &str, seen: &mut Option<Seen>) -> Result<bool, kube::Error> {
    let current = api.get_opt(LEASE_NAME).await?;
    let rec = current.as_ref().map(record);
    let now = Instant::now();
    let decision = decide(me, rec.as_ref(), seen.as_ref(), now, LEASE_DURATION);
    // Remember when we first saw this exact record.
    match (&rec, seen.as_ref()) {
        (Some(r), Some(s)) if s.record == *r => {}
        (Some(r), _) => {
            *seen = Some(Seen {
                record: r.clone(),
                since: now,
            })
        }
        (None, _) => *seen = None,
    }
    let pp = PostParams::default();
    let result = match decision {
        Decision::Standby => return Ok(false),
        Decision::Create => {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(LEASE_NAME.into()),
                    ..ObjectMeta::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(me.into()),
                    lease_duration_seconds: Some(duration_secs()),
                    acquire_time: Some(now_micro()),
                    renew_time: Some(now_micro()),
                    lease_transitions: Some(0),
                    ..LeaseSpec::default()
                }),
            };
            api.create(&pp, &lease).await.map(|_| ())
        }
        Decision::Renew | Decision::TakeOver => {
            let mut lease = current.expect("renew and takeover need a lease");
            let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
            if decision == Decision::TakeOver {
                spec.holder_identity = Some(me.into());
                spec.acquire_time = Some(now_micro());
                spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
            }
            spec.renew_time = Some(now_micro());
            spec.lease_duration_seconds = Some(duration_secs());
            // replace() sends the resourceVersion we read: a concurrent writer makes it 409.
            api.replace(LEASE_NAME, &pp, &lease).await.map(|_| ())
        }
    };
    match result {
        Ok(()) => Ok(true),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
        Err(e) => Err(e),
    }
}

/// Give the Lease up if this replica holds it (on shutdown), so a standby takes over at its
/// next round instead of after the lease duration. A 409 means someone else wrote it first:
/// nothing to release.
pub async fn release(api: &Api<Lease>, me: &str) -> Result<bool, kube::Error> {
    let Some(mut lease) = api.get_opt(LEASE_NAME).await? else {
        return Ok(false);
    };
    let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
    if spec.holder_identity.as_deref() != Some(me) {
        return Ok(false);
    }
    spec.holder_identity = None;
    spec.renew_time = Some(now_micro());
    match api
        .replace(LEASE_NAME, &PostParams::default(), &lease)
        .await
    {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
        Err(e) => Err(e),
    }
}

/// Campaign forever, publishing leadership on `tx`. Any error or slow round counts as lost
/// leadership (a leader that cannot renew must assume the standby takes over).
pub async fn run(api: Api<Lease>, me: String, tx: watch::Sender<bool>) {
    let mut seen = None;
    let mut ticker = tokio::time::interval(RENEW_INTERVAL);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let leading = match tokio::time::timeout(RENEW_INTERVAL, round(&api, &me, &mut seen)).await
        {
            Ok(Ok(l)) => l,
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "lease round failed");
                false
            }
            Err(_) => {
                tracing::warn!("lease round timed out");
                false
            }
        };
        tx.send_if_modified(|cur| {
            let changed = *cur != leading;
            if changed {
                tracing::info!(identity = %me, leading, "leadership changed");
            }
            *cur = leading;
            changed
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(holder: Option<&str>, rv: &str) -> Record {
        Record {
            holder: holder.map(str::to_string),
            resource_version: Some(rv.into()),
            renew_time: Some(format!("t{rv}")),
        }
    }

    #[test]
    fn election_decisions() {
        let t0 = Instant::now();
        let d = LEASE_DURATION;
        let other = rec(Some("b"), "1");
        let seen_at = |r: &Record, since: Instant| Seen {
            record: r.clone(),
            since,
        };
        type Case = (
            &'static str,
            Option<Record>,
            Option<Seen>,
            Instant,
            Decision,
        );
        let cases: Vec<Case> = vec![
            ("no lease", None, None, t0, Decision::Create),
            (
                "we hold it",
                Some(rec(Some("a"), "1")),
                None,
                t0,
                Decision::Renew,
            ),
            (
                "nobody holds it",
                Some(rec(None, "1")),
                None,
                t0,
                Decision::TakeOver,
            ),
            (
                "empty holder",
                Some(rec(Some(""), "1")),
                None,
                t0,
                Decision::TakeOver,
            ),
            (
                "first sight of another holder",
                Some(other.clone()),
                None,
                t0,
                Decision::Standby,
            ),
            (
                "unchanged for less than the duration",
                Some(other.clone()),
                Some(seen_at(&other, t0)),
                t0 + d - Duration::from_millis(1),
                Decision::Standby,
            ),
            (
                "unchanged for the whole duration: expired",
                Some(other.clone()),
                Some(seen_at(&other, t0)),
                t0 + d,
                Decision::TakeOver,
            ),
            (
                "holder renewed since: still alive",
                Some(rec(Some("b"), "2")),
                Some(seen_at(&other, t0)),
                t0 + d * 3,
                Decision::Standby,
            ),
        ];
        for (what, lease, seen, now, want) in cases {
            assert_eq!(
                decide("a", lease.as_ref(), seen.as_ref(), now, d),
                want,
                "{what}"
            );
        }
    }
}
