pub mod archive;
pub mod bench;
pub mod config;
pub mod dead;
pub mod demo;
pub mod grants;
pub mod migrate;
pub mod relay;
pub mod stats;

/// Parses `5m`, `30s`, `1h30m`, `250ms`; a bare `0` means zero.
pub fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    if s.trim() == "0" {
        return Ok(std::time::Duration::ZERO);
    }
    humantime::parse_duration(s.trim())
        .map_err(|e| format!("{e} (expected a duration such as 30s, 5m, 1h)"))
}
