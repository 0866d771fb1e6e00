//! The DeepSeek chat-completions adapter: [`serialize`] (`sessionlog_engine::wire`) turns a
//! request rebuilt from the log into the wire body, [`stream`] maps SSE chunks to deltas and usage, and [`client`] sends
//! the body over HTTP (reqwest) with a timeout, and cancellation.

pub mod client;
/// The wire body, rebuilt from the log (in the engine: the views print it too).
pub use sessionlog_engine::wire as serialize;
pub mod stream;

/// The environment variable holding the API key.
pub const API_KEY_ENV: &str = "DEEPSEEK_API_KEY";
/// The environment variable holding the base URL.
pub const BASE_URL_ENV: &str = "DEEPSEEK_BASE_URL";
/// The default base URL.
pub const DEFAULT_BASE_URL: &str = "https://api.deepseek.com";
