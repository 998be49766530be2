//! The line a server prints on stdout once it serves:
//! `borbaman-server listening on <addr> id=<id>`, and ` metrics=<addr>`
//! when it serves `/metrics`. Launchers (the local
//! cluster, tests) wait for it. Written by [`ReadyLine`]'s `Display` and read
//! by [`ReadyLine::parse`], nowhere else.

use std::fmt;

const PREFIX: &str = "borbaman-server listening on ";

/// What a ready server announces.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadyLine {
    /// `host:port` it listens on (the real port when it was given port 0).
    pub address: String,
    /// Its registry id.
    pub id: String,
    /// `host:port` of its `/metrics`, if it serves them.
    pub metrics: Option<String>,
}

impl ReadyLine {
    /// The announcement in `line`, or `None` if `line` is something else.
    pub fn parse(line: &str) -> Option<ReadyLine> {
        let rest = line.trim().strip_prefix(PREFIX)?;
        let mut parts = rest.split_whitespace();
        let address = parts.next()?.to_string();
        let (mut id, mut metrics) = (String::new(), None);
        for part in parts {
            if let Some(v) = part.strip_prefix("id=") {
                id = v.to_string();
            } else if let Some(v) = part.strip_prefix("metrics=") {
                metrics = Some(v.to_string());
            }
        }
        Some(ReadyLine {
            address,
            id,
            metrics,
        })
    }
}

impl fmt::Display for ReadyLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{PREFIX}{} id={}", self.address, self.id)?;
        if let Some(metrics) = &self.metrics {
            write!(f, " metrics={metrics}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_written_is_read_back() {
        let line = ReadyLine {
            address: "127.0.0.1:4242".into(),
            id: "abc-1".into(),
            metrics: None,
        };
        assert_eq!(ReadyLine::parse(&format!("{line}\n")), Some(line.clone()));
        let with_metrics = ReadyLine {
            metrics: Some("127.0.0.1:9464".into()),
            ..line
        };
        assert_eq!(
            ReadyLine::parse(&with_metrics.to_string()),
            Some(with_metrics)
        );
        assert_eq!(ReadyLine::parse("some log line"), None);
    }
}
