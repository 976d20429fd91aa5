//! A minimal NSQ V2 consumer: SUB, RDY, FIN. Enough to read messages back in a scenario.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const FRAME_RESPONSE: u32 = 0;
const FRAME_ERROR: u32 = 1;
const FRAME_MESSAGE: u32 = 2;

async fn frame(s: &mut TcpStream) -> std::io::Result<(u32, Vec<u8>)> {
    let size = s.read_u32().await?;
    let kind = s.read_u32().await?;
    let mut data = vec![0; size.saturating_sub(4) as usize];
    s.read_exact(&mut data).await?;
    Ok((kind, data))
}

/// Subscribe to `topic`/`channel` at `addr` and read `n` message bodies (FIN'ing each), or
/// fail after `limit`.
pub async fn consume(
    addr: &str,
    topic: &str,
    channel: &str,
    n: usize,
    limit: Duration,
) -> std::io::Result<Vec<Vec<u8>>> {
    tokio::time::timeout(limit, async {
        let mut s = TcpStream::connect(addr).await?;
        s.write_all(b"  V2").await?;
        s.write_all(format!("SUB {topic} {channel}\n").as_bytes()).await?;
        let (kind, data) = frame(&mut s).await?;
        if kind != FRAME_RESPONSE || data != b"OK" {
            return Err(std::io::Error::other(format!(
                "SUB refused: {}",
                String::from_utf8_lossy(&data)
            )));
        }
        s.write_all(format!("RDY {n}\n").as_bytes()).await?;
        let mut out = Vec::new();
        while out.len() < n {
            let (kind, data) = frame(&mut s).await?;
            match kind {
                FRAME_MESSAGE if data.len() >= 26 => {
                    let id = &data[10..26];
                    let mut fin = b"FIN ".to_vec();
                    fin.extend_from_slice(id);
                    fin.push(b'\n');
                    s.write_all(&fin).await?;
                    out.push(data[26..].to_vec());
                }
                FRAME_RESPONSE if data == b"_heartbeat_" => s.write_all(b"NOP\n").await?,
                FRAME_ERROR => {
                    return Err(std::io::Error::other(String::from_utf8_lossy(&data).to_string()));
                }
                _ => {}
            }
        }
        s.write_all(b"CLS\n").await?;
        Ok(out)
    })
    .await
    .map_err(|_| std::io::Error::other("timed out consuming"))?
}
