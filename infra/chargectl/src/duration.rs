//! A tiny duration parser for flags such as `--older-than 23h`.
//!
//! Accepts one or more `<whole number><unit>` parts, units `s`, `m`, `h`, `d` (seconds, minutes,
//! hours, days): `90s`, `15m`, `23h`, `2d`, `1h30m`. Anything else — no unit, an unknown unit, a
//! sign, a fraction, spaces, an overflow — is refused with a message saying what is accepted.

use std::time::Duration;

const ACCEPTED: &str = "expected a duration such as 90s, 15m, 23h, 2d or 1h30m";

/// Parses `raw` (see the module docs). Usable as a clap `value_parser`.
pub fn parse_duration(raw: &str) -> Result<Duration, String> {
    let bad = |why: &str| format!("invalid duration {raw:?}: {why}; {ACCEPTED}");
    if raw.is_empty() {
        return Err(bad("it is empty"));
    }
    let mut total: u64 = 0;
    let mut rest = raw;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(bad("each part must start with a whole number"));
        }
        let (number, after) = rest.split_at(digits);
        let unit = after.chars().next().ok_or_else(|| bad("missing unit"))?;
        let seconds_per_unit: u64 = match unit {
            's' => 1,
            'm' => 60,
            'h' => 3_600,
            'd' => 86_400,
            other => return Err(bad(&format!("unknown unit {other:?}"))),
        };
        let value: u64 = number.parse().map_err(|_| bad("number too large"))?;
        total = value
            .checked_mul(seconds_per_unit)
            .and_then(|secs| total.checked_add(secs))
            .ok_or_else(|| bad("too large"))?;
        rest = &after[unit.len_utf8()..];
    }
    Ok(Duration::from_secs(total))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_each_unit_and_combinations() {
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("15m"), Ok(Duration::from_secs(900)));
        assert_eq!(parse_duration("23h"), Ok(Duration::from_secs(23 * 3600)));
        assert_eq!(parse_duration("2d"), Ok(Duration::from_secs(2 * 86_400)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5_400)));
        assert_eq!(parse_duration("0s"), Ok(Duration::ZERO));
        assert_eq!(
            parse_duration("1d2h3m4s"),
            Ok(Duration::from_secs(86_400 + 7_200 + 180 + 4))
        );
    }

    #[test]
    fn refuses_junk_with_a_clear_message() {
        for junk in [
            "",
            "5x",
            "5",
            "h",
            "-5m",
            "+5m",
            "1.5h",
            " 5m",
            "5m ",
            "5 m",
            "5M",
            "5mm",
            "m5",
            "5µ",
            "99999999999999999999s",
            "9999999999999999d",
        ] {
            let err = parse_duration(junk).expect_err(junk);
            assert!(err.contains("expected a duration such as"), "{junk}: {err}");
            assert!(err.contains(&format!("{junk:?}")), "{junk}: {err}");
        }
    }
}
