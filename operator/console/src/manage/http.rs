//! The management routes: `GET /api/v1/management` and `POST
//! /api/v1/management/{unlock,lock,preview,apply}`. Every write must be same-origin JSON;
//! preview, apply and lock need the session cookie and the `X-RustQueue-CSRF` header.

use std::net::SocketAddr;

use axum::body::Bytes;
use axum::extract::{ConnectInfo, FromRequestParts, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Json, Response};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::json;

use super::decide::{self, View};
use super::error::{ApiError, codes};
use super::request::ActionRequest;
use super::session::{CHALLENGE_TTL_MS, Challenge, random_token};
use super::{Manager, apply, audit};
use crate::http::App;

/// The session cookie.
pub const COOKIE: &str = "rustqueue_console_session";
/// The CSRF header.
pub const CSRF_HEADER: &str = "x-rustqueue-csrf";
const COOKIE_PATH: &str = "/api/v1/management";

/// Who is calling (for the audit log), and the headers the checks read.
pub struct Caller {
    /// Source IP.
    pub ip: String,
    /// User agent, at most 256 characters.
    pub user_agent: String,
    headers: HeaderMap,
}

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = std::convert::Infallible;
    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        let ip = parts
            .extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map(|c| c.0.ip().to_string())
            .unwrap_or_default();
        let user_agent = parts
            .headers
            .get(header::USER_AGENT)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .chars()
            .take(256)
            .collect();
        Ok(Caller {
            ip,
            user_agent,
            headers: parts.headers.clone(),
        })
    }
}

impl Caller {
    fn header(&self, name: impl header::AsHeaderName) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// `Origin` names the same host as `Host`, and the body is JSON.
    pub fn same_origin_json(&self) -> Result<(), ApiError> {
        let host = self.header(header::HOST).unwrap_or("");
        let origin_host = self
            .header(header::ORIGIN)
            .and_then(|o| o.split_once("://").map(|(_, h)| h.trim_end_matches('/')));
        if host.is_empty() || origin_host != Some(host) {
            return Err(ApiError::new(
                codes::ORIGIN,
                "the Origin header must name the console's own host",
            ));
        }
        let json = self
            .header(header::CONTENT_TYPE)
            .and_then(|c| c.split(';').next())
            .is_some_and(|c| c.trim().eq_ignore_ascii_case("application/json"));
        if !json {
            return Err(ApiError::new(
                codes::CONTENT_TYPE,
                "send the body as Content-Type: application/json",
            ));
        }
        Ok(())
    }

    /// The session cookie's value.
    pub fn session_id(&self) -> Option<String> {
        self.headers
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .filter_map(|kv| kv.trim().split_once('='))
            .find(|(k, _)| *k == COOKIE)
            .map(|(_, v)| v.to_string())
    }

    /// The session id if the cookie names an unexpired session and the CSRF header matches.
    pub fn authorize(&self, m: &Manager) -> Result<String, ApiError> {
        let locked = || {
            ApiError::new(
                codes::MANAGEMENT_LOCKED,
                "management is locked: unlock it, then send the session cookie and the X-RustQueue-CSRF header",
            )
        };
        let id = self.session_id().ok_or_else(locked)?;
        let csrf = self.header(CSRF_HEADER).ok_or_else(locked)?;
        m.sessions()
            .authorized(&id, csrf, crate::now_ms())
            .map(|_| ())
            .ok_or_else(locked)?;
        Ok(id)
    }
}

fn parse<T: DeserializeOwned>(body: &Bytes) -> Result<T, ApiError> {
    serde_json::from_slice(body)
        .map_err(|e| ApiError::new(codes::BAD_REQUEST, format!("the body does not parse: {e}")))
}

fn cookie(value: &str, max_age: u64) -> HeaderValue {
    let c = format!(
        "{COOKIE}={value}; HttpOnly; SameSite=Strict; Path={COOKIE_PATH}; Max-Age={max_age}"
    );
    HeaderValue::from_str(&c).unwrap_or_else(|_| HeaderValue::from_static(""))
}

/// `GET /api/v1/management`.
pub async fn status(State(app): State<App>, caller: Caller) -> Json<serde_json::Value> {
    let m = &app.manager;
    let session = caller
        .session_id()
        .and_then(|id| m.sessions().get(&id, crate::now_ms()).cloned());
    Json(json!({
        "enabled": app.config.management_enabled,
        "unlocked": session.is_some(),
        "expires_at_ms": session.as_ref().map(|s| s.expires_at_ms),
        "csrf_token": session.as_ref().map(|s| s.csrf.clone()),
        "confirmation": app.config.confirmation(),
    }))
}

#[derive(Deserialize)]
struct Unlock {
    confirmation: String,
}

/// `POST /api/v1/management/unlock {confirmation}`.
pub async fn unlock(State(app): State<App>, caller: Caller, body: Bytes) -> Response {
    let r = (|| {
        caller.same_origin_json()?;
        let u: Unlock = parse(&body)?;
        if u.confirmation != app.config.confirmation() {
            return Err(ApiError::new(
                codes::CONFIRMATION_MISMATCH,
                format!("type {} to unlock", app.config.confirmation()),
            ));
        }
        let ttl = app.config.unlock.as_secs();
        let (id, s) = app.manager.sessions().unlock(crate::now_ms(), ttl * 1000);
        Ok((id, s, ttl))
    })();
    audit::log(&caller, "management.unlock", result_text(&r));
    match r {
        Ok((id, s, ttl)) => (
            [(header::SET_COOKIE, cookie(&id, ttl))],
            Json(json!({"unlocked": true, "expires_at_ms": s.expires_at_ms, "csrf_token": s.csrf})),
        )
            .into_response(),
        Err(e) => e.into_response(),
    }
}

/// `POST /api/v1/management/lock`.
pub async fn lock(State(app): State<App>, caller: Caller) -> Response {
    let r = caller
        .same_origin_json()
        .and_then(|()| caller.authorize(&app.manager));
    audit::log(&caller, "management.lock", result_text(&r));
    match r {
        Ok(id) => {
            app.manager.sessions().lock(&id);
            (
                [(header::SET_COOKIE, cookie("", 0))],
                Json(json!({"unlocked": false})),
            )
                .into_response()
        }
        Err(e) => e.into_response(),
    }
}

/// `POST /api/v1/management/preview`.
pub async fn preview(State(app): State<App>, caller: Caller, body: Bytes) -> Response {
    let r = preview_inner(&app.manager, &caller, &body).await;
    let action =
        parse::<ActionRequest>(&body).map_or_else(|_| "preview".into(), |q| q.audit_action());
    audit::log(&caller, &format!("{action}.preview"), result_text(&r));
    match r {
        Ok(v) => Json(v).into_response(),
        Err(e) => e.into_response(),
    }
}

async fn preview_inner(
    m: &Manager,
    caller: &Caller,
    body: &Bytes,
) -> Result<serde_json::Value, ApiError> {
    caller.same_origin_json()?;
    let id = caller.authorize(m)?;
    let req: ActionRequest = parse(body)?;
    req.validate()?;
    let snapshot = m.shared.snapshot().ok_or_else(|| {
        ApiError::new(
            codes::MANAGEMENT_UNAVAILABLE,
            "no snapshot has been collected yet",
        )
    })?;
    let catalog = super::catalog::Catalog::list(m.store.as_ref())
        .await
        .map_err(|e| ApiError::new(codes::MANAGEMENT_UNAVAILABLE, e))?;
    let now = crate::now_ms();
    let d = decide::decide(
        &req,
        &View {
            snapshot: &snapshot,
            catalog: &catalog,
            now_ms: now,
            staleness_ms: m.staleness_ms(),
        },
    )?;
    let token = random_token();
    let expires_at_ms = now + CHALLENGE_TTL_MS;
    let mut sessions = m.sessions();
    let session = sessions
        .get(&id, now)
        .ok_or_else(|| ApiError::new(codes::MANAGEMENT_LOCKED, "the session expired"))?;
    session.add(Challenge {
        token: token.clone(),
        request: req.fingerprint(),
        owners: d.owners.clone(),
        subject: d.subject.clone(),
        confirmation: d.confirmation.clone(),
        expires_at_ms,
    });
    Ok(json!({
        "action_token": token,
        "expires_at_ms": expires_at_ms,
        "confirmation_required": d.confirmation.is_some(),
        "confirmation": d.confirmation,
        "subject": d.subject,
        "impact": d.impact,
    }))
}

/// `POST /api/v1/management/apply`.
pub async fn apply(State(app): State<App>, caller: Caller, body: Bytes) -> Response {
    let parsed = parse::<ActionRequest>(&body);
    let action = parsed
        .as_ref()
        .map_or_else(|_| "apply".into(), ActionRequest::audit_action);
    let r = async {
        caller.same_origin_json()?;
        let id = caller.authorize(&app.manager)?;
        let req = parsed.clone()?;
        apply::apply(&app.manager, &id, &req).await
    }
    .await;
    audit::log(&caller, &action, result_text(&r));
    match r {
        Ok(a) => {
            audit::accepted(&app.manager, &a).await;
            (StatusCode::ACCEPTED, Json(a.body())).into_response()
        }
        Err(e) => e.into_response(),
    }
}

fn result_text<T>(r: &Result<T, ApiError>) -> String {
    match r {
        Ok(_) => "ok".into(),
        Err(e) => e.code.to_string(),
    }
}
