//! The HTTP API: nsqlookupd v1.3.0's read routes, answered the way nsqlookupd answers them,
//! plus the native routes. One dispatcher instead of a router so that unknown paths, wrong
//! methods and trailing slashes get nsqlookupd's answers (its router is httprouter):
//!
//! - JSON routes always answer the bare body (no `status_code`/`data` envelope) with
//!   `Content-Type: application/json; charset=utf-8` and `X-NSQ-Content-Type: nsq; version=1.0`,
//!   whether or not the request sent `Accept: application/vnd.nsq; version=1.0` (v1.3.0 ignores
//!   the header; the envelope was removed in v1.0).
//! - Errors are `{"message":"<CODE>"}`: 404 `NOT_FOUND`, 405 `METHOD_NOT_ALLOWED`,
//!   400 `INVALID_REQUEST` / `MISSING_ARG_TOPIC`, 404 `TOPIC_NOT_FOUND`, 414 `URI_TOO_LONG`,
//!   and 503 `discovery source is not ready` (plus a `reason`) while the source is stale
//!   (fail closed).
//! - `/ping` is plain `OK`.
//! - `POST /channel/delete` is 404 `E_NOT_FOUND Kodo cleanup compatibility is disabled` in both
//!   modes ([`kodo::CLEANUP_DISABLED`]); in Kodo mode `/nodes` lists the gateway identities.

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::Response;
use serde::Serialize;
use serde_json::json;

use crate::query::{self, QueryError};
use crate::{Shared, kodo};
use rustqueue_protocol::lookup::Producer;

/// The `X-NSQ-Content-Type` value nsqlookupd sends on every JSON answer.
pub const NSQ_CONTENT_TYPE: &str = "nsq; version=1.0";
/// The message of every fail-closed 503.
pub const NOT_READY: &str = "discovery source is not ready";

/// The axum app.
pub fn router(shared: Arc<Shared>) -> Router {
    Router::new().fallback(dispatch).with_state(shared)
}

fn json_response(code: StatusCode, body: &impl Serialize) -> Response {
    let bytes = serde_json::to_vec(body).unwrap_or_else(|_| b"{}".to_vec());
    let mut r = Response::new(Body::from(bytes));
    *r.status_mut() = code;
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json; charset=utf-8"),
    );
    h.insert(
        "X-NSQ-Content-Type",
        HeaderValue::from_static(NSQ_CONTENT_TYPE),
    );
    r
}

fn error(code: StatusCode, message: &str) -> Response {
    json_response(code, &json!({ "message": message }))
}

fn text(code: StatusCode, body: String, content_type: &'static str) -> Response {
    let mut r = Response::new(Body::from(body));
    *r.status_mut() = code;
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}

/// Every route: path, method, and whether it is gated on a fresh source.
const ROUTES: &[(&str, Method, bool)] = &[
    ("/ping", Method::GET, false),
    ("/info", Method::GET, false),
    ("/lookup", Method::GET, true),
    ("/topics", Method::GET, true),
    ("/channels", Method::GET, true),
    ("/nodes", Method::GET, true),
    ("/v1/publishers", Method::GET, true),
    ("/v1/publishers/head", Method::GET, true),
    ("/v1/brokers", Method::GET, true),
    ("/v1/health", Method::GET, false),
    ("/metrics", Method::GET, false),
    ("/channel/delete", Method::POST, false),
];

async fn dispatch(State(shared): State<Arc<Shared>>, req: Request) -> Response {
    let path = req.uri().path().to_string();
    let raw_query = req.uri().query().unwrap_or("").to_string();
    answer(&shared, req.method(), &path, &raw_query)
}

/// Answer one request (separate from axum so tests and fuzzing can drive it directly).
pub fn answer(shared: &Shared, method: &Method, path: &str, raw_query: &str) -> Response {
    let response = route(shared, method, path, raw_query);
    // every answer to /nodes, errors included (a 503 while the source warms up)
    if path == "/nodes" {
        closing(response)
    } else {
        response
    }
}

fn route(shared: &Shared, method: &Method, path: &str, raw_query: &str) -> Response {
    let Some(&(route, ref want, gated)) = ROUTES.iter().find(|r| r.0 == path) else {
        return unknown(method, path, raw_query);
    };
    let allow = HeaderValue::from_static(if *want == Method::POST {
        "POST, OPTIONS"
    } else {
        "GET, OPTIONS"
    });
    if method == Method::OPTIONS {
        let mut r = Response::new(Body::empty());
        r.headers_mut().insert(header::ALLOW, allow);
        return r;
    }
    if method != want {
        let mut r = error(StatusCode::METHOD_NOT_ALLOWED, "METHOD_NOT_ALLOWED");
        r.headers_mut().insert(header::ALLOW, allow);
        return r;
    }
    if gated && let Err(reason) = shared.source_ready() {
        return json_response(
            StatusCode::SERVICE_UNAVAILABLE,
            &json!({ "message": NOT_READY, "reason": reason.to_string() }),
        );
    }
    let q = match query::parse(raw_query) {
        Ok(q) => q,
        Err(QueryError::TooLong) => return error(StatusCode::URI_TOO_LONG, "URI_TOO_LONG"),
        // nsqlookupd only parses the query on the routes that take arguments.
        Err(_) if matches!(route, "/lookup" | "/channels") => {
            return error(StatusCode::BAD_REQUEST, "INVALID_REQUEST");
        }
        Err(_) => query::Query::default(),
    };
    respond(shared, route, &q)
}

/// The answer of `route` (known, method checked, gate passed) to query `q`.
fn respond(shared: &Shared, route: &str, q: &query::Query) -> Response {
    match route {
        "/ping" => text(StatusCode::OK, "OK".into(), "text/plain; charset=utf-8"),
        "/info" => info(shared),
        "/lookup" => {
            let Some(topic) = q.get("topic") else {
                return error(StatusCode::BAD_REQUEST, "MISSING_ARG_TOPIC");
            };
            match shared.read().lookup(topic) {
                None => error(StatusCode::NOT_FOUND, "TOPIC_NOT_FOUND"),
                Some((channels, producers)) => json_response(
                    StatusCode::OK,
                    &json!({ "channels": channels, "producers": producers }),
                ),
            }
        }
        "/topics" => json_response(StatusCode::OK, &json!({ "topics": shared.read().topics() })),
        "/channels" => {
            let Some(topic) = q.get("topic") else {
                return error(StatusCode::BAD_REQUEST, "MISSING_ARG_TOPIC");
            };
            json_response(
                StatusCode::OK,
                &json!({ "channels": shared.read().channels(topic) }),
            )
        }
        "/nodes" => nodes(shared),
        "/v1/publishers" => {
            let ix = shared.read();
            json_response(
                StatusCode::OK,
                &json!({ "revision": ix.revision(), "producers": ix.publishers() }),
            )
        }
        "/v1/publishers/head" => {
            let ix = shared.read();
            json_response(
                StatusCode::OK,
                &json!({ "revision": ix.revision(), "broker_count": ix.publishers().len() }),
            )
        }
        "/v1/brokers" => {
            let ix = shared.read();
            json_response(
                StatusCode::OK,
                &json!({ "revision": ix.revision(), "producers": ix.brokers() }),
            )
        }
        "/v1/health" => health(shared),
        "/channel/delete" => error(StatusCode::NOT_FOUND, kodo::CLEANUP_DISABLED),
        "/metrics" => text(
            StatusCode::OK,
            shared.metrics.render(),
            "text/plain; version=0.0.4; charset=utf-8",
        ),
        _ => error(StatusCode::NOT_FOUND, "NOT_FOUND"),
    }
}

/// A path that is no route: a GET redirected to the route it names, else 404.
fn unknown(method: &Method, path: &str, raw_query: &str) -> Response {
    // httprouter's RedirectTrailingSlash and RedirectFixedPath: a GET of `/lookup/`,
    // `//lookup` or `/LOOKUP` is sent to `/lookup` (301, query kept). Only GET routes are
    // redirected; other methods on such paths are simply not found.
    if method == Method::GET
        && let Some(route) = fixed_path(path)
    {
        let loc = if raw_query.is_empty() {
            route.to_string()
        } else {
            format!("{route}?{raw_query}")
        };
        let mut r = Response::new(Body::empty());
        *r.status_mut() = StatusCode::MOVED_PERMANENTLY;
        if let Ok(v) = HeaderValue::from_str(&loc) {
            r.headers_mut().insert(header::LOCATION, v);
        }
        return r;
    }
    error(StatusCode::NOT_FOUND, "NOT_FOUND")
}

/// The route `path` names once cleaned (`//`, `.` and `..` resolved, a trailing slash dropped)
/// and compared without case, as httprouter's fixed-path redirect does.
fn fixed_path(path: &str) -> Option<&'static str> {
    let mut parts: Vec<&str> = Vec::new();
    for seg in path.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            s => parts.push(s),
        }
    }
    let cleaned = format!("/{}", parts.join("/"));
    ROUTES
        .iter()
        .find(|r| r.1 == Method::GET && r.0.eq_ignore_ascii_case(&cleaned))
        .map(|r| r.0)
}

fn info(shared: &Shared) -> Response {
    json_response(
        StatusCode::OK,
        &json!({
            "version": env!("CARGO_PKG_VERSION"),
            "broadcast_address": "rustqueue-discovery",
            "hostname": "rustqueue-discovery",
            "tcp_port": 0,
            "http_port": shared.http_port.load(std::sync::atomic::Ordering::Relaxed),
            "broker_count": shared.read().consume_ready_count(),
        }),
    )
}

/// `response` with `Connection: close`, so the client's next request opens a new connection.
/// `/nodes` answers differ by mode, and the operator switches the discovery Service from the
/// replicas of one mode to the other's atomically (docs/kodo.md); a producer polling `/nodes`
/// over a kept-alive connection would otherwise go on asking a replica of the old mode, which
/// lingers through the soak, and never see the switch.
fn closing(mut response: Response) -> Response {
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// `/nodes` entry: nsqlookupd's node shape plus `node_id`.
#[derive(Serialize)]
struct Node<'a> {
    #[serde(flatten)]
    producer: &'a Producer,
    tombstones: Vec<bool>,
    topics: Vec<String>,
}

/// Direct mode: the publish-ready brokers with their topics. Kodo mode: the three gateway
/// identities (no topics: they hold none), never the brokers.
fn nodes(shared: &Shared) -> Response {
    if let kodo::Mode::Kodo { gateway_address } = &shared.mode {
        let ids = kodo::gateway_identities(gateway_address);
        let nodes: Vec<Node<'_>> = ids
            .iter()
            .map(|p| Node {
                producer: p,
                tombstones: Vec::new(),
                topics: Vec::new(),
            })
            .collect();
        return json_response(StatusCode::OK, &json!({ "producers": nodes }));
    }
    let ix = shared.read();
    let nodes: Vec<Node<'_>> = ix
        .publishers()
        .iter()
        .map(|p| {
            let topics = ix.topics_of(p.node_id.unwrap_or_default());
            Node {
                producer: p,
                tombstones: vec![false; topics.len()],
                topics,
            }
        })
        .collect();
    json_response(StatusCode::OK, &json!({ "producers": nodes }))
}

fn health(shared: &Shared) -> Response {
    let count = shared.read().consume_ready_count();
    match shared.source_ready() {
        Ok(()) => json_response(
            StatusCode::OK,
            &json!({
                "status": "ready",
                "broker_count": count,
                "lookup_ready": shared.lookup_ready(),
            }),
        ),
        Err(reason) => json_response(
            StatusCode::SERVICE_UNAVAILABLE,
            &json!({
                "status": "source-unavailable",
                "reason": reason.to_string(),
                "broker_count": count,
                "lookup_ready": false,
            }),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::Broker;
    use proptest::prelude::*;

    fn shared_with_topic() -> Shared {
        let s = Shared::default();
        s.write().upsert(
            "127.0.0.1:4151",
            Broker {
                node_id: 1,
                revision: 1,
                broadcast_address: "127.0.0.1".into(),
                tcp_port: 4150,
                http_port: 4151,
                version: "0.1.0".into(),
                publish_ready: true,
                consume_ready: true,
                topics: [("t".to_string(), vec!["c".to_string()])].into(),
            },
        );
        s.record(Ok(()));
        s
    }

    async fn body(r: Response) -> (StatusCode, String) {
        let code = r.status();
        let b = axum::body::to_bytes(r.into_body(), 1 << 20).await.unwrap();
        (code, String::from_utf8(b.to_vec()).unwrap())
    }

    #[tokio::test]
    async fn nsqlookupd_answers() {
        let s = shared_with_topic();
        let r = answer(&s, &Method::GET, "/lookup", "topic=t");
        assert_eq!(r.headers()["X-NSQ-Content-Type"], NSQ_CONTENT_TYPE);
        assert_eq!(
            r.headers()["Content-Type"],
            "application/json; charset=utf-8"
        );
        let (code, b) = body(r).await;
        assert_eq!(code, 200);
        let v: serde_json::Value = serde_json::from_str(&b).unwrap();
        assert_eq!(v["channels"], json!(["c"]));
        assert_eq!(v["producers"][0]["broadcast_address"], "127.0.0.1");
        assert_eq!(v["producers"][0]["tcp_port"], 4150);
        let cases = [
            (
                Method::GET,
                "/lookup",
                "topic=nope",
                404,
                r#"{"message":"TOPIC_NOT_FOUND"}"#,
            ),
            (
                Method::GET,
                "/lookup",
                "",
                400,
                r#"{"message":"MISSING_ARG_TOPIC"}"#,
            ),
            (
                Method::GET,
                "/lookup",
                "topic=%zz",
                400,
                r#"{"message":"INVALID_REQUEST"}"#,
            ),
            (
                Method::GET,
                "/channels",
                "topic=a;b",
                400,
                r#"{"message":"INVALID_REQUEST"}"#,
            ),
            (Method::GET, "/nope", "", 404, r#"{"message":"NOT_FOUND"}"#),
            (
                Method::POST,
                "/lookup",
                "topic=t",
                405,
                r#"{"message":"METHOD_NOT_ALLOWED"}"#,
            ),
            (Method::GET, "/topics", "%zz", 200, r#"{"topics":["t"]}"#),
            (
                Method::GET,
                "/channels",
                "topic=t",
                200,
                r#"{"channels":["c"]}"#,
            ),
            (
                Method::GET,
                "/channels",
                "topic=x",
                200,
                r#"{"channels":[]}"#,
            ),
        ];
        for (m, p, q, code, want) in cases {
            let (c, b) = body(answer(&s, &m, p, q)).await;
            assert_eq!((c.as_u16(), b.as_str()), (code, want), "{m} {p}?{q}");
        }
        let (c, b) = body(answer(&s, &Method::GET, "/ping", "")).await;
        assert_eq!((c.as_u16(), b.as_str()), (200, "OK"));
        for p in ["/lookup/", "//lookup", "/LOOKUP", "/x/../lookup"] {
            let r = answer(&s, &Method::GET, p, "topic=t");
            assert_eq!(r.status(), 301, "{p}");
            assert_eq!(r.headers()["Location"], "/lookup?topic=t", "{p}");
        }
        assert_eq!(answer(&s, &Method::POST, "/lookup/", "").status(), 404);
        let long = format!("topic={}", "a".repeat(query::MAX_QUERY_BYTES));
        assert_eq!(answer(&s, &Method::GET, "/lookup", &long).status(), 414);
    }

    #[tokio::test]
    async fn stale_source_fails_closed() {
        let s = Shared::default();
        s.record(Err(crate::RefreshError::Source("broker down".into())));
        let (c, b) = body(answer(&s, &Method::GET, "/lookup", "topic=t")).await;
        assert_eq!(c, 503);
        let v: serde_json::Value = serde_json::from_str(&b).unwrap();
        assert_eq!(v["message"], NOT_READY);
        assert!(v["reason"].as_str().unwrap().contains("broker down"), "{b}");
        let (c, b) = body(answer(&s, &Method::GET, "/v1/health", "")).await;
        assert_eq!(c, 503);
        let v: serde_json::Value = serde_json::from_str(&b).unwrap();
        assert_eq!(v["status"], "source-unavailable");
        assert!(v["reason"].as_str().unwrap().contains("broker down"), "{b}");
        assert_eq!(answer(&s, &Method::GET, "/ping", "").status(), 200);
        assert_eq!(answer(&s, &Method::GET, "/metrics", "").status(), 200);
    }

    #[tokio::test]
    async fn native_routes_carry_the_revision() {
        let s = shared_with_topic();
        let (_, pubs) = body(answer(&s, &Method::GET, "/v1/publishers", "")).await;
        let (_, head) = body(answer(&s, &Method::GET, "/v1/publishers/head", "")).await;
        let pubs: serde_json::Value = serde_json::from_str(&pubs).unwrap();
        let head: serde_json::Value = serde_json::from_str(&head).unwrap();
        assert_eq!(pubs["revision"], head["revision"]);
        assert_eq!(head["broker_count"], 1);
        assert_eq!(pubs["producers"][0]["node_id"], 1);
        let (_, nodes) = body(answer(&s, &Method::GET, "/nodes", "")).await;
        let nodes: serde_json::Value = serde_json::from_str(&nodes).unwrap();
        assert_eq!(nodes["producers"][0]["topics"], json!(["t"]));
        assert_eq!(nodes["producers"][0]["tombstones"], json!([false]));
    }

    fn broker(node_id: u32, consume: bool) -> Broker {
        Broker {
            node_id,
            revision: 1,
            broadcast_address: format!("b{node_id}"),
            tcp_port: 4150,
            http_port: 4151,
            version: "0.1.0".into(),
            publish_ready: true,
            consume_ready: consume,
            topics: [("t".to_string(), vec!["c".to_string()])].into(),
        }
    }

    fn kodo_shared(nodes: &[(u32, bool)]) -> Shared {
        let s = Shared::with_mode(kodo::Mode::Kodo {
            gateway_address: "q-kodo-publish.ns.svc".into(),
        });
        for &(id, consume) in nodes {
            s.write()
                .upsert(&format!("b{id}:4151"), broker(id, consume));
        }
        s.record(Ok(()));
        s
    }

    async fn json_of(r: Response) -> (u16, serde_json::Value) {
        let (code, b) = body(r).await;
        (code.as_u16(), serde_json::from_str(&b).unwrap())
    }

    #[tokio::test]
    async fn nodes_answers_close_the_connection_so_a_mode_switch_reaches_pollers() {
        for s in [shared_with_topic(), kodo_shared(&[(1, true)])] {
            let r = answer(&s, &Method::GET, "/nodes", "");
            assert_eq!(r.headers()[header::CONNECTION], "close");
        }
        let r = answer(&shared_with_topic(), &Method::GET, "/lookup?topic=t", "");
        assert!(r.headers().get(header::CONNECTION).is_none(), "only /nodes");
    }

    #[tokio::test]
    async fn nodes_lists_brokers_in_direct_mode_and_gateways_in_kodo_mode() {
        let (code, direct) =
            json_of(answer(&shared_with_topic(), &Method::GET, "/nodes", "")).await;
        assert_eq!(code, 200);
        let ids: Vec<_> = direct["producers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| (p["node_id"].clone(), p["tcp_port"].clone()))
            .collect();
        assert_eq!(ids, vec![(json!(1), json!(4150))]);

        let s = kodo_shared(&[(1, true), (2, true), (3, true)]);
        let (code, v) = json_of(answer(&s, &Method::GET, "/nodes", "")).await;
        assert_eq!(code, 200);
        let h = "q-kodo-publish.ns.svc";
        let want: Vec<serde_json::Value> = [(4150, 4151), (4152, 4154), (4153, 4155)]
            .iter()
            .enumerate()
            .map(|(k, (tcp, http))| {
                json!({
                    "remote_address": format!("{h}:{tcp}"), "hostname": h,
                    "broadcast_address": h, "tcp_port": tcp, "http_port": http,
                    "version": env!("CARGO_PKG_VERSION"), "node_id": 1_000_000 + k,
                    "tombstones": [], "topics": [],
                })
            })
            .collect();
        assert_eq!(v["producers"], json!(want));
        // The same gateways whatever the brokers do: never a fallback to brokers.
        let none = kodo_shared(&[]);
        let (_, v) = json_of(answer(&none, &Method::GET, "/nodes", "")).await;
        assert_eq!(v["producers"], json!(want));
        // Everything else keeps listing the real brokers.
        let (_, l) = json_of(answer(&s, &Method::GET, "/lookup", "topic=t")).await;
        let nodes: Vec<_> = l["producers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["node_id"].as_u64().unwrap())
            .collect();
        assert_eq!(nodes, vec![1, 2, 3]);
        let (_, p) = json_of(answer(&s, &Method::GET, "/v1/publishers", "")).await;
        assert_eq!(p["producers"].as_array().unwrap().len(), 3);
        assert_eq!(p["producers"][0]["broadcast_address"], "b1");
        // Stale source: /nodes fails closed in Kodo mode too.
        let stale = Shared::with_mode(kodo::Mode::Kodo {
            gateway_address: h.into(),
        });
        assert_eq!(answer(&stale, &Method::GET, "/nodes", "").status(), 503);
    }

    #[tokio::test]
    async fn health_reports_lookup_ready_per_mode() {
        // (Kodo mode, brokers as (node id, consume-ready), want lookup_ready)
        type Case = (bool, &'static [(u32, bool)], bool);
        let cases: &[Case] = &[
            (false, &[(1, true)], true),
            (true, &[(1, true), (2, true), (3, true)], true),
            (true, &[(1, true), (2, true), (3, false)], false),
            (true, &[(1, true), (2, true)], false),
            (true, &[(1, true), (2, true), (4, true)], false),
            (true, &[(1, true), (2, true), (3, true), (4, true)], false),
        ];
        for &(kodo, nodes, want) in cases {
            let s = if kodo {
                kodo_shared(nodes)
            } else {
                let s = Shared::default();
                for &(id, c) in nodes {
                    s.write().upsert(&format!("b{id}:4151"), broker(id, c));
                }
                s.record(Ok(()));
                s
            };
            let (code, v) = json_of(answer(&s, &Method::GET, "/v1/health", "")).await;
            assert_eq!(code, 200, "{v}");
            assert_eq!(v["lookup_ready"], want, "kodo={kodo} {nodes:?}: {v}");
            assert_eq!(s.lookup_ready(), want);
        }
    }

    #[tokio::test]
    async fn channel_delete_is_refused_in_both_modes() {
        for s in [
            shared_with_topic(),
            kodo_shared(&[(1, true)]),
            Shared::default(),
        ] {
            let (code, v) = json_of(answer(
                &s,
                &Method::POST,
                "/channel/delete",
                "topic=t&channel=c",
            ))
            .await;
            assert_eq!(
                (code, v),
                (
                    404,
                    json!({"message": "E_NOT_FOUND Kodo cleanup compatibility is disabled"})
                )
            );
            let r = answer(&s, &Method::GET, "/channel/delete", "topic=t&channel=c");
            assert_eq!(r.status(), 405);
            assert_eq!(r.headers()["Allow"], "POST, OPTIONS");
            assert_eq!(
                answer(&s, &Method::GET, "/channel/delete/", "").status(),
                404
            );
        }
    }

    proptest! {
        #[test]
        fn any_path_and_query_gets_an_answer(p in "/[a-z/%.]{0,40}", q in ".{0,200}") {
            let s = shared_with_topic();
            for m in [Method::GET, Method::POST, Method::HEAD, Method::DELETE] {
                let r = answer(&s, &m, &p, &q);
                prop_assert!(r.status().as_u16() < 500, "{} {}?{} -> {}", m, p, q, r.status());
            }
        }
    }
}
