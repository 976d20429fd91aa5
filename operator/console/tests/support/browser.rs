//! A browser-like client of the console's management API, and the body-key check.

use reqwest::StatusCode;
use serde_json::{Value, json};

/// A same-origin client holding the session cookie and CSRF token after unlock.
pub struct Browser {
    url: String,
    http: reqwest::Client,
    /// `rustqueue_console_session=<id>`.
    pub cookie: Option<String>,
    /// The CSRF token.
    pub csrf: Option<String>,
}

impl Browser {
    /// A client of the console at `url`, locked.
    pub fn new(url: &str) -> Self {
        Browser {
            url: url.to_string(),
            http: rustqueue_api::http_client::client(),
            cookie: None,
            csrf: None,
        }
    }

    /// A POST with `Origin` = the console and a JSON body; returns status and JSON.
    pub async fn post(&self, path: &str, body: &Value) -> (StatusCode, Value) {
        self.post_with(path, body, &self.url, "application/json", true)
            .await
    }

    /// A POST with a chosen `Origin`, content type and whether to send cookie and CSRF.
    pub async fn post_with(
        &self,
        path: &str,
        body: &Value,
        origin: &str,
        content_type: &str,
        credentials: bool,
    ) -> (StatusCode, Value) {
        let mut req = self
            .http
            .post(format!("{}{path}", self.url))
            .header("Origin", origin)
            .header("Content-Type", content_type)
            .body(body.to_string());
        if credentials {
            if let Some(c) = &self.cookie {
                req = req.header("Cookie", c);
            }
            if let Some(t) = &self.csrf {
                req = req.header("X-RustQueue-CSRF", t);
            }
        }
        let r = req.send().await.unwrap();
        let status = r.status();
        let cookie = r
            .headers()
            .get("set-cookie")
            .map(|v| v.to_str().unwrap().to_string());
        let v: Value = r.json().await.unwrap_or(Value::Null);
        if let Some(c) = cookie {
            assert!(
                c.contains("HttpOnly")
                    && c.contains("SameSite=Strict")
                    && c.contains("Path=/api/v1/management"),
                "{c}"
            );
        }
        (status, v)
    }

    /// Unlocks with `<ns>/<queue>` and keeps the cookie and CSRF token.
    pub async fn unlock(&mut self) {
        let r = self
            .http
            .post(format!("{}/api/v1/management/unlock", self.url))
            .header("Origin", &self.url)
            .header("Content-Type", "application/json")
            .body(json!({"confirmation": "ns/q"}).to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        let cookie = r.headers()["set-cookie"].to_str().unwrap().to_string();
        self.cookie = Some(cookie.split(';').next().unwrap().to_string());
        let v: Value = r.json().await.unwrap();
        self.csrf = Some(v["csrf_token"].as_str().unwrap().to_string());
    }

    /// Preview then apply (with the typed confirmation when asked); returns the apply's
    /// status and body.
    pub async fn act(
        &self,
        kind: &str,
        action: &str,
        topic: &str,
        channel: Option<&str>,
    ) -> (StatusCode, Value) {
        let req = json!({"kind": kind, "action": action, "topic": topic, "channel": channel});
        let (status, preview) = self.post("/api/v1/management/preview", &req).await;
        if status != StatusCode::OK {
            return (status, preview);
        }
        let mut apply = req.clone();
        apply["action_token"] = preview["action_token"].clone();
        if preview["confirmation_required"] == true {
            apply["confirmation"] = json!(channel.unwrap_or(topic));
        }
        self.post("/api/v1/management/apply", &apply).await
    }
}

/// The first JSON path holding a `body` key, if any.
pub fn body_path(v: &Value, path: &str) -> Option<String> {
    match v {
        Value::Object(m) => m.iter().find_map(|(k, v)| {
            let p = format!("{path}.{k}");
            if k == "body" {
                Some(p)
            } else {
                body_path(v, &p)
            }
        }),
        Value::Array(a) => a
            .iter()
            .enumerate()
            .find_map(|(i, v)| body_path(v, &format!("{path}[{i}]"))),
        _ => None,
    }
}
