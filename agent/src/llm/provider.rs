//! The one provider opener of `run` and `compact`: which adapter a call goes to, and the route
//! it is prepared for.

use std::path::PathBuf;
use std::time::Duration;

use super::adapter::LlmAdapter;
use super::deepseek::client::DeepSeekClient;
use super::deepseek::{API_KEY_ENV, DEFAULT_BASE_URL};
use super::replay::{ReplayProvider, ReplayScript, REPLAY_PROVIDER};
use crate::prompt::capability::{Adapter, Catalog, ModelInfo, PreparedCall, DEEPSEEK_PROVIDER};

/// How long a DeepSeek call may wait: the connection, the response head and every wait
/// between stream events.
pub const HTTP_TIMEOUT: Duration = Duration::from_secs(120);

/// Which provider, and what it needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Provider {
    /// The keyless scripted provider; without a script, its default answers.
    Replay { script: Option<PathBuf> },
    /// A DeepSeek-compatible endpoint (`$DEEPSEEK_API_KEY`), its models described by the
    /// built-in catalog or `catalog`.
    DeepSeek {
        base_url: Option<String>,
        catalog: Option<PathBuf>,
    },
}

/// Why a provider could not be opened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProviderError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {reason}")]
    Script { path: PathBuf, reason: String },
    #[error(transparent)]
    Catalog(#[from] crate::prompt::capability::CatalogError),
    #[error("{code}: {message}")]
    Client { code: String, message: String },
}

/// Opens `provider` for `model`: the adapter and the route its calls are prepared for. A
/// model the catalog does not know gets the default description of a DeepSeek route.
pub fn open_provider(
    provider: &Provider,
    model: &str,
) -> Result<(Box<dyn LlmAdapter>, PreparedCall), ProviderError> {
    match provider {
        Provider::Replay { script } => {
            let script = match script {
                Some(path) => {
                    let text =
                        std::fs::read_to_string(path).map_err(|source| ProviderError::Read {
                            path: path.clone(),
                            source,
                        })?;
                    ReplayScript::parse(&text).map_err(|e| ProviderError::Script {
                        path: path.clone(),
                        reason: e.0,
                    })?
                }
                None => ReplayScript::default(),
            };
            let info = script.model_info(REPLAY_PROVIDER, model);
            let route = PreparedCall::prepare(Adapter::DeepSeek, &info);
            Ok((Box::new(ReplayProvider::new(script)), route))
        }
        Provider::DeepSeek { base_url, catalog } => {
            let catalog = match catalog {
                Some(path) => Catalog::load(path)?,
                None => Catalog::deepseek(),
            };
            let info: ModelInfo = match catalog.lookup(DEEPSEEK_PROVIDER, model) {
                Some(info) => info.clone(),
                None => ReplayScript::default().model_info(DEEPSEEK_PROVIDER, model),
            };
            let base = base_url.as_deref().unwrap_or(DEFAULT_BASE_URL);
            let key = std::env::var(API_KEY_ENV).ok();
            let client = DeepSeekClient::new(base, key, HTTP_TIMEOUT).map_err(|f| {
                ProviderError::Client {
                    code: f.code,
                    message: f.message,
                }
            })?;
            let route = PreparedCall::prepare(Adapter::DeepSeek, &info);
            Ok((Box::new(client), route))
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    // Goal: the replay provider opens with its default script and a route for the model; a
    // missing script file is named in the error.
    #[test]
    fn replay_opens_and_a_missing_script_is_named() {
        let (_, route) = open_provider(&Provider::Replay { script: None }, "m").unwrap();
        assert_eq!(route.model, "m");
        assert_eq!(route.provider, REPLAY_PROVIDER);
        let missing = PathBuf::from("/no/such/script.json");
        let error = open_provider(
            &Provider::Replay {
                script: Some(missing.clone()),
            },
            "m",
        )
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
        assert!(error.contains("/no/such/script.json"), "{error}");
    }
}
