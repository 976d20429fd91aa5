//! The built-in tiny server image (`testbed/tiny:1`, i.e. `rustqueue-testbed serve`), used by
//! the self-test before the broker exists. It listens on `$POD_IP:8080` (or `--listen`) and
//! keeps data in `--data-dir`:
//!
//! - `GET /healthz` → `ok`; `GET /whoami` → the Pod name (`$POD_NAME`, else `$HOSTNAME`)
//! - `PUT /data/{key}` stores the body durably (write + fsync); `GET /data/{key}` reads it
//! - `GET /resolve/{name}` → the IPv4 addresses the Pod's resolver (its `/etc/resolv.conf`,
//!   search paths included) gives for `name`, sorted, one a line; 404 when it resolves nothing
//!
//! It exits cleanly on SIGTERM, printing `tiny: shutting down`.

use std::net::SocketAddr;
use std::path::PathBuf;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::get;

/// The image reference of the tiny server.
pub const TINY_IMAGE: &str = "testbed/tiny:1";
/// The port it listens on by default.
pub const TINY_PORT: u16 = 8080;

fn valid(key: &str) -> bool {
    !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

async fn put(State(dir): State<PathBuf>, Path(key): Path<String>, body: Bytes) -> StatusCode {
    if !valid(&key) {
        return StatusCode::BAD_REQUEST;
    }
    let res = tokio::task::spawn_blocking(move || -> std::io::Result<()> {
        use std::io::Write;
        let tmp = dir.join(format!(".{key}.tmp"));
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(&body)?;
        f.sync_all()?;
        std::fs::rename(&tmp, dir.join(&key))?;
        std::fs::File::open(&dir)?.sync_all()
    })
    .await;
    match res {
        Ok(Ok(())) => StatusCode::NO_CONTENT,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

async fn fetch(State(dir): State<PathBuf>, Path(key): Path<String>) -> Result<Vec<u8>, StatusCode> {
    if !valid(&key) {
        return Err(StatusCode::BAD_REQUEST);
    }
    tokio::fs::read(dir.join(key))
        .await
        .map_err(|_| StatusCode::NOT_FOUND)
}

async fn resolve(Path(name): Path<String>) -> Result<String, StatusCode> {
    let addrs = tokio::net::lookup_host((name.as_str(), 0))
        .await
        .map_err(|_| StatusCode::NOT_FOUND)?;
    let mut ips: Vec<String> = addrs
        .filter(|a| a.is_ipv4())
        .map(|a| a.ip().to_string())
        .collect();
    ips.sort();
    ips.dedup();
    if ips.is_empty() {
        return Err(StatusCode::NOT_FOUND);
    }
    Ok(ips.iter().map(|ip| format!("{ip}\n")).collect())
}

/// Serves until SIGTERM or SIGINT.
pub async fn serve(listen: SocketAddr, data_dir: PathBuf) -> std::io::Result<()> {
    std::fs::create_dir_all(&data_dir)?;
    let who = std::env::var("POD_NAME")
        .or_else(|_| std::env::var("HOSTNAME"))
        .unwrap_or_default();
    let app = Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/whoami", get(move || async move { who }))
        .route("/data/{key}", get(fetch).put(put))
        .route("/resolve/{name}", get(resolve))
        .with_state(data_dir);
    let listener = tokio::net::TcpListener::bind(listen).await?;
    println!("tiny: listening on {listen}");
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            let mut term =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                    .expect("SIGTERM handler");
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
            println!("tiny: shutting down");
        })
        .await
}
