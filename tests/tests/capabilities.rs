//! What a guest can reach of the host. The hostile plugin's probes try, from inside
//! `reset`, to read a host file, read a host env var, connect over TCP, send over UDP and
//! look a name up, as ordinary std code does. Each attempt must fail in the guest, and
//! the host side must show that the target was real and stayed untouched (the file
//! readable by the host, no connection or datagram at the listener, the name resolvable
//! by the host), so a test passes only when the sandbox denied it.

use std::io::ErrorKind;
use std::net::{TcpListener, TcpStream, ToSocketAddrs, UdpSocket};
use std::process::Command;
use std::time::Duration;
use vagen_runtime::Limits;
use vagen_tests::load;

const SECRET: &str = "s3cret-only-the-host-may-see";
const SECRET_VAR: &str = "VAGEN_CAPABILITY_PROBE";

/// The observation a fresh hostile instance returns from `reset` in probe `mode`.
fn probe(mode: &str, target: &str) -> String {
    let (plugin, _cache) = load("hostile", Limits::default());
    let mut env = plugin.create(&format!(r#"{{"mode": "{mode}", "target": {target:?}}}"#)).unwrap();
    env.reset(0).unwrap().text
}

#[test]
fn a_guest_cannot_read_a_host_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("secret.txt");
    std::fs::write(&path, SECRET).unwrap();
    assert_eq!(std::fs::read_to_string(&path).unwrap(), SECRET, "the host reads it");
    let path = path.to_str().unwrap();
    let text = probe("read-file", path);
    assert!(!text.contains(SECRET), "{text}");
    // No preopen at all: not this folder, not `/`, not any other.
    assert!(text.starts_with("0 preopens []; "), "{text}");
    assert!(text.contains(&format!("read {path}: failed: ")), "{text}");
    assert!(text.contains("list /: failed: "), "{text}");
}

#[test]
fn a_guest_cannot_read_a_host_env_var() {
    let Ok(value) = std::env::var(SECRET_VAR) else {
        // Setting a variable in this multi-threaded process would race libc's readers
        // (getaddrinfo in the lookup test), so the test runs again in a child process
        // that has the variable from birth.
        let out = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "a_guest_cannot_read_a_host_env_var"])
            .env(SECRET_VAR, SECRET)
            .output()
            .unwrap();
        let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success() && stdout.contains("1 passed"), "{stdout}\n{stderr}");
        return;
    };
    assert_eq!(value, SECRET);
    let text = probe("read-env", SECRET_VAR);
    assert!(!text.contains(SECRET), "{text}");
    assert_eq!(text, format!("{SECRET_VAR}: failed: environment variable not found; 0 env vars; 0 args"));
}

#[test]
fn a_guest_cannot_connect_to_a_host_tcp_listener() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let text = probe("connect", &addr.to_string());
    assert!(text.starts_with(&format!("tcp connect {addr}: failed: ")), "{text}");
    // A loopback connection is queued by the time connect() returns, so a guest's would
    // be waiting now.
    listener.set_nonblocking(true).unwrap();
    let waiting = listener.accept().map(|(_, peer)| peer);
    assert!(matches!(waiting, Err(ref e) if e.kind() == ErrorKind::WouldBlock), "a connection came: {waiting:?}");
    // The listener does take connections: the host's own arrives.
    let own = TcpStream::connect(addr).unwrap();
    listener.set_nonblocking(false).unwrap();
    assert_eq!(listener.accept().unwrap().1, own.local_addr().unwrap());
}

#[test]
fn a_guest_cannot_send_udp_to_a_host_socket() {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = socket.local_addr().unwrap();
    let text = probe("send-udp", &addr.to_string());
    assert!(text.starts_with(&format!("udp send {addr}: failed: ")), "{text}");
    // Loopback delivery is synchronous: a guest datagram would be queued now.
    socket.set_nonblocking(true).unwrap();
    let mut buf = [0u8; 64];
    let got = socket.recv_from(&mut buf).map(|(n, peer)| (String::from_utf8_lossy(&buf[..n]).into_owned(), peer));
    assert!(matches!(got, Err(ref e) if e.kind() == ErrorKind::WouldBlock), "a datagram came: {got:?}");
    // The socket does receive: the host's own datagram arrives.
    UdpSocket::bind("127.0.0.1:0").unwrap().send_to(b"host", addr).unwrap();
    socket.set_nonblocking(false).unwrap();
    socket.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let n = socket.recv(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"host");
}

#[test]
fn a_guest_cannot_look_up_a_name() {
    // The host resolves it (from /etc/hosts, no network needed): only the guest is refused.
    assert!(("localhost", 80).to_socket_addrs().unwrap().next().is_some());
    let text = probe("lookup", "localhost");
    assert!(text.starts_with("lookup localhost: failed: "), "{text}");
}

#[test]
fn every_import_of_a_std_guest_has_a_stated_grant() {
    // A Rust std guest links every WASI 0.2 interface the host provides, sockets included.
    let (plugin, _cache) = load("hostile", Limits::default());
    let imports = &plugin.info().imports;
    let unknown: Vec<_> = imports.iter().filter(|i| i.access == "unknown").map(|i| &i.name).collect();
    assert!(unknown.is_empty(), "imports missing from sandbox.rs's table: {unknown:?}");
    // What the probes above go through is what `inspect` says is denied.
    for interface in [
        "wasi:filesystem/preopens",
        "wasi:filesystem/types",
        "wasi:cli/environment",
        "wasi:sockets/tcp-create-socket",
        "wasi:sockets/udp-create-socket",
        "wasi:sockets/ip-name-lookup",
    ] {
        let import = imports.iter().find(|i| i.name.split('@').next() == Some(interface));
        assert_eq!(import.map(|i| i.access), Some("denied"), "{interface}: {import:?}");
    }
}
