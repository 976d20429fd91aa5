//! A scripted Kubernetes API behind a real `kube::Client` (controller-rs's approach, with a
//! store instead of a fixed sequence): kube builds every request as it would for an API
//! server; this answers from the objects a test put there, or with the failure it scripted,
//! and records each request so a test can say exactly which calls were made.
//!
//! Just enough of the API's behaviour for the operator: GET of an object (404 when absent),
//! list with equality label selectors, create (409 when it exists), server-side apply and
//! merge patch (a JSON merge into what is there), the status subresource, and delete (404
//! when absent, 409 on a UID precondition that does not hold).

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex, MutexGuard};

use http::{Request, Response};
use kube::client::Body;
use serde_json::{Value, json};

/// One request the client sent.
#[derive(Debug, Clone)]
pub struct Call {
    /// `GET`, `POST`, `PATCH`, `DELETE`.
    pub method: String,
    /// The request path, without the query.
    pub path: String,
    /// The decoded query parameters.
    pub query: BTreeMap<String, String>,
    /// The `Content-Type` header (empty when absent).
    pub content_type: String,
    /// The body as JSON (`Null` when empty).
    pub body: Value,
    /// What the path names.
    pub target: Target,
}

impl Call {
    /// `METHOD resource/name[/subresource]`, the name of a create taken from its body.
    pub fn summary(&self) -> String {
        let name = self
            .target
            .name
            .clone()
            .or_else(|| self.body["metadata"]["name"].as_str().map(str::to_string));
        let mut s = format!("{} {}", self.method, self.target.resource);
        if let Some(n) = name {
            s = format!("{s}/{n}");
        }
        if let Some(sub) = &self.target.subresource {
            s = format!("{s}/{sub}");
        }
        s
    }

    /// A server-side apply by `field_manager`, forcing ownership.
    pub fn is_forced_apply_by(&self, field_manager: &str) -> bool {
        self.method == "PATCH"
            && self.content_type == "application/apply-patch+yaml"
            && self.query.get("fieldManager").map(String::as_str) == Some(field_manager)
            && self.query.get("force").map(String::as_str) == Some("true")
    }
}

/// What a request path names: `/api/v1/...` or `/apis/<group>/<version>/...`, then
/// `namespaces/<ns>/` for a namespaced resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// API group (`""` for the core group).
    pub group: String,
    /// Namespace, for a namespaced resource.
    pub namespace: Option<String>,
    /// Resource (plural).
    pub resource: String,
    /// Object name; `None` for the collection.
    pub name: Option<String>,
    /// Subresource (`status`).
    pub subresource: Option<String>,
    /// The collection's path: the store key of an object is this, `/`, its name.
    pub collection: String,
}

impl Target {
    fn parse(path: &str) -> Self {
        let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        let (group, rest) = match segments.as_slice() {
            ["api", _version, rest @ ..] => ("", rest),
            ["apis", group, _version, rest @ ..] => (*group, rest),
            _ => panic!("not a Kubernetes API path: {path}"),
        };
        let (namespace, rest) = match rest {
            ["namespaces", ns, rest @ ..] if !rest.is_empty() => (Some(ns.to_string()), rest),
            _ => (None, rest),
        };
        let [resource, name_and_sub @ ..] = rest else {
            panic!("no resource in {path}");
        };
        let prefix_len = path.len() - name_and_sub.iter().map(|s| s.len() + 1).sum::<usize>();
        Self {
            group: group.to_string(),
            namespace,
            resource: resource.to_string(),
            name: name_and_sub.first().map(|s| s.to_string()),
            subresource: name_and_sub.get(1).map(|s| s.to_string()),
            collection: path[..prefix_len].to_string(),
        }
    }

    fn object_key(&self, name: &str) -> String {
        format!("{}/{name}", self.collection)
    }
}

#[derive(Default)]
struct State {
    objects: BTreeMap<String, Value>,
    failures: Vec<(String, String, u16)>,
    calls: Vec<Call>,
    next_uid: u64,
}

/// The scripted API; clones share it.
#[derive(Clone, Default)]
pub struct ScriptedApi {
    state: Arc<Mutex<State>>,
}

impl ScriptedApi {
    /// An API server that holds nothing yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// A kube client whose every request this API answers.
    pub fn client(&self) -> kube::Client {
        let api = self.clone();
        let service = tower::service_fn(move |req: Request<Body>| {
            let api = api.clone();
            async move { Ok::<_, Infallible>(api.answer(req).await) }
        });
        kube::Client::new(service, "default")
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .expect("a test thread panicked holding the API state")
    }

    /// Put an object, as typed `K`, where the API serves it (a UID is assigned if it has none).
    pub fn put<K>(&self, obj: &K)
    where
        K: kube::Resource<DynamicType = ()> + serde::Serialize,
    {
        let meta = obj.meta();
        let collection = K::url_path(&(), meta.namespace.as_deref());
        let name = meta.name.clone().expect("a named object");
        let mut value = serde_json::to_value(obj).expect("objects serialize");
        value["apiVersion"] = json!(K::api_version(&()));
        value["kind"] = json!(K::kind(&()));
        let mut st = self.state();
        stamp(&mut st, &mut value);
        st.objects.insert(format!("{collection}/{name}"), value);
    }

    /// The object at `path` (`/api/v1/namespaces/ns/secrets/q-auth`), as the API holds it.
    pub fn get(&self, path: &str) -> Option<Value> {
        self.state().objects.get(path).cloned()
    }

    /// The paths of the objects under `prefix`.
    pub fn paths_under(&self, prefix: &str) -> Vec<String> {
        let st = self.state();
        st.objects
            .keys()
            .filter(|k| k.starts_with(prefix))
            .cloned()
            .collect()
    }

    /// Change the object at `path` as another controller would (its status, say).
    pub fn edit(&self, path: &str, f: impl FnOnce(&mut Value)) {
        let mut st = self.state();
        let mut obj = st.objects.get(path).cloned().expect("the object exists");
        f(&mut obj);
        stamp(&mut st, &mut obj);
        st.objects.insert(path.to_string(), obj);
    }

    /// Answer every `method` request on `path` (an object's path, or `<path>/status`) with a
    /// failure Status of `code`.
    pub fn fail(&self, method: &str, path: &str, code: u16) {
        self.state()
            .failures
            .push((method.to_string(), path.to_string(), code));
    }

    /// Every request so far, in order.
    pub fn calls(&self) -> Vec<Call> {
        self.state().calls.clone()
    }

    /// [`Call::summary`] of every request that is not a read, in order.
    pub fn writes(&self) -> Vec<String> {
        self.calls()
            .iter()
            .filter(|c| c.method != "GET")
            .map(Call::summary)
            .collect()
    }

    /// Forget the requests so far (the objects stay).
    pub fn clear_calls(&self) {
        self.state().calls.clear();
    }

    async fn answer(&self, req: Request<Body>) -> Response<Body> {
        let (parts, body) = req.into_parts();
        let bytes = body
            .collect_bytes()
            .await
            .expect("request bodies are in memory");
        let call = Call {
            method: parts.method.to_string(),
            path: parts.uri.path().to_string(),
            query: parts.uri.query().map(decode_query).unwrap_or_default(),
            content_type: parts
                .headers
                .get(http::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_string(),
            body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
            target: Target::parse(parts.uri.path()),
        };
        let mut st = self.state();
        st.calls.push(call.clone());
        let (code, value) = match st
            .failures
            .iter()
            .find(|(m, p, _)| *m == call.method && *p == call.path)
        {
            Some((_, _, code)) => failure(*code, "scripted failure"),
            None => respond(&mut st, &call),
        };
        Response::builder()
            .status(code)
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(Body::from(serde_json::to_vec(&value).expect("JSON")))
            .expect("a valid response")
    }
}

fn respond(st: &mut State, call: &Call) -> (u16, Value) {
    let t = &call.target;
    let key = t.name.as_deref().map(|n| t.object_key(n));
    match (call.method.as_str(), key) {
        ("GET", None) => (200, list(st, t, call.query.get("labelSelector"))),
        ("GET", Some(key)) => found(st.objects.get(&key).cloned()),
        ("POST", None) => create(st, t, call.body.clone()),
        ("PATCH", Some(key)) => patch(st, call, &key),
        ("DELETE", Some(key)) => delete(st, &key, &call.body),
        (m, _) => panic!("the scripted API does not serve {m} {}", call.path),
    }
}

fn found(obj: Option<Value>) -> (u16, Value) {
    obj.map_or_else(|| failure(404, "not found"), |o| (200, o))
}

fn list(st: &State, t: &Target, selector: Option<&String>) -> Value {
    let items: Vec<Value> = st
        .objects
        .iter()
        .filter(|(k, _)| {
            k.strip_prefix(&t.collection)
                .and_then(|rest| rest.strip_prefix('/'))
                .is_some_and(|name| !name.contains('/'))
        })
        .filter(|(_, o)| selector.is_none_or(|s| matches(s, &o["metadata"]["labels"])))
        .map(|(_, o)| o.clone())
        .collect();
    json!({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": "1"}, "items": items})
}

/// Equality-based selectors: `k=v`, `k==v`, `k!=v`, `k`, `!k`, joined by commas.
fn matches(selector: &str, labels: &Value) -> bool {
    selector.split(',').filter(|s| !s.is_empty()).all(|term| {
        let label = |k: &str| labels.get(k).and_then(Value::as_str);
        if let Some((k, v)) = term.split_once("!=") {
            label(k) != Some(v)
        } else if let Some((k, v)) = term.split_once('=') {
            label(k) == Some(v.trim_start_matches('='))
        } else if let Some(k) = term.strip_prefix('!') {
            label(k).is_none()
        } else {
            label(term).is_some()
        }
    })
}

fn create(st: &mut State, t: &Target, mut obj: Value) -> (u16, Value) {
    let name = match obj["metadata"]["name"].as_str() {
        Some(n) => n.to_string(),
        None => {
            let prefix = obj["metadata"]["generateName"].as_str().unwrap_or("x-");
            format!("{prefix}{}", st.next_uid)
        }
    };
    let key = t.object_key(&name);
    if st.objects.contains_key(&key) {
        return failure(409, "already exists");
    }
    obj["metadata"]["name"] = json!(name);
    stamp(st, &mut obj);
    st.objects.insert(key, obj.clone());
    (201, obj)
}

fn patch(st: &mut State, call: &Call, key: &str) -> (u16, Value) {
    let apply = call.content_type == "application/apply-patch+yaml";
    let mut obj = match st.objects.get(key) {
        Some(o) => o.clone(),
        None if apply && call.target.subresource.is_none() => json!({}),
        None => return failure(404, "not found"),
    };
    match call.target.subresource.as_deref() {
        Some("status") => obj["status"] = call.body["status"].clone(),
        Some(other) => panic!("the scripted API has no {other} subresource"),
        None => merge(&mut obj, &call.body),
    }
    stamp(st, &mut obj);
    st.objects.insert(key.to_string(), obj.clone());
    (200, obj)
}

fn delete(st: &mut State, key: &str, options: &Value) -> (u16, Value) {
    let Some(obj) = st.objects.get(key) else {
        return failure(404, "not found");
    };
    if let Some(uid) = options["preconditions"]["uid"].as_str()
        && obj["metadata"]["uid"].as_str() != Some(uid)
    {
        return failure(409, "precondition failed: UID");
    }
    found(st.objects.remove(key))
}

/// What the API server does to every object it stores: a UID for one that has none, a new
/// resourceVersion, and a Secret's `stringData` moved into `data`, base64-encoded.
fn stamp(st: &mut State, obj: &mut Value) {
    if let Some(Value::Object(strings)) = obj.as_object_mut().and_then(|o| o.remove("stringData")) {
        for (k, v) in strings {
            let bytes = v.as_str().unwrap_or_default().as_bytes().to_vec();
            obj["data"][k] = serde_json::to_value(k8s_openapi::ByteString(bytes)).expect("JSON");
        }
    }
    st.next_uid += 1;
    if obj["metadata"]["uid"].is_null() {
        obj["metadata"]["uid"] = json!(format!("uid-{}", st.next_uid));
    }
    obj["metadata"]["resourceVersion"] = json!(st.next_uid.to_string());
}

/// RFC 7386 JSON merge: objects merge key by key, `null` removes, anything else replaces.
fn merge(into: &mut Value, patch: &Value) {
    match (into, patch) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                if v.is_null() {
                    a.remove(k);
                } else {
                    merge(a.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        (slot, v) => *slot = v.clone(),
    }
}

fn failure(code: u16, message: &str) -> (u16, Value) {
    let reason = match code {
        404 => "NotFound",
        409 => "Conflict",
        403 => "Forbidden",
        429 => "TooManyRequests",
        _ => "InternalError",
    };
    let status = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code,
    });
    (code, status)
}

fn decode_query(q: &str) -> BTreeMap<String, String> {
    q.split('&')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (percent_decode(k), percent_decode(v)))
        .collect()
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (b, hex) {
            (b'%', Some(decoded)) => {
                out.push(decoded);
                i += 3;
            }
            (b'+', _) => {
                out.push(b' ');
                i += 1;
            }
            _ => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).expect("UTF-8 query")
}
