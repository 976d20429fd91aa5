//! nsqd-compatible `/pub`, `/mpub`, `/topic/*`, `/channel/*`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::routing::post;
use rustqueue_protocol::command::{decode_mpub_body, split_text_mpub};
use rustqueue_protocol::names::is_valid_name;

use super::{ApiError, ApiResult};
use crate::control::manage::Refusal;
use crate::http::info::engine_error;
use crate::state::Shared;

type Params = Query<HashMap<String, String>>;

pub(super) fn routes() -> Router<Arc<Shared>> {
    Router::new()
        .route("/pub", post(publish))
        .route("/mpub", post(mpublish))
        .route("/topic/{action}", post(topic_action))
        .route("/channel/{action}", post(channel_action))
}

fn bad(code: &'static str) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, code)
}

/// `topic` from the query, nsqd codes for the publish endpoints.
fn pub_topic(q: &HashMap<String, String>) -> ApiResult<String> {
    let t = q.get("topic").ok_or_else(|| bad("MISSING_ARG_TOPIC"))?;
    if !is_valid_name(t) {
        return Err(bad("INVALID_TOPIC"));
    }
    Ok(t.clone())
}

fn defer(q: &HashMap<String, String>, shared: &Shared) -> ApiResult<Option<Duration>> {
    let Some(raw) = q.get("defer") else {
        return Ok(None);
    };
    let ms: i64 = raw.parse().map_err(|_| bad("INVALID_DEFER"))?;
    if ms < 0 || ms as u64 > shared.cfg.queue.max_defer_ms {
        return Err(bad("INVALID_DEFER"));
    }
    Ok((ms > 0).then(|| Duration::from_millis(ms as u64)))
}

/// A management fence's refusal: 409 `E_TOPIC_TOMBSTONED` / `E_CHANNEL_TOMBSTONED`, or 503
/// `E_MANAGEMENT_UNAVAILABLE` before the first fence sync.
fn fenced(r: Refusal) -> ApiError {
    let status = match r {
        Refusal::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        Refusal::TopicTombstoned | Refusal::ChannelTombstoned => StatusCode::CONFLICT,
    };
    ApiError::new(status, r.code())
}

/// nsqd's admin routes under the fences: create is refused while fenced, and every action
/// while fences are not synced yet.
fn admin_fences(
    shared: &Shared,
    action: &str,
    topic: &str,
    channel: Option<&str>,
) -> ApiResult<()> {
    let f = &shared.control.fences;
    if !f.ready() {
        return Err(fenced(Refusal::Unavailable));
    }
    if action == "create" {
        match channel {
            Some(c) => f.check_channel(topic, c),
            None => f.check_topic(topic),
        }
        .map_err(fenced)?;
    }
    Ok(())
}

fn too_big(code: &'static str) -> ApiError {
    ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, code)
}

fn declared_len(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .parse()
        .ok()
}

async fn commit(
    shared: &Shared,
    topic: &str,
    bodies: Vec<Bytes>,
    defer: Option<Duration>,
) -> ApiResult<&'static str> {
    if *shared.shutdown.borrow() {
        return Err(ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "EXITING"));
    }
    if shared.control.is_draining() {
        return Err(ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "E_DRAINING"));
    }
    shared.control.fences.check_topic(topic).map_err(fenced)?;
    shared
        .engine
        .publish(topic, bodies, defer)
        .await
        .map_err(|e| {
            let p = crate::tcp::errors::publish(&e, "PUB");
            match p.code {
                rustqueue_protocol::ErrorCode::BadMessage => too_big("MSG_TOO_BIG"),
                rustqueue_protocol::ErrorCode::BadTopic => bad("INVALID_TOPIC"),
                rustqueue_protocol::ErrorCode::Throttled => {
                    ApiError::new(StatusCode::TOO_MANY_REQUESTS, "E_THROTTLED")
                }
                rustqueue_protocol::ErrorCode::PubRetry => {
                    ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "E_STORAGE")
                }
                _ => ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "INTERNAL_ERROR"),
            }
        })?;
    Ok("OK")
}

async fn publish(
    State(shared): State<Arc<Shared>>,
    Query(q): Params,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult<&'static str> {
    let max = shared.cfg.queue.max_message_bytes;
    if declared_len(&headers).is_some_and(|n| n > max) {
        return Err(too_big("MSG_TOO_BIG"));
    }
    let topic = pub_topic(&q)?;
    let defer = defer(&q, &shared)?;
    if body.len() as u64 > max {
        return Err(too_big("MSG_TOO_BIG"));
    }
    if body.is_empty() {
        return Err(bad("MSG_EMPTY"));
    }
    commit(&shared, &topic, vec![body], defer).await
}

async fn mpublish(
    State(shared): State<Arc<Shared>>,
    Query(q): Params,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult<&'static str> {
    if declared_len(&headers).is_some_and(|n| n > shared.cfg.limits.max_body_bytes) {
        return Err(too_big("BODY_TOO_BIG"));
    }
    let topic = pub_topic(&q)?;
    let defer = defer(&q, &shared)?;
    if body.len() as u64 > shared.cfg.limits.max_body_bytes {
        return Err(too_big("BODY_TOO_BIG"));
    }
    let max = shared.cfg.queue.max_message_bytes;
    // nsqd: any value of `binary` but "false"/"0", even an empty one, counts as true.
    let binary = q
        .get("binary")
        .is_some_and(|v| !matches!(v.as_str(), "false" | "0"));
    let bodies = if binary {
        decode_mpub_body(body, max).map_err(|e| {
            too_big(if e.code == rustqueue_protocol::ErrorCode::BadMessage {
                "BAD_MESSAGE"
            } else {
                "BAD_BODY"
            })
        })?
    } else {
        let msgs = split_text_mpub(&body);
        if msgs.iter().any(|m| m.len() as u64 > max) {
            return Err(too_big("MSG_TOO_BIG"));
        }
        msgs
    };
    if bodies.is_empty() {
        return Err(bad("MSG_EMPTY"));
    }
    commit(&shared, &topic, bodies, defer).await
}

fn admin_topic(q: &HashMap<String, String>) -> ApiResult<String> {
    let t = q.get("topic").ok_or_else(|| bad("MISSING_ARG_TOPIC"))?;
    if !is_valid_name(t) {
        return Err(bad("INVALID_ARG_TOPIC"));
    }
    Ok(t.clone())
}

fn admin_channel(q: &HashMap<String, String>) -> ApiResult<String> {
    let c = q.get("channel").ok_or_else(|| bad("MISSING_ARG_CHANNEL"))?;
    if !is_valid_name(c) {
        return Err(bad("INVALID_ARG_CHANNEL"));
    }
    Ok(c.clone())
}

async fn topic_action(
    State(shared): State<Arc<Shared>>,
    Path(action): Path<String>,
    Query(q): Params,
) -> ApiResult<&'static str> {
    let topic = admin_topic(&q)?;
    admin_fences(&shared, &action, &topic, None)?;
    let e = &shared.engine;
    let result = match action.as_str() {
        "create" => e.create_topic(&topic),
        "delete" => e.delete_topic(&topic).await,
        "empty" => e.empty_topic(&topic).await,
        "pause" => e.pause_topic(&topic, true).await,
        "unpause" => e.pause_topic(&topic, false).await,
        _ => return Err(ApiError::new(StatusCode::NOT_FOUND, "NOT_FOUND")),
    };
    result.map_err(|err| engine_error(&err))?;
    Ok("")
}

async fn channel_action(
    State(shared): State<Arc<Shared>>,
    Path(action): Path<String>,
    Query(q): Params,
) -> ApiResult<&'static str> {
    let topic = admin_topic(&q)?;
    let channel = admin_channel(&q)?;
    admin_fences(&shared, &action, &topic, Some(&channel))?;
    let e = &shared.engine;
    let result = match action.as_str() {
        "create" => e.create_channel(&topic, &channel),
        "delete" => e.delete_channel(&topic, &channel).await,
        "empty" => e.empty_channel(&topic, &channel).await,
        "pause" => e.pause_channel(&topic, &channel, true).await,
        "unpause" => e.pause_channel(&topic, &channel, false).await,
        _ => return Err(ApiError::new(StatusCode::NOT_FOUND, "NOT_FOUND")),
    };
    result.map_err(|err| engine_error(&err))?;
    Ok("")
}
