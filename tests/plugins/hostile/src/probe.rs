//! Capability probes, run from `reset`: each tries to reach something of the host's (a
//! file, an env var, a socket, a name lookup) the way an ordinary guest would, through std
//! and wasi-libc, and reports what it got as the observation text. The host side
//! (`tests/tests/capabilities.rs`) checks that every attempt failed and that nothing
//! arrived where the guest aimed.

/// The report for a probe mode, `None` for any other mode. `target` comes from the config:
/// a host path, an env var name, or an address or host name.
pub fn run(mode: &str, target: &str) -> Option<String> {
    Some(match mode {
        "read-file" => read_file(target),
        "read-env" => read_env(target),
        "connect" => connect(target),
        "send-udp" => send_udp(target),
        "lookup" => lookup(target),
        _ => return None,
    })
}

/// `ok: ...` or `failed: ...`; the host matches on the prefix.
fn outcome<T>(r: std::io::Result<T>, ok: impl FnOnce(T) -> String) -> String {
    match r {
        Ok(v) => format!("ok: {}", ok(v)),
        Err(e) => format!("failed: {e}"),
    }
}

fn read_file(path: &str) -> String {
    let read = outcome(std::fs::read_to_string(path), |text| text);
    let root = outcome(std::fs::read_dir("/"), |d| format!("{} entries", d.count()));
    format!("{}; read {path}: {read}; list /: {root}", preopens())
}

/// Asked of WASI directly: wasi-libc resolves paths against the preopens without telling
/// std how many there are, and a preopen elsewhere than `path` would still be a grant.
#[cfg(target_os = "wasi")]
fn preopens() -> String {
    let dirs = wasip2::filesystem::preopens::get_directories();
    let names: Vec<String> = dirs.into_iter().map(|(_, name)| name).collect();
    format!("{} preopens {names:?}", names.len())
}

#[cfg(not(target_os = "wasi"))]
fn preopens() -> String {
    "native: no preopens to ask for".into()
}

fn read_env(name: &str) -> String {
    let value = match std::env::var(name) {
        Ok(v) => format!("ok: {v}"),
        Err(e) => format!("failed: {e}"),
    };
    let (vars, args) = (std::env::vars().count(), std::env::args().count());
    format!("{name}: {value}; {vars} env vars; {args} args")
}

fn connect(addr: &str) -> String {
    let tcp = std::net::TcpStream::connect(addr);
    format!("tcp connect {addr}: {}", outcome(tcp, |s| format!("connected from {:?}", s.local_addr())))
}

fn send_udp(addr: &str) -> String {
    let sent = std::net::UdpSocket::bind("0.0.0.0:0").and_then(|s| s.send_to(b"probe", addr));
    format!("udp send {addr}: {}", outcome(sent, |n| format!("{n} bytes sent")))
}

fn lookup(name: &str) -> String {
    use std::net::ToSocketAddrs;
    let found = (name, 80).to_socket_addrs();
    format!("lookup {name}: {}", outcome(found, |addrs| format!("{:?}", addrs.collect::<Vec<_>>())))
}
