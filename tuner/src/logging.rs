//! The tuner's logger: the libraries' notes (`kernels`' declines and world
//! set-up, through the `log` facade) on standard error, as plain lines.
//! `COLLTUNE_LOG` sets the level: `off`, `error`, `warn`, `info` (the
//! default) or `debug`.

use log::{Level, LevelFilter, Log, Metadata, Record};

/// The variable that sets the level.
pub const LOG_ENV: &str = "COLLTUNE_LOG";

struct Stderr;

impl Log for Stderr {
    fn enabled(&self, metadata: &Metadata) -> bool {
        metadata.level() <= log::max_level()
    }

    fn log(&self, record: &Record) {
        if self.enabled(record.metadata()) {
            match record.level() {
                Level::Error | Level::Warn | Level::Info => eprintln!("{}", record.args()),
                _ => eprintln!("[{}] {}", record.target(), record.args()),
            }
        }
    }

    fn flush(&self) {}
}

/// The level `COLLTUNE_LOG` asks for, or why it is not one.
pub fn level_from(value: Option<&str>) -> Result<LevelFilter, String> {
    match value.map(str::trim) {
        None | Some("") | Some("info") => Ok(LevelFilter::Info),
        Some("off") => Ok(LevelFilter::Off),
        Some("error") => Ok(LevelFilter::Error),
        Some("warn") => Ok(LevelFilter::Warn),
        Some("debug") => Ok(LevelFilter::Debug),
        Some(other) => Err(format!(
            "{LOG_ENV}={other}: expected off, error, warn, info or debug"
        )),
    }
}

/// Installs the logger once, at the level of `COLLTUNE_LOG`.
pub fn init() -> Result<(), String> {
    let level = level_from(std::env::var(LOG_ENV).ok().as_deref())?;
    static LOGGER: Stderr = Stderr;
    log::set_logger(&LOGGER).map_err(|e| e.to_string())?;
    log::set_max_level(level);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_are_read_and_refused_by_name() {
        assert_eq!(level_from(None), Ok(LevelFilter::Info));
        assert_eq!(level_from(Some("warn")), Ok(LevelFilter::Warn));
        assert_eq!(level_from(Some("off")), Ok(LevelFilter::Off));
        assert_eq!(
            level_from(Some("loud")),
            Err("COLLTUNE_LOG=loud: expected off, error, warn, info or debug".to_string())
        );
    }
}
