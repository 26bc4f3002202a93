//! Who we are to a registry: given on the command line, else the user's `docker login`
//! (`$DOCKER_CONFIG/config.json` or `~/.docker/config.json`, credential helpers included),
//! else anonymous. Never from a run config: configs are shared, credentials are not.

use docker_credential::{CredentialRetrievalError, DockerCredential};
use oci_client::secrets::RegistryAuth;

#[derive(Clone, Debug, Default)]
pub enum Credentials {
    /// The user's docker config for the registry, anonymous where it has none.
    #[default]
    DockerConfig,
    /// A user name and password (or token) given for this call.
    Basic { username: String, password: String },
}

impl Credentials {
    pub(crate) fn for_registry(&self, registry: &str) -> Result<RegistryAuth, crate::Error> {
        match self {
            Credentials::Basic { username, password } => Ok(RegistryAuth::Basic(username.clone(), password.clone())),
            Credentials::DockerConfig => match docker_credential::get_credential(registry) {
                Ok(DockerCredential::UsernamePassword(u, p)) => Ok(RegistryAuth::Basic(u, p)),
                Ok(DockerCredential::IdentityToken(t)) => Ok(RegistryAuth::Bearer(t)),
                Err(
                    CredentialRetrievalError::ConfigNotFound
                    | CredentialRetrievalError::ConfigReadError
                    | CredentialRetrievalError::NoCredentialConfigured,
                ) => Ok(RegistryAuth::Anonymous),
                Err(e) => Err(crate::Error::Unauthorized {
                    registry: registry.into(),
                    why: format!("reading its credentials from the docker config: {e}"),
                }),
            },
        }
    }
}
