//! `WanSpec` and `WanMix`: what distance a delay proxy emulates, as typed
//! on the command line (`--wan 100ms,10ms,stall=0.001`, `--wan-mix
//! 5,50,100,150`), and the delay each chunk of bytes gets. Pure: parsing,
//! printing and sampling, no I/O; [`crate::proxy::TcpProxy::with_wan`]
//! carries the delays out.
//!
//! What is modelled: a one-way delay `D` in each direction; jitter, each
//! chunk getting `D ± J` drawn uniformly (the proxy never lets a chunk
//! overtake the one before it, so a late chunk holds up those behind it, as
//! on a TCP link); and, with a small probability per chunk, a stall of
//! `2·D + 200 ms` on top, what a lost segment costs once TCP resends it
//! (Linux waits at least 200 ms plus the smoothed round trip). Not
//! modelled: bandwidth, loss without a stall, reordering (TCP hides it),
//! and different delays in the two directions.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use rand::Rng;

/// Longest one-way delay accepted: past this, a typo is likelier than a
/// player on the Moon.
pub const MAX_DELAY: Duration = Duration::from_secs(10);
/// The least a TCP retransmission waits on Linux (`TCP_RTO_MIN`).
pub const RTO_MIN: Duration = Duration::from_millis(200);

/// One emulated link: a one-way delay, its jitter and a stall probability.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct WanSpec {
    /// One-way delay, each direction.
    pub delay: Duration,
    /// Each chunk's delay is drawn from `delay ± jitter`.
    pub jitter: Duration,
    /// Probability that a chunk is held a further [`WanSpec::stall`].
    pub stall_probability: f64,
}

/// Why a `--wan` or `--wan-mix` value was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WanError {
    #[error("empty distance: give a one-way delay such as 100ms")]
    Empty,
    #[error(
        "{0:?} is not a duration: write a number with ms, s or us (100ms, 0.1s); a bare number is milliseconds"
    )]
    BadDuration(String),
    #[error("one-way delay {0:?} is longer than the 10 s this emulates")]
    TooLong(String),
    #[error(
        "jitter {jitter:?} is larger than the delay {delay:?}: a chunk cannot arrive before it was sent"
    )]
    JitterAboveDelay { jitter: String, delay: String },
    #[error("stall probability {0:?} must be a number from 0 to 1 (e.g. stall=0.001)")]
    BadStall(String),
    #[error("unknown part {0:?}: expected DELAY[,JITTER][,stall=P] (e.g. 100ms,10ms,stall=0.001)")]
    Unknown(String),
    #[error("{0:?} is given twice")]
    Twice(String),
}

impl WanSpec {
    /// A link with this one-way delay and nothing else.
    pub fn delay(delay: Duration) -> WanSpec {
        WanSpec {
            delay,
            ..WanSpec::default()
        }
    }

    /// The network's own round trip: twice the one-way delay.
    pub fn rtt(&self) -> Duration {
        self.delay * 2
    }

    /// What a stalled chunk waits on top of its delay: a resent segment
    /// leaves after the retransmission timeout (the round trip plus at
    /// least [`RTO_MIN`]).
    pub fn stall(&self) -> Duration {
        self.rtt() + RTO_MIN
    }

    /// The delay of one chunk: `delay ± jitter`, plus a stall with
    /// `stall_probability`. The caller keeps chunks in order.
    pub fn sample(&self, rng: &mut impl Rng) -> Duration {
        let mut delay = self.delay;
        if !self.jitter.is_zero() {
            let jitter_us = self.jitter.as_micros() as i64;
            let offset_us = rng.random_range(-jitter_us..=jitter_us);
            let base_us = self.delay.as_micros() as i64;
            delay = Duration::from_micros((base_us + offset_us).max(0) as u64);
        }
        if self.stall_probability > 0.0 && rng.random_bool(self.stall_probability) {
            delay += self.stall();
        }
        delay
    }

    /// Parses `DELAY[,JITTER][,stall=P]`. Durations take `ms`, `s` or `us`
    /// (a bare number is milliseconds); the jitter may be a share of the
    /// delay (`10%`).
    pub fn parse(text: &str) -> Result<WanSpec, WanError> {
        let mut parts = text.split(',').map(str::trim);
        let first = parts.next().unwrap_or_default();
        if first.is_empty() {
            return Err(WanError::Empty);
        }
        let delay = parse_delay(first)?;
        let mut spec = WanSpec::delay(delay);
        let mut jitter: Option<&str> = None;
        let mut stall: Option<&str> = None;
        for part in parts {
            let (slot, value, name) = match part.split_once('=') {
                Some(("stall", value)) => (&mut stall, value, "stall"),
                Some(("jitter", value)) => (&mut jitter, value, "jitter"),
                Some(_) => return Err(WanError::Unknown(part.to_string())),
                None => (&mut jitter, part, "jitter"),
            };
            if slot.replace(value.trim()).is_some() {
                return Err(WanError::Twice(name.to_string()));
            }
        }
        if let Some(jitter) = jitter {
            spec.jitter = parse_jitter(jitter, delay)?;
        }
        if let Some(stall) = stall {
            spec.stall_probability = parse_stall(stall)?;
        }
        Ok(spec)
    }
}

impl FromStr for WanSpec {
    type Err = WanError;

    fn from_str(text: &str) -> Result<WanSpec, WanError> {
        WanSpec::parse(text)
    }
}

/// Prints what [`WanSpec::parse`] reads back: `100ms`, `100ms,10ms`,
/// `100ms,10ms,stall=0.001`.
impl fmt::Display for WanSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", DurationText(self.delay))?;
        if !self.jitter.is_zero() {
            write!(f, ",{}", DurationText(self.jitter))?;
        }
        if self.stall_probability > 0.0 {
            write!(f, ",stall={}", self.stall_probability)?;
        }
        Ok(())
    }
}

/// Several distances in one run (`--wan-mix`): client `i` gets
/// `links[i % links.len()]`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct WanMix {
    pub links: Vec<WanSpec>,
}

impl WanMix {
    /// Parses `D1,D2,…[,jitter=J][,stall=P]`: one-way delays (a bare number
    /// is milliseconds), and a jitter (a duration, or a share of each
    /// delay such as `10%`) and stall probability that apply to each.
    pub fn parse(text: &str) -> Result<WanMix, WanError> {
        let mut delays = Vec::new();
        let mut jitter: Option<&str> = None;
        let mut stall: Option<&str> = None;
        for part in text.split(',').map(str::trim) {
            match part.split_once('=') {
                Some(("jitter", value)) => {
                    if jitter.replace(value.trim()).is_some() {
                        return Err(WanError::Twice("jitter".into()));
                    }
                }
                Some(("stall", value)) => {
                    if stall.replace(value.trim()).is_some() {
                        return Err(WanError::Twice("stall".into()));
                    }
                }
                Some(_) => return Err(WanError::Unknown(part.to_string())),
                None if part.is_empty() => return Err(WanError::Empty),
                None => delays.push(parse_delay(part)?),
            }
        }
        if delays.is_empty() {
            return Err(WanError::Empty);
        }
        let stall_probability = stall.map(parse_stall).transpose()?.unwrap_or(0.0);
        let links = delays
            .into_iter()
            .map(|delay| {
                Ok(WanSpec {
                    delay,
                    jitter: jitter
                        .map(|j| parse_jitter(j, delay))
                        .transpose()?
                        .unwrap_or_default(),
                    stall_probability,
                })
            })
            .collect::<Result<_, WanError>>()?;
        Ok(WanMix { links })
    }

    /// The link of client `client`: round-robin over the distances.
    pub fn for_client(&self, client: usize) -> Option<WanSpec> {
        (!self.links.is_empty()).then(|| self.links[client % self.links.len()])
    }
}

impl FromStr for WanMix {
    type Err = WanError;

    fn from_str(text: &str) -> Result<WanMix, WanError> {
        WanMix::parse(text)
    }
}

impl fmt::Display for WanMix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let links: Vec<String> = self.links.iter().map(ToString::to_string).collect();
        write!(f, "{}", links.join(" / "))
    }
}

/// A duration printed the way it is typed: `100ms`, `1.5ms`, `250us`.
struct DurationText(Duration);

impl fmt::Display for DurationText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let us = self.0.as_micros();
        if us.is_multiple_of(1000) {
            write!(f, "{}ms", us / 1000)
        } else {
            write!(f, "{us}us")
        }
    }
}

fn parse_delay(text: &str) -> Result<Duration, WanError> {
    let delay = parse_duration(text)?;
    if delay > MAX_DELAY {
        return Err(WanError::TooLong(text.to_string()));
    }
    Ok(delay)
}

/// A jitter: a duration, or a share of `delay` (`10%`); never above it.
fn parse_jitter(text: &str, delay: Duration) -> Result<Duration, WanError> {
    let jitter = match text.strip_suffix('%') {
        Some(percent) => {
            let share: f64 = percent
                .trim()
                .parse()
                .ok()
                .filter(|p: &f64| p.is_finite() && *p >= 0.0)
                .ok_or_else(|| WanError::BadDuration(text.to_string()))?;
            delay.mul_f64(share / 100.0)
        }
        None => parse_duration(text)?,
    };
    if jitter > delay {
        return Err(WanError::JitterAboveDelay {
            jitter: text.to_string(),
            delay: DurationText(delay).to_string(),
        });
    }
    Ok(jitter)
}

fn parse_stall(text: &str) -> Result<f64, WanError> {
    text.parse::<f64>()
        .ok()
        .filter(|p| (0.0..=1.0).contains(p))
        .ok_or_else(|| WanError::BadStall(text.to_string()))
}

/// `100ms`, `0.1s`, `250us`, or a bare number of milliseconds.
fn parse_duration(text: &str) -> Result<Duration, WanError> {
    let bad = || WanError::BadDuration(text.to_string());
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let value: f64 = number.parse().map_err(|_| bad())?;
    let seconds_per_unit = match unit.trim() {
        "" | "ms" => 1e-3,
        "s" => 1.0,
        "us" | "µs" => 1e-6,
        _ => return Err(bad()),
    };
    let seconds = value * seconds_per_unit;
    if !seconds.is_finite() || seconds > 1e6 {
        return Err(bad());
    }
    // Whole microseconds: the proxy's timers are no finer.
    Ok(Duration::from_micros((seconds * 1e6).round() as u64))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_delay_alone_a_jitter_and_a_stall_are_read() {
        assert_eq!(WanSpec::parse("100ms").unwrap(), WanSpec::delay(ms(100)));
        assert_eq!(WanSpec::parse("100").unwrap(), WanSpec::delay(ms(100)));
        assert_eq!(WanSpec::parse("0.15s").unwrap(), WanSpec::delay(ms(150)));
        assert_eq!(WanSpec::parse("0ms").unwrap(), WanSpec::delay(ms(0)));
        assert_eq!(
            WanSpec::parse(" 100ms , 20ms ").unwrap(),
            WanSpec {
                delay: ms(100),
                jitter: ms(20),
                stall_probability: 0.0
            }
        );
        assert_eq!(
            WanSpec::parse("100ms,10%,stall=0.001").unwrap(),
            WanSpec {
                delay: ms(100),
                jitter: ms(10),
                stall_probability: 0.001
            }
        );
        assert_eq!(
            WanSpec::parse("50ms,stall=0.01").unwrap(),
            WanSpec {
                delay: ms(50),
                jitter: ms(0),
                stall_probability: 0.01
            }
        );
        assert_eq!(
            WanSpec::parse("250us").unwrap().delay,
            Duration::from_micros(250)
        );
    }

    #[test]
    fn bad_input_is_refused_saying_what_to_write() {
        let cases: [(&str, &str); 9] = [
            ("", "give a one-way delay"),
            ("fast", "not a duration"),
            ("100 parsecs", "not a duration"),
            ("-5ms", "not a duration"),
            ("11s", "longer than the 10 s"),
            ("20ms,30ms", "larger than the delay"),
            ("100ms,stall=2", "from 0 to 1"),
            ("100ms,loss=0.1", "expected DELAY[,JITTER]"),
            ("100ms,1ms,2ms", "given twice"),
        ];
        for (text, says) in cases {
            let err = WanSpec::parse(text).unwrap_err().to_string();
            assert!(err.contains(says), "{text:?}: {err}");
        }
    }

    #[test]
    fn what_is_printed_is_read_back() {
        for text in ["100ms", "100ms,20ms", "5ms,500us,stall=0.001", "0ms"] {
            let spec = WanSpec::parse(text).unwrap();
            assert_eq!(spec.to_string(), text);
            assert_eq!(WanSpec::parse(&spec.to_string()).unwrap(), spec);
        }
    }

    #[test]
    fn a_mix_gives_each_client_a_distance_in_turn() {
        let mix = WanMix::parse("5,50,100ms,150").unwrap();
        let delays: Vec<Duration> = (0..6).map(|c| mix.for_client(c).unwrap().delay).collect();
        assert_eq!(delays, [ms(5), ms(50), ms(100), ms(150), ms(5), ms(50)]);

        let mix = WanMix::parse("50,100,jitter=10%,stall=0.001").unwrap();
        assert_eq!(mix.links[0].jitter, ms(5));
        assert_eq!(mix.links[1].jitter, ms(10));
        assert!(mix.links.iter().all(|l| l.stall_probability == 0.001));
        assert_eq!(
            mix.to_string(),
            "50ms,5ms,stall=0.001 / 100ms,10ms,stall=0.001"
        );

        assert_eq!(WanMix::default().for_client(3), None);
        for bad in [
            "",
            "jitter=5ms",
            "5,,10",
            "5,far",
            "5,10,jitter=6ms",
            "5,x=1",
        ] {
            assert!(WanMix::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn chunk_delays_stay_within_the_jitter_and_stalls_are_rare_and_long() {
        let mut rng = StdRng::seed_from_u64(7);
        let spec = WanSpec::parse("100ms,20ms").unwrap();
        let samples: Vec<Duration> = (0..10_000).map(|_| spec.sample(&mut rng)).collect();
        assert!(samples.iter().all(|d| (ms(80)..=ms(120)).contains(d)));
        // Both halves of the range are used.
        assert!(samples.iter().any(|d| *d < ms(85)) && samples.iter().any(|d| *d > ms(115)));

        let steady = WanSpec::delay(ms(30));
        assert!((0..100).all(|_| steady.sample(&mut rng) == ms(30)));

        let stalling = WanSpec::parse("50ms,stall=0.01").unwrap();
        assert_eq!(stalling.stall(), ms(300), "the round trip plus 200 ms");
        let stalls = (0..100_000)
            .filter(|_| stalling.sample(&mut rng) >= ms(350))
            .count();
        assert!((700..1300).contains(&stalls), "{stalls} stalls in 100 000");
    }
}
