//! cosign's signatures, by key: a signature is a `sha256-HEX.sig` tag beside the component,
//! holding a simple-signing payload that names the manifest digest, signed with the
//! publisher's private key (`cosign sign --key`, or `push --sign-key` here); a user checks it
//! with the public key (`cosign verify --key`, or `--verify-key` here). The sigstore crate
//! does the format and the cryptography.

use crate::remote::{Remote, block_on};
use crate::{Credentials, Error, OciRef, Trust};
use sigstore::cosign::constraint::{Constraint, PrivateKeySigner};
use sigstore::cosign::verification_constraint::{PublicKeyVerifier, VerificationConstraint};
use sigstore::cosign::{CosignCapabilities, SignatureLayer};
use sigstore::crypto::SigningScheme;
use sigstore::crypto::signing_key::SigStoreKeyPair;
use sigstore::registry::{Auth, ClientConfig, ClientProtocol, OciReference};
use std::path::{Path, PathBuf};

/// cosign's default key type.
const SCHEME: SigningScheme = SigningScheme::ECDSA_P256_SHA256_ASN1;

/// A private key to sign pushes with.
pub struct Signer {
    key: SigStoreKeyPair,
}

impl Signer {
    /// A private key file: cosign's encrypted format (`cosign generate-key-pair`,
    /// `vagen-host keygen`), opened with `password`, or an unencrypted PKCS#8 PEM.
    pub fn from_file(path: &Path, password: &[u8]) -> Result<Self, Error> {
        let pem = std::fs::read(path).map_err(|e| Error::file(path, e))?;
        let encrypted = String::from_utf8_lossy(&pem).contains("ENCRYPTED");
        let key = match encrypted {
            true => SigStoreKeyPair::from_encrypted_pem(&pem, password),
            false => SigStoreKeyPair::from_pem(&pem),
        }
        .map_err(|e| Error::file(path, format!("not a signing key this password opens: {e}")))?;
        Ok(Self { key })
    }
}

/// A new key pair in cosign's files: `cosign.key` (encrypted with `password`), `cosign.pub`.
pub struct KeyPair {
    pub private_pem: String,
    pub public_pem: String,
}

pub fn generate_key_pair(password: &[u8]) -> Result<KeyPair, Error> {
    let fail = |e: sigstore::errors::SigstoreError| Error::Other(format!("making a key pair: {e}"));
    let pair = SCHEME.create_signer().and_then(|s| s.to_sigstore_keypair()).map_err(fail)?;
    Ok(KeyPair {
        private_pem: pair.private_key_to_encrypted_pem(password).map_err(fail)?.to_string(),
        public_pem: pair.public_key_to_pem().map_err(fail)?,
    })
}

fn client(remote: &Remote) -> Result<sigstore::cosign::Client, Error> {
    let protocol = match &remote.protocol {
        oci_client::client::ClientProtocol::Http => ClientProtocol::Http,
        oci_client::client::ClientProtocol::Https => ClientProtocol::Https,
        oci_client::client::ClientProtocol::HttpsExcept(e) => ClientProtocol::HttpsExcept(e.clone()),
    };
    let config = ClientConfig { protocol, ..ClientConfig::default() };
    sigstore::cosign::ClientBuilder::default()
        .with_oci_client_config(config)
        .build()
        .map_err(|e| Error::Other(format!("starting the signature client: {e}")))
}

fn auth(remote: &Remote) -> Auth {
    match &remote.auth {
        oci_client::secrets::RegistryAuth::Anonymous => Auth::Anonymous,
        oci_client::secrets::RegistryAuth::Basic(u, p) => Auth::Basic(u.clone(), p.clone()),
        oci_client::secrets::RegistryAuth::Bearer(t) => Auth::Bearer(t.clone()),
    }
}

fn image(r: &OciRef) -> OciReference {
    let digest = r.digest().expect("signatures name a pinned reference");
    OciReference::with_digest(r.registry().into(), r.repository().into(), digest.into())
}

/// Signs the pinned `reference` (already pushed) and pushes the signature beside it.
pub(crate) fn sign(reference: &OciRef, remote: &Remote, signer: &Signer) -> Result<(), Error> {
    let refused = |why: String| Error::Signature { reference: reference.to_string(), why };
    let mut client = client(remote)?;
    let digest = reference.digest().expect("pinned").to_string();
    let signing =
        signer.key.to_sigstore_signer(&SCHEME).map_err(|e| refused(format!("the key is not {SCHEME}: {e}")))?;
    let mut layer = SignatureLayer::new_unsigned(&image(reference), &digest).map_err(|e| refused(e.to_string()))?;
    PrivateKeySigner::new_with_signer(signing).add_constraint(&mut layer).map_err(|e| refused(e.to_string()))?;
    let target = OciReference::with_tag(
        reference.registry().into(),
        reference.repository().into(),
        format!("{}.sig", digest.replace(':', "-")),
    );
    block_on(client.push_signature(None, &auth(remote), &target, vec![layer]))
        .map_err(|e| refused(format!("pushing the signature: {e}")))?;
    Ok(())
}

/// Checks the pinned reference's signatures as `trust` asks: `Ok(Some(key))` when one is by
/// that key, `Ok(None)` when nothing was asked (or, without `require_signed`, nothing is
/// signed: a warning). A signature by another key is always refused.
pub(crate) fn check(pinned: &OciRef, credentials: &Credentials, trust: &Trust) -> Result<Option<PathBuf>, Error> {
    let refused = |why: String| Error::Signature { reference: pinned.to_string(), why };
    let Some(key_path) = &trust.verify_key else {
        return match trust.require_signed {
            true => Err(refused(
                "signatures are required (--require-signed) and no public key is given: --verify-key FILE, or \
                 verify_key in [plugins] of the user config"
                    .into(),
            )),
            false => Ok(None),
        };
    };
    let pem = std::fs::read(key_path).map_err(|e| Error::file(key_path, e))?;
    let verifier: Box<dyn VerificationConstraint> = Box::new(
        PublicKeyVerifier::try_from(&pem).map_err(|e| Error::file(key_path, format!("not a public key: {e}")))?,
    );
    let remote = Remote::new(pinned, credentials)?;
    let mut client = client(&remote)?;
    let layers = block_on(client.trusted_signature_layers(&auth(&remote), &image(pinned)))
        .map_err(|e| refused(format!("reading its signatures: {e}")))?;
    if layers.is_empty() {
        return match trust.require_signed {
            true => Err(refused(format!("it is not signed (no cosign signature in {})", pinned.registry()))),
            false => {
                tracing::warn!(
                    "{pinned} is not signed: loaded without a signature check (--require-signed refuses it)"
                );
                Ok(None)
            }
        };
    }
    sigstore::cosign::verify_constraints(&layers, [verifier].iter())
        .map_err(|_| refused(format!("it is signed, but not by the key {}", key_path.display())))?;
    Ok(Some(key_path.clone()))
}
