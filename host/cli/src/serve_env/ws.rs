//! `/ws`: openenv-core's session protocol. One instance per connection, made when it opens;
//! one reply frame per request frame (`close` gets none: the session ends). Errors are
//! `{"type": "error", "data": {"message", "code"}}` frames and leave the session open,
//! which openenv-core's client raises as `RuntimeError("Server error: … (code: …)")`.

use super::play::{Refusal, Slot};
use super::{Shared, on_slot};
use axum::extract::State;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::response::Response;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};

/// Frames past the largest request body by more than this end the session with close code
/// 1009 (tungstenite's check); an answer over `--max-action-kib` but under it gets an
/// `ACTION_TOO_LARGE` frame and the session goes on.
const FRAME_SLACK_BYTES: usize = 1 << 20;

pub async fn upgrade(State(s): State<Arc<Shared>>, ws: WebSocketUpgrade) -> Response {
    let cap = s.max_body + FRAME_SLACK_BYTES;
    ws.max_message_size(cap).max_frame_size(cap).on_upgrade(move |socket| session(s, socket))
}

async fn session(s: Arc<Shared>, mut socket: WebSocket) {
    let place = match s.admit() {
        Ok(p) => p,
        Err(r) => return refuse_and_close(socket, r).await,
    };
    let id = format!("ws-{:016x}", vagen_serve::fresh_seed());
    let shared = s.clone();
    let slot = match tokio::task::spawn_blocking(move || Slot::new(&shared.served, id)).await.expect("no panic") {
        Ok(slot) => Arc::new(Mutex::new(slot)),
        Err(r) => return refuse_and_close(socket, r).await,
    };
    loop {
        let frame = match tokio::time::timeout(s.idle, socket.recv()).await {
            Err(_) => {
                let message = format!("the session was idle for {} s (--idle-timeout-s)", s.idle.as_secs());
                refuse_and_close(
                    socket,
                    Refusal::new(axum::http::StatusCode::REQUEST_TIMEOUT, "SESSION_TIMEOUT", message),
                )
                .await;
                break;
            }
            Ok(Some(Err(e))) if is_too_big(&e) => {
                let reason = format!("a frame past {} bytes", s.max_body + FRAME_SLACK_BYTES);
                let _ = socket.send(Message::Close(Some(CloseFrame { code: 1009, reason: reason.into() }))).await;
                linger(&mut socket).await;
                break;
            }
            Ok(None) | Ok(Some(Err(_))) => break,
            Ok(Some(Ok(frame))) => frame,
        };
        let text = match frame {
            Message::Text(t) => t,
            Message::Close(_) => break,
            Message::Ping(_) | Message::Pong(_) => continue,
            Message::Binary(_) => {
                let r = Refusal::invalid("binary frames are not part of the protocol: send JSON text frames");
                if send(&mut socket, error_frame(r)).await.is_err() {
                    break;
                }
                continue;
            }
        };
        let reply = match serde_json::from_str::<Value>(text.as_str()) {
            Err(e) => error_frame(Refusal::new(
                axum::http::StatusCode::BAD_REQUEST,
                "INVALID_JSON",
                format!("Invalid JSON: {e}"),
            )),
            Ok(request) => match request.get("type").and_then(Value::as_str) {
                Some("close") => break,
                _ => match answer(&s, &slot, request).await {
                    Ok(v) => v,
                    Err(r) => error_frame(r),
                },
            },
        };
        if send(&mut socket, reply).await.is_err() {
            break;
        }
    }
    drop(place);
    // The instance is freed off the async threads.
    tokio::task::spawn_blocking(move || drop(slot));
}

/// The reply frame to one request frame.
async fn answer(s: &Arc<Shared>, slot: &Arc<Mutex<Slot>>, request: Value) -> Result<Value, Refusal> {
    let Value::Object(mut request) = request else {
        return Err(Refusal::invalid("a message is a JSON object {\"type\": …, \"data\": …}"));
    };
    let kind = request.remove("type").and_then(|t| t.as_str().map(String::from)).unwrap_or_default();
    let data = request.remove("data");
    if let Some(key) = request.keys().next() {
        return Err(Refusal::invalid(format!("a {kind} message has no field {key:?}")));
    }
    let shared = s.clone();
    match kind.as_str() {
        "reset" => {
            let args = match data {
                None | Some(Value::Null) => serde_json::Map::new(),
                Some(Value::Object(o)) => o,
                Some(other) => return Err(Refusal::invalid(format!("reset's data must be an object, not {other}"))),
            };
            let v = on_slot(slot.clone(), move |slot| slot.reset(&shared.served, &args)).await?;
            Ok(json!({"type": "observation", "data": v}))
        }
        "step" => {
            let action =
                data.ok_or_else(|| Refusal::invalid("a step message needs data: the action {\"answer\": TEXT}"))?;
            let v = on_slot(slot.clone(), move |slot| slot.step(&shared.served, &action)).await?;
            Ok(json!({"type": "observation", "data": v}))
        }
        "state" => {
            if data.is_some() {
                return Err(Refusal::invalid("a state message has no data"));
            }
            let v = on_slot(slot.clone(), Slot::state).await?;
            Ok(json!({"type": "state", "data": v}))
        }
        other => Err(Refusal::new(
            axum::http::StatusCode::BAD_REQUEST,
            "UNKNOWN_TYPE",
            format!("Unknown message type: {other} (reset, step, state and close are)"),
        )),
    }
}

fn error_frame(r: Refusal) -> Value {
    json!({"type": "error", "data": {"message": r.message, "code": r.code}})
}

async fn send(socket: &mut WebSocket, v: Value) -> Result<(), axum::Error> {
    socket.send(Message::text(v.to_string())).await
}

/// openenv-core's way to turn a session away: one error frame, then a normal close.
async fn refuse_and_close(mut socket: WebSocket, r: Refusal) {
    let _ = send(&mut socket, error_frame(r)).await;
    let _ = socket.send(Message::Close(Some(CloseFrame { code: 1000, reason: "".into() }))).await;
}

/// After a close sent mid-frame: reads (and drops) what the client still sends for up to two
/// seconds, or until it closes. Closing the socket with its oversized frame unread would make
/// the kernel reset the connection, and a client still sending would lose the close frame
/// (and its code) with it.
async fn linger(socket: &mut WebSocket) {
    let until = tokio::time::Instant::now() + std::time::Duration::from_secs(2);
    while let Ok(Some(read)) = tokio::time::timeout_at(until, socket.recv()).await {
        if read.is_err() {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }
}

/// tungstenite's refusal of a frame or message over the cap (its `Capacity` error, which
/// axum passes on as text).
fn is_too_big(e: &axum::Error) -> bool {
    let text = e.to_string();
    text.contains("Space limit exceeded") || text.contains("too long") || text.contains("too big")
}
