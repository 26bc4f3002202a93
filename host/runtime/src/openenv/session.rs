//! One instance's WebSocket session at the server's `/ws`: openenv-core's own clients speak
//! only this (its HTTP `/reset` and `/step` build a new env per request, so an episode
//! cannot span them). A frame out, one frame back: `observation`, `state` or `error`.

use serde_json::Value;
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;
use tungstenite::{Message, WebSocket};

/// Why a call got no reply to use.
#[derive(Debug)]
pub(crate) enum Failure {
    /// The connection: refused, timed out, closed, or a reply that is not a JSON object.
    Transport(String),
    /// An `error` frame: the server's code (`VALIDATION_ERROR`, `EXECUTION_ERROR`, …) and
    /// message. The session stays open.
    Server { code: String, message: String },
}

pub(crate) struct Session {
    socket: WebSocket<Deadlined>,
    /// How long a call may take in all, however the server paces its bytes.
    timeout: Duration,
}

/// The connection, each read given only what is left of the call's deadline: a server that
/// drips a reply a byte at a time, or pings forever, cannot stretch a call past
/// `timeout_s` (a per-read timeout restarts with every byte).
struct Deadlined {
    stream: TcpStream,
    deadline: Option<std::time::Instant>,
}

impl std::io::Read for Deadlined {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if let Some(deadline) = self.deadline {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return Err(std::io::ErrorKind::TimedOut.into());
            }
            self.stream.set_read_timeout(Some(left))?;
        }
        self.stream.read(buf)
    }
}

impl std::io::Write for Deadlined {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.stream.write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.stream.flush()
    }
}

impl Session {
    /// Connects to `ws_url` (`ws://host:port/…/ws`) within `timeout`, trying `retries` more
    /// times 0.2 s, 0.4 s, … apart.
    pub(crate) fn open(host: &str, port: u16, ws_url: &str, timeout: Duration, retries: u32) -> Result<Self, String> {
        let mut last = String::new();
        for attempt in 0..=retries {
            if attempt > 0 {
                std::thread::sleep(Duration::from_millis(200 << (attempt - 1).min(6)));
            }
            match Self::try_open(host, port, ws_url, timeout) {
                Ok(s) => return Ok(s),
                Err(e) => last = e,
            }
        }
        let tries = if retries == 0 { String::new() } else { format!(" ({} attempts)", retries + 1) };
        Err(format!("cannot open a session at {ws_url}{tries}: {last}"))
    }

    fn try_open(host: &str, port: u16, ws_url: &str, timeout: Duration) -> Result<Self, String> {
        let addrs: Vec<_> = (host, port).to_socket_addrs().map_err(|e| format!("resolving {host}: {e}"))?.collect();
        let mut last = format!("{host} resolves to no address");
        for addr in addrs {
            match TcpStream::connect_timeout(&addr, timeout) {
                Ok(stream) => {
                    stream.set_read_timeout(Some(timeout)).and_then(|()| stream.set_write_timeout(Some(timeout))).ok();
                    stream.set_nodelay(true).ok();
                    let deadlined = Deadlined { stream, deadline: Some(std::time::Instant::now() + timeout) };
                    return match tungstenite::client(ws_url, deadlined) {
                        Ok((socket, _)) => Ok(Session { socket, timeout }),
                        Err(tungstenite::HandshakeError::Failure(e)) => Err(format!("the WebSocket handshake: {e}")),
                        Err(tungstenite::HandshakeError::Interrupted(_)) => {
                            Err("the WebSocket handshake timed out".into())
                        }
                    };
                }
                Err(e) => last = e.to_string(),
            }
        }
        Err(last)
    }

    /// Sends `message` and reads the one frame that answers it.
    pub(crate) fn call(&mut self, message: &Value) -> Result<Value, Failure> {
        let transport = |e: tungstenite::Error| Failure::Transport(describe(e));
        self.socket.get_mut().deadline = Some(std::time::Instant::now() + self.timeout);
        self.socket.send(Message::text(message.to_string())).map_err(transport)?;
        loop {
            let frame = self.socket.read().map_err(transport)?;
            let text = match frame {
                Message::Text(t) => t,
                // tungstenite answers pings itself on the next read or write.
                Message::Ping(_) | Message::Pong(_) | Message::Frame(_) => continue,
                Message::Binary(_) => return Err(Failure::Transport("the server sent a binary frame".into())),
                Message::Close(c) => {
                    let why = c.map(|c| format!(" ({}: {})", c.code, c.reason)).unwrap_or_default();
                    return Err(Failure::Transport(format!("the server closed the session{why}")));
                }
            };
            let reply: Value = serde_json::from_str(text.as_str())
                .map_err(|e| Failure::Transport(format!("a reply that is not JSON ({e})")))?;
            if reply.get("type").and_then(Value::as_str) == Some("error") {
                let data = reply.get("data").cloned().unwrap_or(Value::Null);
                let field = |k: &str| data.get(k).and_then(Value::as_str).unwrap_or_default().to_string();
                let mut message = field("message");
                // A validation error's details say which field and why.
                if let Some(errors) = data.get("errors").and_then(Value::as_array) {
                    let details: Vec<String> =
                        errors.iter().filter_map(|e| e.get("msg").and_then(Value::as_str)).map(String::from).collect();
                    if !details.is_empty() {
                        message = format!("{message}: {}", details.join("; "));
                    }
                }
                return Err(Failure::Server { code: field("code"), message });
            }
            return Ok(reply);
        }
    }

    /// Ends the session the protocol's way, best effort: `close` (no reply), then the server
    /// closes the socket; its close frame is awaited briefly, so neither side sees the
    /// connection dropped (openenv-core logs a traceback per session otherwise).
    pub(crate) fn close(mut self) {
        if self.socket.send(Message::text(r#"{"type":"close"}"#)).is_err() {
            return;
        }
        self.socket.get_mut().deadline = Some(std::time::Instant::now() + Duration::from_secs(1));
        let until = std::time::Instant::now() + Duration::from_secs(1);
        while std::time::Instant::now() < until {
            match self.socket.read() {
                Ok(Message::Close(_)) | Err(_) => break,
                Ok(_) => {}
            }
        }
        let _ = self.socket.close(None);
        let _ = self.socket.flush();
    }
}

fn describe(e: tungstenite::Error) -> String {
    match e {
        tungstenite::Error::Io(io)
            if matches!(io.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) =>
        {
            "no whole reply within the timeout (timeout_s)".into()
        }
        tungstenite::Error::ConnectionClosed | tungstenite::Error::AlreadyClosed => {
            "the server closed the session".into()
        }
        tungstenite::Error::Io(io) => format!("the connection failed: {io}"),
        other => other.to_string(),
    }
}
