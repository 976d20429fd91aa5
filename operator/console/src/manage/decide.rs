//! The pure decision behind `preview` (and re-made by `apply`): may this action run now, on
//! which owners, bound to which subject, with what confirmation and impact. Every refusal of
//! docs/console.md's table is decided here, in the order listed there.

use rustqueue_api::contract::ManageKind;
use rustqueue_api::crd::{CatalogAction, CatalogOperation, CatalogPhase};
use serde::Serialize;

use super::catalog::Catalog;
use super::error::{ApiError, codes};
use super::request::{ActionRequest, UiAction};
use crate::snapshot::{BrokerView, ChannelView, Snapshot, TopicView};

/// What a decision reads.
pub struct View<'a> {
    /// The latest snapshot.
    pub snapshot: &'a Snapshot,
    /// The catalog objects (as fresh as the caller could list them).
    pub catalog: &'a Catalog,
    /// Wall clock, ms since the Unix epoch.
    pub now_ms: u64,
    /// Oldest acceptable snapshot age, ms.
    pub staleness_ms: u64,
}

/// Which object an action token is bound to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SubjectKind {
    /// A RustQueueTopic.
    Topic,
    /// A RustQueueChannel.
    Channel,
    /// No object yet: the RustQueue uid and the catalog's fence revision.
    Catalog,
}

/// The object (or catalog) a token is bound to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Subject {
    /// Kind.
    pub kind: SubjectKind,
    /// Object uid (RustQueue uid for the catalog).
    pub uid: String,
    /// resourceVersion (fence revision for the catalog).
    pub resource_version: String,
}

/// What the action would touch.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Impact {
    /// Broker Pods it runs on.
    pub owners: Vec<String>,
    /// Messages held there.
    pub stored_messages: u64,
    /// Ready backlog.
    pub depth: u64,
    /// In flight.
    pub in_flight: u64,
    /// Deferred.
    pub deferred: u64,
    /// Client connections of the owners.
    pub connections: u64,
    /// `topic_requires_channel`, `immediate_irreversible`.
    pub warnings: Vec<&'static str>,
}

/// An allowed action.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// The action to record (a retry's is the failed operation's).
    pub action: CatalogAction,
    /// The owners, in apply order.
    pub owners: Vec<String>,
    /// What the token is bound to.
    pub subject: Subject,
    /// The text the apply must carry (empty, delete, retry).
    pub confirmation: Option<String>,
    /// What it touches.
    pub impact: Impact,
}

/// Decides `req` on `view`.
pub fn decide(req: &ActionRequest, view: &View<'_>) -> Result<Decision, ApiError> {
    req.validate()?;
    fresh(view)?;
    let target = match req.kind {
        ManageKind::Topic => topic_target(req, view)?,
        ManageKind::Channel => channel_target(req, view)?,
    };
    let destructive = matches!(target.action, CatalogAction::Empty | CatalogAction::Delete);
    if destructive && target.owners.len() > 1 {
        return Err(ApiError::new(
            codes::MIGRATION_IN_PROGRESS,
            format!(
                "{} is held by {} brokers ({}); empty and delete need a single owner",
                req.topic,
                target.owners.len(),
                target.owners.join(", ")
            ),
        ));
    }
    owners_healthy(&target.owners, &view.snapshot.brokers)?;
    let confirmation = matches!(
        req.action,
        UiAction::Empty | UiAction::Delete | UiAction::Retry
    )
    .then(|| req.channel.clone().unwrap_or_else(|| req.topic.clone()));
    let mut impact = impact(view.snapshot, &target.owners, target.topic, target.channel);
    if req.kind == ManageKind::Topic && target.action == CatalogAction::Create {
        impact.warnings.push("topic_requires_channel");
    }
    if destructive {
        impact.warnings.push("immediate_irreversible");
    }
    Ok(Decision {
        action: target.action,
        owners: target.owners,
        subject: target.subject,
        confirmation,
        impact,
    })
}

/// The snapshot is young, complete, and the catalog and discovery answered.
pub fn fresh(view: &View<'_>) -> Result<(), ApiError> {
    let s = view.snapshot;
    let age = view.now_ms.saturating_sub(s.collected_at_ms);
    let why = if !s.management.enabled {
        Some("management is disabled".to_string())
    } else if age > view.staleness_ms {
        Some(format!("the snapshot is {age} ms old"))
    } else if !s.management.crd_fresh {
        Some("the catalog objects could not be listed".into())
    } else if !s.management.registry_available {
        Some("discovery is unavailable".into())
    } else if !s.complete {
        Some(format!(
            "the snapshot is incomplete: {}",
            s.errors.join("; ")
        ))
    } else {
        None
    };
    match why {
        Some(w) => Err(ApiError::new(codes::MANAGEMENT_UNAVAILABLE, w)),
        None => Ok(()),
    }
}

struct Target<'a> {
    action: CatalogAction,
    owners: Vec<String>,
    subject: Subject,
    topic: Option<&'a TopicView>,
    channel: Option<&'a ChannelView>,
}

fn catalog_subject(view: &View<'_>) -> Subject {
    Subject {
        kind: SubjectKind::Catalog,
        uid: view.snapshot.cluster.uid.clone(),
        resource_version: view.catalog.revision(),
    }
}

/// The subject of `req` now: its object, or the catalog when it has none.
pub fn subject_of(req: &ActionRequest, view: &View<'_>) -> Subject {
    let meta = match (req.kind, req.channel.as_deref()) {
        (ManageKind::Topic, _) => view
            .catalog
            .topic(&req.topic)
            .map(|t| (SubjectKind::Topic, &t.metadata)),
        (ManageKind::Channel, Some(c)) => view
            .catalog
            .channel(&req.topic, c)
            .map(|x| (SubjectKind::Channel, &x.metadata)),
        (ManageKind::Channel, None) => None,
    };
    meta.map_or_else(|| catalog_subject(view), |(k, m)| object_subject(k, m))
}

fn object_subject(
    kind: SubjectKind,
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> Subject {
    Subject {
        kind,
        uid: meta.uid.clone().unwrap_or_default(),
        resource_version: meta.resource_version.clone().unwrap_or_default(),
    }
}

/// The action a non-create request runs: its own, or (retry) the failed operation's.
fn existing_action(
    req: &ActionRequest,
    what: &str,
    phase: CatalogPhase,
    op: Option<&CatalogOperation>,
) -> Result<CatalogAction, ApiError> {
    match (req.action.catalog(), phase) {
        (None, CatalogPhase::Failed) => op.map(|o| o.action).ok_or_else(|| {
            ApiError::new(
                codes::RETRY_NOT_FAILED,
                format!("{what} has no failed operation to retry"),
            )
        }),
        (None, p) => Err(ApiError::new(
            codes::RETRY_NOT_FAILED,
            format!("{what} is {p:?}, not FAILED; only a failed operation can be retried"),
        )),
        (Some(_), CatalogPhase::Tombstoned) => Err(ApiError::new(
            codes::NOT_FOUND,
            format!("{what} is deleted"),
        )),
        (Some(a), CatalogPhase::Active) => Ok(a),
        (Some(_), p) => Err(ApiError::new(
            codes::OPERATION_IN_PROGRESS,
            format!("{what} is {p:?}: wait for its operation to finish (or retry it if FAILED)"),
        )),
    }
}

fn pending(phase: CatalogPhase) -> bool {
    matches!(
        phase,
        CatalogPhase::Preparing | CatalogPhase::Applying | CatalogPhase::Failed
    )
}

fn topic_target<'a>(req: &ActionRequest, view: &View<'a>) -> Result<Target<'a>, ApiError> {
    let what = format!("topic {:?}", req.topic);
    let tv = view.snapshot.topics.iter().find(|t| t.name == req.topic);
    let cr = view.catalog.topic(&req.topic);
    if req.action == UiAction::Create {
        return match cr {
            Some(t) if t.spec.phase != CatalogPhase::Tombstoned => Err(ApiError::new(
                codes::ALREADY_EXISTS,
                format!("{what} exists"),
            )),
            None if tv.is_some_and(|t| !t.owners.is_empty()) => Err(ApiError::new(
                codes::ALREADY_EXISTS,
                format!("{what} exists on a broker"),
            )),
            _ => Ok(Target {
                action: CatalogAction::Create,
                owners: vec![choose_owner(&view.snapshot.brokers)?],
                subject: cr.map_or_else(
                    || catalog_subject(view),
                    |t| object_subject(SubjectKind::Topic, &t.metadata),
                ),
                topic: None,
                channel: None,
            }),
        };
    }
    let cr =
        cr.ok_or_else(|| ApiError::new(codes::NOT_FOUND, format!("{what} is not in the catalog")))?;
    let action = existing_action(req, &what, cr.spec.phase, cr.spec.operation.as_ref())?;
    let busy =
        view.catalog.channels.iter().find(|c| {
            c.spec.topic == req.topic && pending(c.spec.phase) && c.spec.operation.is_some()
        });
    if let Some(c) = busy {
        return Err(ApiError::new(
            codes::CHANNEL_OPERATION_IN_PROGRESS,
            format!(
                "channel {:?} of {what} has an unfinished operation",
                c.spec.channel
            ),
        ));
    }
    Ok(Target {
        action,
        owners: owners_of(tv.map(|t| t.owners.as_slice()), &cr.spec.owners),
        subject: object_subject(SubjectKind::Topic, &cr.metadata),
        topic: tv,
        channel: None,
    })
}

/// The object's recorded owners (the collector keeps them in step with the brokers once
/// settled, and a finished operation sets them before the next snapshot can show them); the
/// observed ones only while nothing is recorded.
fn owners_of(observed: Option<&[String]>, recorded: &[String]) -> Vec<String> {
    let mut v = if recorded.is_empty() {
        observed.unwrap_or_default().to_vec()
    } else {
        recorded.to_vec()
    };
    v.sort();
    v
}

fn channel_target<'a>(req: &ActionRequest, view: &View<'a>) -> Result<Target<'a>, ApiError> {
    let channel = req.channel.clone().unwrap_or_default();
    let what = format!("channel {:?} of topic {:?}", channel, req.topic);
    let parent = view.catalog.topic(&req.topic).ok_or_else(|| {
        ApiError::new(
            codes::NOT_FOUND,
            format!("topic {:?} is not in the catalog", req.topic),
        )
    })?;
    if parent.spec.phase != CatalogPhase::Active {
        return Err(ApiError::new(
            codes::TOPIC_OPERATION_IN_PROGRESS,
            format!(
                "topic {:?} is {:?}, not ACTIVE",
                req.topic, parent.spec.phase
            ),
        ));
    }
    let tv = view.snapshot.topics.iter().find(|t| t.name == req.topic);
    let cv = tv.and_then(|t| t.channels.iter().find(|c| c.name == channel));
    let cr = view.catalog.channel(&req.topic, &channel);
    if cv.is_some_and(|c| c.ephemeral) || cr.is_some_and(|c| c.spec.ephemeral) {
        return Err(ApiError::new(
            codes::EPHEMERAL_UNMANAGED,
            format!("{what} is ephemeral"),
        ));
    }
    if req.action == UiAction::Create {
        return match cr {
            Some(c) if c.spec.phase != CatalogPhase::Tombstoned => Err(ApiError::new(
                codes::ALREADY_EXISTS,
                format!("{what} exists"),
            )),
            None if cv.is_some_and(|c| !c.owners.is_empty()) => Err(ApiError::new(
                codes::ALREADY_EXISTS,
                format!("{what} exists on a broker"),
            )),
            _ => Ok(Target {
                action: CatalogAction::Create,
                owners: owners_of(tv.map(|t| t.owners.as_slice()), &parent.spec.owners),
                subject: cr.map_or_else(
                    || catalog_subject(view),
                    |c| object_subject(SubjectKind::Channel, &c.metadata),
                ),
                topic: tv,
                channel: None,
            }),
        };
    }
    let cr =
        cr.ok_or_else(|| ApiError::new(codes::NOT_FOUND, format!("{what} is not in the catalog")))?;
    let action = existing_action(req, &what, cr.spec.phase, cr.spec.operation.as_ref())?;
    Ok(Target {
        action,
        owners: owners_of(cv.map(|c| c.owners.as_slice()), &cr.spec.owners),
        subject: object_subject(SubjectKind::Channel, &cr.metadata),
        topic: tv,
        channel: cv,
    })
}

/// Every owner is healthy ([`BrokerView::healthy_owner`]).
pub fn owners_healthy(owners: &[String], brokers: &[BrokerView]) -> Result<(), ApiError> {
    if owners.is_empty() {
        return Err(ApiError::new(
            codes::OWNER_UNAVAILABLE,
            "no broker holds it",
        ));
    }
    for o in owners {
        let healthy = brokers.iter().any(|b| &b.name == o && b.healthy_owner());
        if !healthy {
            return Err(ApiError::new(
                codes::OWNER_UNAVAILABLE,
                format!(
                    "owner {o} is not healthy (Ready, observed, storage and disk healthy, fences synced, not draining)"
                ),
            ));
        }
    }
    Ok(())
}

/// The owner of a new topic: among healthy brokers without disk pressure and with more than
/// their minimum free bytes available, the one with the fewest topics, then the most free
/// disk, then the first name.
pub fn choose_owner(brokers: &[BrokerView]) -> Result<String, ApiError> {
    brokers
        .iter()
        .filter(|b| b.healthy_owner())
        .filter_map(|b| b.observation.as_ref().map(|o| (b, o)))
        .filter(|(_, o)| {
            !o.head.disk.pressure && o.head.disk.available_bytes > o.head.disk.min_free_bytes
        })
        .min_by(|(a, ao), (b, bo)| {
            ao.queue
                .topics
                .len()
                .cmp(&bo.queue.topics.len())
                .then(
                    bo.head
                        .disk
                        .available_bytes
                        .cmp(&ao.head.disk.available_bytes),
                )
                .then(a.name.cmp(&b.name))
        })
        .map(|(b, _)| b.name.clone())
        .ok_or_else(|| {
            ApiError::new(
                codes::OWNER_UNAVAILABLE,
                "no healthy broker without disk pressure can take a new topic",
            )
        })
}

fn impact(
    s: &Snapshot,
    owners: &[String],
    topic: Option<&TopicView>,
    channel: Option<&ChannelView>,
) -> Impact {
    let mut i = Impact {
        owners: owners.to_vec(),
        connections: s
            .brokers
            .iter()
            .filter(|b| owners.contains(&b.name))
            .filter_map(|b| b.observation.as_ref())
            .map(|o| o.head.runtime.tcp_connections)
            .sum(),
        ..Impact::default()
    };
    if let Some(t) = topic {
        i.stored_messages = t.stored_messages;
        let chans: Vec<&ChannelView> = match channel {
            Some(c) => vec![c],
            None => t.channels.iter().collect(),
        };
        for c in chans {
            i.depth += c.depth;
            i.in_flight += c.in_flight;
            i.deferred += c.deferred;
        }
    }
    i
}

#[cfg(test)]
mod tests;
