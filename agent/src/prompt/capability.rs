//! Model capability: `SystemPromptUpdate = in-history` on resolved model info and on the
//! prepared call, and the DeepSeek catalog that declares it (replaceable from a config file).
//!
//! Absence of the capability means the route rewrites node 0. Only the exact catalog entry
//! records the capability: names and protocol families imply nothing for other models.

use std::fmt;
use std::path::Path;

use serde_json::{Number, Value};
use sessionlog_format::payload::RequestContextData;
use sessionlog_format::Extra;

/// The provider of the built-in DeepSeek catalog.
pub const DEEPSEEK_PROVIDER: &str = "deepseek-official";
/// The sole built-in catalog model; it declares the in-history capability.
pub const DEEPSEEK_FLASH: &str = "deepseek-flash";
/// Most models a catalog holds.
pub const CATALOG_MODELS_MAX: usize = 1024;

/// `SystemPromptUpdate`: the only value is `in-history`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SystemPromptUpdate {
    InHistory,
}

impl SystemPromptUpdate {
    pub fn as_str(self) -> &'static str {
        match self {
            SystemPromptUpdate::InHistory => "in-history",
        }
    }

    /// Parses the wire value; any other value is `INVALID_MODEL_INFO`.
    pub fn parse(value: &str) -> Result<SystemPromptUpdate, LlmError> {
        match value {
            "in-history" => Ok(SystemPromptUpdate::InHistory),
            other => Err(LlmError::invalid(format!(
                "systemPromptUpdate must be \"in-history\", got {other:?}"
            ))),
        }
    }
}

/// The code of an [`LlmError`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LlmErrorCode {
    InvalidModelInfo,
}

impl fmt::Display for LlmErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LlmErrorCode::InvalidModelInfo => "INVALID_MODEL_INFO",
        })
    }
}

/// An error of the model layer, with its code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct LlmError {
    pub code: LlmErrorCode,
    pub message: String,
}

impl LlmError {
    fn invalid(message: String) -> LlmError {
        LlmError {
            code: LlmErrorCode::InvalidModelInfo,
            message,
        }
    }
}

/// An input modality a model accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum InputKind {
    Text,
    Image,
}

/// `LlmResolvedModelInfo`, as far as the prompt layer reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelInfo {
    pub provider: String,
    pub model: String,
    pub input: Vec<InputKind>,
    pub context_window: Option<u64>,
    pub system_prompt_update: Option<SystemPromptUpdate>,
    /// The route supports dynamic tool updates.
    pub tool_update: bool,
}

/// `normalizeModelInfo`: validates a JSON model description (`provider`, `model` or `id`,
/// `input`, `contextWindow`, `systemPromptUpdate`, `toolUpdate`); `provider` falls back to
/// `default_provider`.
pub fn normalize_model_info(value: &Value, default_provider: &str) -> Result<ModelInfo, LlmError> {
    let Some(object) = value.as_object() else {
        return Err(LlmError::invalid("a model must be an object".into()));
    };
    let string = |key: &str| -> Result<Option<String>, LlmError> {
        match object.get(key) {
            None => Ok(None),
            Some(Value::String(s)) if !s.is_empty() => Ok(Some(s.clone())),
            Some(other) => Err(LlmError::invalid(format!(
                "{key} must be a non-empty string, got {other}"
            ))),
        }
    };
    let model = match (string("model")?, string("id")?) {
        (Some(model), _) | (None, Some(model)) => model,
        (None, None) => return Err(LlmError::invalid("a model needs an id".into())),
    };
    let provider = string("provider")?.unwrap_or_else(|| default_provider.to_owned());
    let system_prompt_update = string("systemPromptUpdate")?
        .map(|v| SystemPromptUpdate::parse(&v))
        .transpose()?;
    let context_window = match object.get("contextWindow") {
        None => None,
        Some(v) => Some(v.as_u64().filter(|n| *n > 0).ok_or_else(|| {
            LlmError::invalid(format!("contextWindow must be a positive integer, got {v}"))
        })?),
    };
    let tool_update = match object.get("toolUpdate") {
        None => false,
        Some(Value::Bool(b)) => *b,
        Some(v) => {
            return Err(LlmError::invalid(format!(
                "toolUpdate must be a boolean, got {v}"
            )))
        }
    };
    Ok(ModelInfo {
        provider,
        model,
        input: parse_input(object.get("input"))?,
        context_window,
        system_prompt_update,
        tool_update,
    })
}

fn parse_input(value: Option<&Value>) -> Result<Vec<InputKind>, LlmError> {
    let Some(value) = value else {
        return Ok(vec![InputKind::Text]);
    };
    let Some(items) = value.as_array() else {
        return Err(LlmError::invalid(format!(
            "input must be a list, got {value}"
        )));
    };
    let mut input = Vec::with_capacity(items.len());
    for item in items {
        let kind = match item.as_str() {
            Some("text") => InputKind::Text,
            Some("image") => InputKind::Image,
            _ => return Err(LlmError::invalid(format!("unknown input kind {item}"))),
        };
        if !input.contains(&kind) {
            input.push(kind);
        }
    }
    Ok(input)
}

/// The adapter that serves a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Adapter {
    /// The direct DeepSeek adapter: it honours the catalog's capability.
    DeepSeek,
    /// `dsh-llm-pi-ai`: every route keeps the replace behaviour.
    PiAi,
}

/// `PreparedLlmCall`: the call bound after request middleware; admission reads its mode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreparedCall {
    pub provider: String,
    pub model: String,
    pub context_window: Option<u64>,
    pub system_prompt_update: Option<SystemPromptUpdate>,
    pub tool_update: bool,
}

impl PreparedCall {
    /// Prepares a call on `adapter` for `info`.
    pub fn prepare(adapter: Adapter, info: &ModelInfo) -> PreparedCall {
        let system_prompt_update = match adapter {
            Adapter::DeepSeek => info.system_prompt_update,
            Adapter::PiAi => None,
        };
        PreparedCall {
            provider: info.provider.clone(),
            model: info.model.clone(),
            context_window: info.context_window,
            system_prompt_update,
            tool_update: info.tool_update,
        }
    }

    /// Whether the route appends changed prompts in history.
    pub fn in_history(&self) -> bool {
        self.system_prompt_update == Some(SystemPromptUpdate::InHistory)
    }

    /// The `request/context` snapshot of this call.
    pub fn request_context(&self) -> RequestContextData {
        RequestContextData {
            provider: self.provider.clone(),
            model: self.model.clone(),
            context_window: self.context_window.map(Number::from),
            system_prompt_update: self.system_prompt_update.map(|u| u.as_str().to_owned()),
            extra: Extra::new(),
        }
    }
}

/// Why a catalog could not be loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CatalogError {
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: unsupported catalog format (use .toml, .yaml, .yml or .json)")]
    Format { path: String },
    #[error("{path}: {message}")]
    Parse { path: String, message: String },
    #[error("{path}: model {index}: {source}")]
    Model {
        path: String,
        index: usize,
        #[source]
        source: LlmError,
    },
    #[error("{path}: {message}")]
    Shape { path: String, message: String },
}

/// A model catalog: the models a provider's adapter knows, with their capabilities.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Catalog {
    models: Vec<ModelInfo>,
}

impl Catalog {
    /// The built-in DeepSeek catalog: `deepseek-flash` alone, with text and image input and
    /// `systemPromptUpdate: in-history`.
    pub fn deepseek() -> Catalog {
        Catalog {
            models: vec![ModelInfo {
                provider: DEEPSEEK_PROVIDER.to_owned(),
                model: DEEPSEEK_FLASH.to_owned(),
                input: vec![InputKind::Text, InputKind::Image],
                context_window: None,
                system_prompt_update: Some(SystemPromptUpdate::InHistory),
                tool_update: false,
            }],
        }
    }

    pub fn models(&self) -> &[ModelInfo] {
        &self.models
    }

    /// The exact entry for `provider` and `model`; nothing is inferred for other names.
    pub fn lookup(&self, provider: &str, model: &str) -> Option<&ModelInfo> {
        self.models
            .iter()
            .find(|m| m.provider == provider && m.model == model)
    }

    /// A catalog from config text: a `models` list whose entries `normalize_model_info`
    /// validates, all at load. `name` names the source in errors.
    pub fn from_value(document: &Value, name: &str) -> Result<Catalog, CatalogError> {
        let shape = |message: &str| CatalogError::Shape {
            path: name.to_owned(),
            message: message.to_owned(),
        };
        let models = document
            .get("models")
            .and_then(Value::as_array)
            .ok_or_else(|| shape("the catalog needs a `models` list"))?;
        if models.len() > CATALOG_MODELS_MAX {
            return Err(shape(&format!("more than {CATALOG_MODELS_MAX} models")));
        }
        let mut out: Vec<ModelInfo> = Vec::with_capacity(models.len());
        for (index, model) in models.iter().enumerate() {
            let info = normalize_model_info(model, DEEPSEEK_PROVIDER).map_err(|source| {
                CatalogError::Model {
                    path: name.to_owned(),
                    index,
                    source,
                }
            })?;
            if out
                .iter()
                .any(|m| m.provider == info.provider && m.model == info.model)
            {
                return Err(shape(&format!("model {:?} is listed twice", info.model)));
            }
            out.push(info);
        }
        Ok(Catalog { models: out })
    }

    /// Parses TOML (`[[models]]` tables), YAML (a `models:` sequence) or JSON text.
    pub fn parse(text: &str, format: ConfigFormat, name: &str) -> Result<Catalog, CatalogError> {
        let parse_error = |message: String| CatalogError::Parse {
            path: name.to_owned(),
            message,
        };
        let document: Value = match format {
            ConfigFormat::Toml => toml::from_str(text).map_err(|e| parse_error(e.to_string()))?,
            ConfigFormat::Yaml => {
                serde_norway::from_str(text).map_err(|e| parse_error(e.to_string()))?
            }
            ConfigFormat::Json => {
                serde_json::from_str(text).map_err(|e| parse_error(e.to_string()))?
            }
        };
        Catalog::from_value(&document, name)
    }

    /// Loads a catalog file that replaces the built-in one: `.toml`, `.yaml`/`.yml` or
    /// `.json`, validated whole before it is used.
    pub fn load(path: &Path) -> Result<Catalog, CatalogError> {
        let name = path.display().to_string();
        let format = match path.extension().and_then(|e| e.to_str()) {
            Some("toml") => ConfigFormat::Toml,
            Some("yaml" | "yml") => ConfigFormat::Yaml,
            Some("json") => ConfigFormat::Json,
            _ => return Err(CatalogError::Format { path: name }),
        };
        let text = std::fs::read_to_string(path).map_err(|source| CatalogError::Io {
            path: name.clone(),
            source,
        })?;
        Catalog::parse(&text, format, &name)
    }
}

/// The syntax of a catalog config file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigFormat {
    Toml,
    Yaml,
    Json,
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;
    use serde_json::json;

    use super::*;

    // Goal: the built-in catalog holds exactly deepseek-flash with text and image input and
    // the in-history mode; other names get nothing. Method: lookups.
    #[test]
    fn builtin_catalog() {
        let catalog = Catalog::deepseek();
        assert_eq!(catalog.models().len(), 1);
        let flash = catalog.lookup(DEEPSEEK_PROVIDER, DEEPSEEK_FLASH).unwrap();
        assert_eq!(flash.input, vec![InputKind::Text, InputKind::Image]);
        assert_eq!(
            flash.system_prompt_update,
            Some(SystemPromptUpdate::InHistory)
        );
        assert_eq!(catalog.lookup(DEEPSEEK_PROVIDER, "deepseek-v4-flash"), None);
    }

    // Goal: normalizeModelInfo carries in-history and rejects any other value with
    // INVALID_MODEL_INFO. Method: valid and invalid descriptions.
    #[test]
    fn model_info_validation() {
        let ok = json!({"provider": "p", "model": "m", "systemPromptUpdate": "in-history"});
        let info = normalize_model_info(&ok, "d").unwrap();
        assert_eq!(
            info.system_prompt_update,
            Some(SystemPromptUpdate::InHistory)
        );
        assert_eq!(
            normalize_model_info(&json!({"id": "m"}), "d")
                .unwrap()
                .provider,
            "d"
        );
        for bad in [
            json!({"model": "m", "systemPromptUpdate": "replace"}),
            json!({"model": "m", "systemPromptUpdate": true}),
            json!({"model": "m", "input": ["audio"]}),
            json!({"model": ""}),
            json!({"model": "m", "contextWindow": -1}),
            json!("m"),
        ] {
            let error = normalize_model_info(&bad, "d").unwrap_err();
            assert_eq!(error.code, LlmErrorCode::InvalidModelInfo, "{bad}");
            assert!(error.to_string().starts_with("INVALID_MODEL_INFO: "));
        }
    }

    // Goal: the prepared call carries the mode on a DeepSeek route, never on a pi-ai route,
    // and its request context records it. Method: prepare both.
    #[test]
    fn prepared_call_mode() {
        let flash = Catalog::deepseek().models()[0].clone();
        let call = PreparedCall::prepare(Adapter::DeepSeek, &flash);
        assert!(call.in_history());
        let context = call.request_context();
        assert_eq!(context.system_prompt_update.as_deref(), Some("in-history"));
        assert!(!PreparedCall::prepare(Adapter::PiAi, &flash).in_history());
    }

    // Goal: a TOML or JSON config replaces the catalog and is validated when loaded.
    // Method: parse good and bad documents.
    #[test]
    fn config_catalog() {
        let text = r#"
            [[models]]
            id = "deepseek-pro"
            input = ["text"]
            contextWindow = 128000

            [[models]]
            id = "deepseek-flash"
            input = ["text", "image"]
            systemPromptUpdate = "in-history"
        "#;
        let catalog = Catalog::parse(text, ConfigFormat::Toml, "models.toml").unwrap();
        assert_eq!(catalog.models().len(), 2);
        let pro = catalog.lookup(DEEPSEEK_PROVIDER, "deepseek-pro").unwrap();
        assert_eq!(
            (pro.context_window, pro.system_prompt_update),
            (Some(128000), None)
        );
        let bad = "[[models]]\nid = \"x\"\nsystemPromptUpdate = \"always\"\n";
        let error = Catalog::parse(bad, ConfigFormat::Toml, "bad.toml").unwrap_err();
        assert!(error.to_string().contains("INVALID_MODEL_INFO"), "{error}");
        assert!(matches!(
            Catalog::parse("models = 3", ConfigFormat::Toml, "t"),
            Err(CatalogError::Shape { .. })
        ));
        assert!(matches!(
            Catalog::parse("[[models", ConfigFormat::Toml, "t"),
            Err(CatalogError::Parse { .. })
        ));
        let json = r#"{"models": [{"id": "a"}, {"id": "a"}]}"#;
        assert!(matches!(
            Catalog::parse(json, ConfigFormat::Json, "j"),
            Err(CatalogError::Shape { .. })
        ));
        assert!(matches!(
            Catalog::load(Path::new("catalog.ini")),
            Err(CatalogError::Format { .. })
        ));
    }

    // Goal: a YAML config replaces the catalog with the same validation and errors as TOML:
    // the same models from the same document, INVALID_MODEL_INFO for another mode, shape and
    // parse errors, and `.yaml`/`.yml` files load. Method: parse good and bad documents, load
    // a file from a temporary directory.
    #[test]
    fn yaml_catalog() {
        let text = "models:\n  - id: deepseek-pro\n    input: [text]\n    contextWindow: 128000\n  - id: deepseek-flash\n    input: [text, image]\n    systemPromptUpdate: in-history\n";
        let catalog = Catalog::parse(text, ConfigFormat::Yaml, "models.yaml").unwrap();
        let toml = "[[models]]\nid = \"deepseek-pro\"\ninput = [\"text\"]\ncontextWindow = 128000\n\n[[models]]\nid = \"deepseek-flash\"\ninput = [\"text\", \"image\"]\nsystemPromptUpdate = \"in-history\"\n";
        assert_eq!(
            catalog,
            Catalog::parse(toml, ConfigFormat::Toml, "models.toml").unwrap()
        );
        let bad = "models:\n  - id: x\n    systemPromptUpdate: always\n";
        let error = Catalog::parse(bad, ConfigFormat::Yaml, "bad.yaml").unwrap_err();
        assert!(matches!(error, CatalogError::Model { index: 0, .. }));
        assert!(error.to_string().contains("INVALID_MODEL_INFO"), "{error}");
        let boolean = "models:\n  - id: x\n    systemPromptUpdate: true\n";
        assert!(matches!(
            Catalog::parse(boolean, ConfigFormat::Yaml, "b.yaml"),
            Err(CatalogError::Model { .. })
        ));
        assert!(matches!(
            Catalog::parse("models: 3\n", ConfigFormat::Yaml, "y"),
            Err(CatalogError::Shape { .. })
        ));
        assert!(matches!(
            Catalog::parse("models: [\n", ConfigFormat::Yaml, "y"),
            Err(CatalogError::Parse { .. })
        ));
        let twice = "models:\n  - id: a\n  - id: a\n";
        assert!(matches!(
            Catalog::parse(twice, ConfigFormat::Yaml, "y"),
            Err(CatalogError::Shape { .. })
        ));
        let dir = tempfile::tempdir().unwrap();
        for name in ["models.yaml", "models.yml"] {
            let path = dir.path().join(name);
            std::fs::write(&path, text).unwrap();
            assert_eq!(Catalog::load(&path).unwrap(), catalog);
        }
    }
}
