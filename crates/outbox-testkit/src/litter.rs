//! What a broker test makes on the machine's brokers (Redis keys, asynq
//! queues, NATS JetStream streams), removed when its [`Litter`] is dropped,
//! pass or fail, so no run leaves keys or streams for the next
//! (scripts/test.sh checks). The removal speaks each broker's protocol over
//! a plain blocking socket: a `Drop` may run inside or outside a runtime.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::Mutex;
use std::time::Duration;

/// Names registered during a test, removed on drop.
#[derive(Debug, Default)]
pub struct Litter {
    redis: Mutex<Vec<(String, String)>>,
    asynq: Mutex<Vec<(String, String)>>,
    nats: Mutex<Vec<String>>,
}

impl Litter {
    /// Keys matching `pattern` (a Redis glob) on the Redis at `url`.
    pub fn redis_keys(&self, url: &str, pattern: &str) {
        lock(&self.redis).push((url.to_owned(), pattern.to_owned()));
    }

    /// The asynq queue `queue` on the Redis at `url` (an `asynq://` or
    /// `redis://` URL): its keys and its entry in `asynq:queues`.
    pub fn asynq_queue(&self, url: &str, queue: &str) {
        lock(&self.asynq).push((url.to_owned(), queue.to_owned()));
    }

    /// The JetStream stream `name` on `NATS_URL` (default 127.0.0.1:4222).
    pub fn nats_stream(&self, name: &str) {
        lock(&self.nats).push(name.to_owned());
    }
}

impl Drop for Litter {
    fn drop(&mut self) {
        for (url, pattern) in lock(&self.redis).drain(..) {
            crate::report(
                &format!("Redis keys {pattern}"),
                redis_delete(&url, &pattern, None),
            );
        }
        for (url, queue) in lock(&self.asynq).drain(..) {
            crate::report(
                &format!("asynq queue {queue}"),
                redis_delete(&url, &format!("asynq:{{{queue}}}:*"), Some(&queue)),
            );
        }
        for name in lock(&self.nats).drain(..) {
            crate::report(&format!("NATS stream {name}"), nats_delete(&name));
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// `host:port` and the database number of a `redis://` or `asynq://` URL.
fn redis_address(url: &str) -> (String, String) {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let rest = rest.split('?').next().unwrap_or_default();
    let (authority, db) = rest.split_once('/').unwrap_or((rest, ""));
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = if host.contains(':') {
        host.to_owned()
    } else {
        format!("{host}:6379")
    };
    let db = if db.is_empty() { "0" } else { db };
    (host, db.to_owned())
}

/// Deletes the keys matching `pattern`, and removes `queue` from
/// `asynq:queues` when given.
fn redis_delete(url: &str, pattern: &str, queue: Option<&str>) -> Result<(), String> {
    let (addr, db) = redis_address(url);
    let mut r = Resp::connect(&addr).map_err(|e| format!("{addr}: {e}"))?;
    r.call(&["SELECT", &db])?;
    let mut cursor = "0".to_owned();
    loop {
        let reply = r.call(&["SCAN", &cursor, "MATCH", pattern, "COUNT", "1000"])?;
        let Reply::Array(mut parts) = reply else {
            return Err(format!("SCAN answered {reply:?}"));
        };
        let (Some(Reply::Array(keys)), Some(Reply::Bulk(next))) = (parts.pop(), parts.pop()) else {
            return Err("SCAN answered something else than [cursor, keys]".into());
        };
        let keys: Vec<String> = keys
            .into_iter()
            .filter_map(|k| match k {
                Reply::Bulk(k) => Some(k),
                _ => None,
            })
            .collect();
        if !keys.is_empty() {
            let mut del = vec!["DEL"];
            del.extend(keys.iter().map(String::as_str));
            r.call(&del)?;
        }
        cursor = next;
        if cursor == "0" {
            break;
        }
    }
    if let Some(q) = queue {
        r.call(&["SREM", "asynq:queues", q])?;
    }
    Ok(())
}

#[derive(Debug)]
enum Reply {
    Simple,
    Int,
    Bulk(String),
    Nil,
    Array(Vec<Reply>),
}

/// The little of RESP2 the cleanup needs.
struct Resp(BufReader<TcpStream>);

impl Resp {
    fn connect(addr: &str) -> std::io::Result<Self> {
        let s = TcpStream::connect(addr)?;
        s.set_read_timeout(Some(Duration::from_secs(10)))?;
        Ok(Self(BufReader::new(s)))
    }

    fn call(&mut self, args: &[&str]) -> Result<Reply, String> {
        let mut out = format!("*{}\r\n", args.len());
        for a in args {
            out.push_str(&format!("${}\r\n{a}\r\n", a.len()));
        }
        self.0
            .get_mut()
            .write_all(out.as_bytes())
            .map_err(|e| e.to_string())?;
        self.read()
    }

    fn read(&mut self) -> Result<Reply, String> {
        let mut line = String::new();
        self.0.read_line(&mut line).map_err(|e| e.to_string())?;
        let line = line.trim_end();
        let (kind, rest) = line.split_at(line.len().min(1));
        let n = || rest.parse::<i64>().map_err(|e| format!("{line:?}: {e}"));
        match kind {
            "+" => Ok(Reply::Simple),
            "-" => Err(format!("Redis said {rest}")),
            ":" => n().map(|_| Reply::Int),
            "$" if n()? < 0 => Ok(Reply::Nil),
            "$" => {
                let mut buf = vec![0; n()? as usize + 2];
                self.0.read_exact(&mut buf).map_err(|e| e.to_string())?;
                buf.truncate(buf.len() - 2);
                Ok(Reply::Bulk(String::from_utf8_lossy(&buf).into_owned()))
            }
            "*" if n()? < 0 => Ok(Reply::Nil),
            "*" => (0..n()?)
                .map(|_| self.read())
                .collect::<Result<_, _>>()
                .map(Reply::Array),
            _ => Err(format!("not RESP: {line:?}")),
        }
    }
}

/// Deletes a JetStream stream (a missing one is fine) through the
/// JetStream API, `$JS.API.STREAM.DELETE.<name>`, waiting for its answer.
fn nats_delete(name: &str) -> Result<(), String> {
    let url = std::env::var("NATS_URL").unwrap_or_else(|_| "nats://127.0.0.1:4222".to_owned());
    let addr = url.split_once("://").map_or(url.as_str(), |(_, a)| a);
    let s = TcpStream::connect(addr).map_err(|e| format!("{addr}: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| e.to_string())?;
    let mut r = BufReader::new(s);
    let mut line = String::new();
    r.read_line(&mut line).map_err(|e| e.to_string())?; // INFO
    let inbox = format!("_INBOX.litter.{:08x}", rand::random::<u32>());
    write!(
        r.get_mut(),
        "CONNECT {{\"verbose\":false,\"pedantic\":false}}\r\nSUB {inbox} 1\r\n\
         PUB $JS.API.STREAM.DELETE.{name} {inbox} 0\r\n\r\n"
    )
    .map_err(|e| e.to_string())?;
    loop {
        line.clear();
        r.read_line(&mut line).map_err(|e| e.to_string())?;
        if line.is_empty() {
            return Err("NATS closed the connection".into());
        }
        if line.starts_with("PING") {
            r.get_mut()
                .write_all(b"PONG\r\n")
                .map_err(|e| e.to_string())?;
        } else if line.starts_with("-ERR") {
            return Err(line.trim().to_owned());
        } else if let Some(head) = line.strip_prefix("MSG ") {
            let len: usize = head
                .split_whitespace()
                .last()
                .and_then(|n| n.parse().ok())
                .ok_or_else(|| format!("bad MSG line {line:?}"))?;
            let mut body = vec![0; len + 2];
            r.read_exact(&mut body).map_err(|e| e.to_string())?;
            let answer = String::from_utf8_lossy(&body[..len]).into_owned();
            // 10059: stream not found, already gone.
            return if answer.contains("\"success\":true") || answer.contains("10059") {
                Ok(())
            } else {
                Err(answer)
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::redis_address;

    #[test]
    fn redis_addresses_take_host_port_and_database() {
        assert_eq!(
            redis_address("redis://127.0.0.1:6380/2?stream_prefix=x"),
            ("127.0.0.1:6380".into(), "2".into())
        );
        assert_eq!(
            redis_address("asynq://u:p@h?queue=q"),
            ("h:6379".into(), "0".into())
        );
    }
}
