//! Planning and applying one management action.
//!
//! [`plan`] looks at the broker before anything changes: it refuses what cannot be done (no
//! such topic, a fenced topic) and fixes what a replay must repeat exactly (the answer's
//! `changed`, the last position an `empty` covers). [`apply`] then acts, and is idempotent
//! given that plan: applied twice (a crash before the completion was recorded, then the
//! console's resend) it leaves the broker as applying it once would, and never touches a
//! message published after the first attempt.
//!
//! Order inside an action: delete fences before it deletes (so nothing recreates the topic in
//! between); create creates before it clears the fence (a create the topic limit refuses
//! leaves the fence in place, and a crash in between leaves the fence until the resend).

use rustqueue_api::contract::{ManageAction, ManageKind};
use rustqueue_engine::durable::crash_failpoint;
use rustqueue_engine::{ChannelStats, Engine, TopicStats};

use super::catalog::{Plan, Subject};
use super::error::{ManageError, engine};
use super::fences::{FenceFile, Fences, Refusal, channel_key};
use crate::control::drain::topic_stored;
use crate::control::stats::now_ms;

fn topic_stats(e: &Engine, topic: &str) -> Option<TopicStats> {
    e.stats(Some(topic), None)
        .topics
        .into_iter()
        .find(|t| t.name == topic)
}

fn channel_stats(t: &TopicStats, channel: &str) -> Option<ChannelStats> {
    t.channels.iter().find(|c| c.name == channel).cloned()
}

/// The fence this subject sets or clears: `(is topic fence, key)`.
fn fence_key(s: &Subject) -> (bool, String) {
    match (&s.kind, &s.channel) {
        (ManageKind::Channel, Some(c)) => (false, channel_key(&s.topic, c)),
        _ => (true, s.topic.clone()),
    }
}

fn fence_of(f: &FenceFile, s: &Subject) -> Option<u64> {
    let (topic, key) = fence_key(s);
    let map = if topic { &f.topics } else { &f.channels };
    map.get(&key).copied().filter(|u| *u > now_ms())
}

/// Decides whether `s` can be done and what a replay must repeat.
pub fn plan(e: &Engine, fences: &Fences, s: &Subject) -> Result<Plan, ManageError> {
    let topic = topic_stats(e, &s.topic);
    let fenced = fence_of(&fences.snapshot(), s);
    match s.kind {
        ManageKind::Topic => plan_topic(s, topic.as_ref(), fenced),
        ManageKind::Channel => {
            if s.action == ManageAction::Create && fences.check_topic(&s.topic).is_err() {
                return Err(ManageError::Fenced(Refusal::TopicTombstoned));
            }
            let channel = s.channel.as_deref().unwrap_or("");
            let ch = topic.as_ref().and_then(|t| channel_stats(t, channel));
            plan_channel(s, topic.as_ref(), ch.as_ref(), fenced)
        }
    }
}

fn plan_topic(
    s: &Subject,
    topic: Option<&TopicStats>,
    fenced: Option<u64>,
) -> Result<Plan, ManageError> {
    let exists = topic.is_some();
    let need = || topic.ok_or_else(|| ManageError::no_topic(&s.topic));
    let changed = match s.action {
        ManageAction::Create => !exists || fenced.is_some(),
        ManageAction::Pause => !need()?.paused,
        ManageAction::Unpause => need()?.paused,
        ManageAction::Empty => {
            let t = need()?;
            return Ok(Plan {
                changed: topic_stored(t) > 0,
                empty_through: Some(t.message_count),
            });
        }
        ManageAction::Delete => exists || fenced != s.tombstone_until_ms,
        ManageAction::Tombstone => fenced != s.tombstone_until_ms,
    };
    Ok(Plan {
        changed,
        empty_through: None,
    })
}

fn plan_channel(
    s: &Subject,
    topic: Option<&TopicStats>,
    ch: Option<&ChannelStats>,
    fenced: Option<u64>,
) -> Result<Plan, ManageError> {
    let channel = s.channel.as_deref().unwrap_or("");
    let need = || {
        let t = topic.ok_or_else(|| ManageError::no_topic(&s.topic))?;
        ch.map(|c| (t, c))
            .ok_or_else(|| ManageError::no_channel(&s.topic, channel))
    };
    let exists = ch.is_some();
    let changed = match s.action {
        ManageAction::Create => !exists || fenced.is_some(),
        ManageAction::Pause => !need()?.1.paused,
        ManageAction::Unpause => need()?.1.paused,
        ManageAction::Empty => {
            let (t, c) = need()?;
            return Ok(Plan {
                changed: c.depth + c.deferred_count + c.in_flight_count > 0,
                empty_through: Some(t.message_count),
            });
        }
        ManageAction::Delete => exists || fenced != s.tombstone_until_ms,
        ManageAction::Tombstone => fenced != s.tombstone_until_ms,
    };
    Ok(Plan {
        changed,
        empty_through: None,
    })
}

/// Sets (`Some(until)`) or clears (`None`) the subject's fence, durably, when it differs.
async fn fence_or_fail(fences: &Fences, s: &Subject, until: Option<u64>) -> EngineResult {
    let mut f = fences.snapshot();
    let (topic, key) = fence_key(s);
    let map = if topic {
        &mut f.topics
    } else {
        &mut f.channels
    };
    let before = map.get(&key).copied();
    match until {
        Some(u) => map.insert(key, u),
        None => map.remove(&key),
    };
    if before != until {
        fences.replace(f, "manage_fences_before_rename").await?;
    }
    crash_failpoint("manage_after_fence");
    Ok(())
}

/// Applies `s` by `plan` (idempotent; see the module docs).
pub async fn apply(
    e: &Engine,
    fences: &Fences,
    s: &Subject,
    plan: Plan,
) -> Result<(), ManageError> {
    let channel = s.channel.as_deref();
    let r = match (s.kind, channel) {
        (ManageKind::Channel, Some(c)) => apply_channel(e, fences, s, c, plan).await,
        _ => apply_topic(e, fences, s, plan).await,
    };
    match r {
        // Gone since it was planned (an nsqd admin route, or a replay after the delete of a
        // resend): there is nothing left to change.
        Err(rustqueue_engine::EngineError::TopicNotFound)
        | Err(rustqueue_engine::EngineError::ChannelNotFound) => Ok(()),
        Err(err) => Err(engine(err, &s.topic, channel)),
        Ok(()) => Ok(()),
    }
}

type EngineResult = Result<(), rustqueue_engine::EngineError>;

async fn apply_topic(e: &Engine, fences: &Fences, s: &Subject, plan: Plan) -> EngineResult {
    let t = s.topic.as_str();
    match s.action {
        ManageAction::Create => {
            e.create_topic(t)?;
            fence_or_fail(fences, s, None).await
        }
        ManageAction::Pause => e.pause_topic(t, true).await,
        ManageAction::Unpause => e.pause_topic(t, false).await,
        ManageAction::Empty => {
            e.empty_topic_through(t, plan.empty_through.unwrap_or(0))
                .await
        }
        ManageAction::Delete => {
            fence_or_fail(fences, s, s.tombstone_until_ms).await?;
            e.delete_topic(t).await
        }
        ManageAction::Tombstone => fence_or_fail(fences, s, s.tombstone_until_ms).await,
    }
}

async fn apply_channel(
    e: &Engine,
    fences: &Fences,
    s: &Subject,
    c: &str,
    plan: Plan,
) -> EngineResult {
    let t = s.topic.as_str();
    match s.action {
        ManageAction::Create => {
            e.create_channel(t, c)?;
            fence_or_fail(fences, s, None).await
        }
        ManageAction::Pause => e.pause_channel(t, c, true).await,
        ManageAction::Unpause => e.pause_channel(t, c, false).await,
        ManageAction::Empty => {
            e.empty_channel_through(t, c, plan.empty_through.unwrap_or(0))
                .await
        }
        ManageAction::Delete => {
            fence_or_fail(fences, s, s.tombstone_until_ms).await?;
            e.delete_channel(t, c).await
        }
        ManageAction::Tombstone => fence_or_fail(fences, s, s.tombstone_until_ms).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn subject(kind: ManageKind, action: ManageAction, until: Option<u64>) -> Subject {
        Subject {
            kind,
            action,
            topic: "t".into(),
            channel: (kind == ManageKind::Channel).then(|| "c".into()),
            tombstone_until_ms: until,
        }
    }

    fn topic(paused: bool, depth: u64) -> TopicStats {
        TopicStats {
            name: "t".into(),
            message_count: 9,
            paused,
            channels: vec![ChannelStats {
                name: "c".into(),
                depth,
                paused,
                ..ChannelStats::default()
            }],
            ..TopicStats::default()
        }
    }

    #[test]
    fn plans_say_whether_anything_changes_and_where_an_empty_stops() {
        use ManageAction::*;
        let (t, idle) = (topic(false, 4), topic(true, 0));
        let k = ManageKind::Topic;
        let changed = |s: &Subject, t: Option<&TopicStats>, fenced| {
            plan_topic(s, t, fenced).map(|p| p.changed).ok()
        };
        assert_eq!(changed(&subject(k, Create, None), None, None), Some(true));
        assert_eq!(
            changed(&subject(k, Create, None), Some(&t), None),
            Some(false)
        );
        assert_eq!(
            changed(&subject(k, Create, None), Some(&t), Some(5)),
            Some(true)
        );
        assert_eq!(
            changed(&subject(k, Pause, None), Some(&t), None),
            Some(true)
        );
        assert_eq!(
            changed(&subject(k, Pause, None), Some(&idle), None),
            Some(false)
        );
        assert_eq!(
            changed(&subject(k, Unpause, None), Some(&idle), None),
            Some(true)
        );
        assert_eq!(changed(&subject(k, Pause, None), None, None), None, "404");
        assert_eq!(
            changed(&subject(k, Delete, Some(7)), None, Some(7)),
            Some(false)
        );
        assert_eq!(
            changed(&subject(k, Tombstone, Some(8)), None, Some(7)),
            Some(true)
        );
        let empty = plan_topic(&subject(k, Empty, None), Some(&t), None).unwrap();
        assert_eq!(empty.empty_through, Some(9), "through the tail at planning");
        assert!(empty.changed);
        let c = ManageKind::Channel;
        let ch = |t: &TopicStats| t.channels.first().cloned();
        let plan = |s, t: &TopicStats| plan_channel(&s, Some(t), ch(t).as_ref(), None);
        assert!(!plan(subject(c, Empty, None), &idle).unwrap().changed);
        assert!(plan(subject(c, Empty, None), &t).unwrap().changed);
        assert!(plan(subject(c, Unpause, None), &idle).unwrap().changed);
        let missing = plan_channel(&subject(c, Pause, None), Some(&t), None, None);
        assert!(matches!(missing, Err(ManageError::BadChannel { .. })));
    }
}
