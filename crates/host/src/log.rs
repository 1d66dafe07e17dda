//! One log line per action with its reason, as text or JSON. Timestamps are UTC.

use crate::config::LogFormat;
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

#[derive(Debug, Clone)]
pub struct Logger {
    format: LogFormat,
    verbose: bool,
    /// Write here instead of stderr (the demo keeps its terminal for the live view).
    file: Option<Arc<Mutex<std::fs::File>>>,
}

impl Logger {
    pub fn new(format: LogFormat, verbose: bool) -> Logger {
        Logger { format, verbose, file: None }
    }

    pub fn to_file(mut self, path: &std::path::Path) -> std::io::Result<Logger> {
        self.file = Some(Arc::new(Mutex::new(std::fs::File::create(path)?)));
        Ok(self)
    }

    /// Logs an event of `vm` with structured fields; `msg` is the human sentence.
    pub fn event(&self, vm: &str, kind: &str, msg: &str, fields: &[(&str, serde_json::Value)]) {
        let line = match self.format {
            LogFormat::Text => format!("{} [{vm}] {msg}", timestamp()),
            LogFormat::Json => {
                let mut o = serde_json::Map::new();
                o.insert("ts".into(), timestamp().into());
                o.insert("vm".into(), vm.into());
                o.insert("event".into(), kind.into());
                o.insert("msg".into(), msg.into());
                for (k, v) in fields {
                    o.insert((*k).into(), v.clone());
                }
                serde_json::Value::Object(o).to_string()
            }
        };
        match &self.file {
            Some(f) => {
                let _ = writeln!(f.lock().unwrap(), "{line}");
            }
            None => eprintln!("{line}"),
        }
    }

    /// Per-tick detail, only with `verbose`.
    pub fn debug(&self, vm: &str, msg: &str) {
        if self.verbose {
            self.event(vm, "debug", msg, &[]);
        }
    }
}

/// The present time as `YYYY-MM-DDTHH:MM:SS.mmmZ`.
pub fn timestamp() -> String {
    let d = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    format_utc(d.as_secs(), d.subsec_millis())
}

fn format_utc(secs: u64, millis: u32) -> String {
    let days = (secs / 86400) as i64;
    let rem = secs % 86400;
    // Howard Hinnant's days-to-civil.
    let z = days + 719468;
    let era = z.div_euclid(146097);
    let doe = z - era * 146097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{millis:03}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

#[cfg(test)]
mod tests {
    #[test]
    fn formats_utc() {
        assert_eq!(super::format_utc(0, 0), "1970-01-01T00:00:00.000Z");
        assert_eq!(super::format_utc(1_795_274_807, 479), "2026-11-21T15:26:47.479Z");
        assert_eq!(super::format_utc(951_782_400, 5), "2000-02-29T00:00:00.005Z");
    }
}
