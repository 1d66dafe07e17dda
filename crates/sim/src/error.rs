//! The simulator's one error type: everything a scenario, a calibration file or the CLI can
//! get wrong, as a clear message. Library code returns it; it never panics on bad input.

/// What went wrong loading or running a scenario.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// No built-in scenario of that name and no such file.
    #[error("no scenario {0:?}: not a built-in name ({1}) and no such file")]
    UnknownScenario(String, String),
    /// The scenario file could not be read.
    #[error("reading {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    /// The TOML does not parse or does not fit the scenario's shape.
    #[error("scenario {name}: {message}")]
    BadScenario { name: String, message: String },
    /// The calibration file does not parse or fit.
    #[error("calibration: {0}")]
    BadCalibration(String),
    /// No policy of that name.
    #[error("no policy {0:?}; the policies are: {1}")]
    UnknownPolicy(String, String),
    /// `--shard` is not `i/n` with `0 <= i < n`.
    #[error("shard {0:?}: give it as i/n, 0 <= i < n (e.g. 0/4)")]
    BadShard(String),
    /// Fleet shards that do not merge into one fleet (or do not parse).
    #[error("merging fleet shards: {0}")]
    Merge(String),
    /// Writing an output file failed.
    #[error("writing {path}: {source}")]
    Write {
        path: String,
        source: std::io::Error,
    },
}

impl SimError {
    pub(crate) fn bad(name: &str, message: impl Into<String>) -> SimError {
        SimError::BadScenario {
            name: name.to_string(),
            message: message.into(),
        }
    }
}
