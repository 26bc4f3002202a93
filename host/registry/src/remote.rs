//! One registry conversation: the client, its credentials and a private async runtime.

use crate::{Credentials, Error, OciRef};
use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::errors::OciDistributionError;
use oci_client::secrets::RegistryAuth;
use std::time::Duration;

pub(crate) struct Remote {
    pub(crate) client: oci_client::Client,
    pub(crate) auth: RegistryAuth,
    /// HTTP for a registry on this machine, HTTPS otherwise; the signature client speaks the same.
    pub(crate) protocol: ClientProtocol,
}

/// How long a registry may take to accept a connection, and to send the next bytes: an
/// unreachable or stalled registry is an error in seconds, not a hang.
const CONNECT: Duration = Duration::from_secs(10);
const READ: Duration = Duration::from_secs(60);

impl Remote {
    pub(crate) fn new(r: &OciRef, credentials: &Credentials) -> Result<Self, Error> {
        let auth = credentials.for_registry(r.registry())?;
        let protocol = match r.is_loopback() {
            true => ClientProtocol::HttpsExcept(vec![r.registry().to_string()]),
            false => ClientProtocol::Https,
        };
        let config = ClientConfig {
            protocol: protocol.clone(),
            connect_timeout: Some(CONNECT),
            read_timeout: Some(READ),
            ..ClientConfig::default()
        };
        Ok(Self { client: oci_client::Client::new(config), auth, protocol })
    }
}

/// Runs `f` to completion on a fresh current-thread runtime on its own thread: usable from
/// plain code and from inside another runtime (a server loading a plugin) alike.
pub(crate) fn block_on<T: Send>(f: impl std::future::Future<Output = T> + Send) -> T {
    std::thread::scope(|s| {
        s.spawn(|| {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a current-thread tokio runtime starts")
                .block_on(f)
        })
        .join()
        .unwrap_or_else(|p| std::panic::resume_unwind(p))
    })
}

/// A client error as one of ours, naming what it was about.
pub(crate) fn classify(r: &OciRef, e: OciDistributionError) -> Error {
    let registry = r.registry().to_string();
    let reference = r.to_string();
    match e {
        OciDistributionError::AuthenticationFailure(why) => Error::Unauthorized { registry, why },
        OciDistributionError::UnauthorizedError { url } => {
            Error::Unauthorized { registry, why: format!("401 at {url}") }
        }
        OciDistributionError::ImageManifestNotFoundError(why) => Error::NotFound { reference, why },
        OciDistributionError::RequestError(e) if e.is_connect() || e.is_timeout() => {
            Error::Unreachable { registry, why: chain(&e) }
        }
        OciDistributionError::RegistryError { envelope, .. } => {
            let why =
                envelope.errors.iter().map(|e| format!("{:?}: {}", e.code, e.message)).collect::<Vec<_>>().join("; ");
            let unknown = envelope.errors.iter().any(|e| {
                use oci_client::errors::OciErrorCode as C;
                matches!(e.code, C::ManifestUnknown | C::NameUnknown | C::BlobUnknown | C::NotFound)
            });
            let denied = envelope.errors.iter().any(|e| {
                use oci_client::errors::OciErrorCode as C;
                matches!(e.code, C::Unauthorized | C::Denied)
            });
            match (unknown, denied) {
                (_, true) => Error::Unauthorized { registry, why },
                (true, _) => Error::NotFound { reference, why },
                _ => Error::Registry { reference, why },
            }
        }
        OciDistributionError::ServerError { code: 404, message, .. } => Error::NotFound { reference, why: message },
        OciDistributionError::ServerError { code: 401 | 403, message, .. } => {
            Error::Unauthorized { registry, why: message }
        }
        other => Error::Registry { reference, why: chain(&other) },
    }
}

/// An error with its causes, joined (reqwest's own message is only "error sending request").
fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}
